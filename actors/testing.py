"""Testing processes: a system on virtual time, an always-replay mode, and a
replay check for changed code.

A pytest recipe (pytest-trio with ``trio_mode = true``)::

    import pytest
    from actors.testing import open_test_system

    @pytest.fixture
    async def system(autojump_clock):
        async with open_test_system([order]) as system:
            yield system

    async def test_order_times_out(system, autojump_clock):  # the test asks for the clock too
        handle = await system.start(order, "o-1", amount=5)
        with pytest.raises(actors.ProcessFailed, match="no approval"):
            await handle.result()           # three days pass in milliseconds

Wait until the system has nothing left to do, then read what it did::

    await system.send("orders/o-1", approve)
    await wait_quiescent(system)            # taken, handled, written
    assert "completed" == system.get("orders/o-1").status

Before deploying changed code, check it against recorded histories::

    problems = await replay_check("./state", [order, payment])
    assert not problems, "\\n".join(map(str, problems))

or against a history taken home from production (``python -m actors
export orders/o-17 > order-17.history``; see docs/histories.md)::

    assert [] == await replay_history("order-17.history", [order, payment])

Run a workload under crashes, journal faults and every scheduling order a
seed picks, replayable from that seed (see `simulate`)::

    report = simulate([order], place_orders, seed=7)
    print(report.digest)                    # the same on every run of seed 7
"""

from __future__ import annotations

import math
import os
import random as _random
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

from storage import (
    InstanceRow,
    Journal,
    JournalFaults,
    JournalLocked,
    LMDBJournal,
    MemoryJournal,
    instance_id,
)

from ._kernel._process import ProcessDef
from ._kernel._public import name_public_classes
from ._system._facade import ActorSystem
from ._system._open import open_system
from ._tools import _history
from ._tools._replaying import (
    ReplayProblem,
    check_definitions,
    checking_system,
    read_history_file,
    replay_one,
    shown,
    unreplayed,
)
from ._tools._simulate import (
    TEST_EPOCH,
    Simulation,
    SimulationHung,
    SimulationReport,
    simulate,
)
from ._tools._simulation import virtual_wall as _virtual_wall
from .errors import InvalidArguments

__all__ = [
    "TEST_EPOCH",
    "JournalFaults",
    "ReplayProblem",
    "Simulation",
    "SimulationHung",
    "SimulationReport",
    "import_history",
    "open_test_system",
    "replay_check",
    "replay_history",
    "simulate",
    "wait_quiescent",
]


@asynccontextmanager
async def open_test_system(
    processes: Iterable[ProcessDef[..., Any]],
    *,
    journal: Journal | None = None,
    always_replay: bool = False,
    random: _random.Random | None = None,
    **options: Any,
) -> AsyncIterator[ActorSystem]:
    """A system for tests: on a fresh `MemoryJournal` (or ``journal``), with
    epoch time tied to trio's clock so a ``MockClock`` (pytest-trio's
    ``autojump_clock``) drives durable timers: a 30-day sleep takes
    milliseconds, and virtual time carries across a close and reopen.

    Args:
        always_replay: drop every instance from memory at every suspension,
            so each resume goes through replay; code that only works while
            it stays in memory (state in globals, say) shows up at once.
        random: the random source (default: seeded with 0, reproducible).
        **options: passed to `open_system` (``passivate_after``, ...).
    """
    if always_replay:
        options["passivate_after"] = 0
    options.setdefault("now", _virtual_wall)
    async with open_system(
        journal if journal is not None else MemoryJournal(),
        processes,
        random if random is not None else _random.Random(0),
        **options,
    ) as system:
        yield system


async def wait_quiescent(system: ActorSystem, *, timeout: float | None = None) -> None:
    """Wait until ``system`` has nothing left to do until something new
    arrives: then what a test reads (statuses, the journal) stays as it is.

    Quiescent means, all at once:

    - no instance is runnable: every instance in memory is parked on its
      waits (a signal, a timer, a child), with no step in flight (a sync
      step's thread included), no cancel or restart being handled, and none
      waiting out a restart delay; none is being loaded, created or cancelled;
    - no write is pending: every instance's writes are durable (a suspended
      instance's deferred take and status too), and so is everything else
      submitted to the journal before the last check;
    - no task of the trio run can take a step (`trio.testing.wait_all_tasks_blocked`):
      a task of the test's own that never blocks (a loop of ``trio.sleep(0)``)
      keeps this waiting.

    An instance waiting on a timer that is not due yet is quiescent: no
    virtual time passes once the system is quiescent, so under
    ``autojump_clock`` this returns before the next timer fires, and a test
    moves time on itself (``await trio.sleep(...)``). Until then, waiting
    lets the clock autojump as usual (a deferred write goes within its
    window; a restart delay passes). On a real clock, a timer falling due
    during the final check is seen by the next call.

    A "nothing happened twice" check reads the journal after this: it can
    still fail, since everything the system would do is done by then.

    Args:
        timeout: give up after this many seconds of trio's clock (virtual
            time under a MockClock).

    Raises:
        trio.TooSlowError: ``timeout`` passed first; the message says what
            was still busy.
    """
    busy: str | None = "not checked yet"
    poll = _POLL_FIRST
    try:
        with trio.fail_after(math.inf if timeout is None else timeout):
            while True:
                await trio.testing.wait_all_tasks_blocked()
                busy = _busy(system)
                if busy is None:
                    # Writes of the system's own tasks (a timer's delivery,
                    # a queue's admission) are in no instance's ticket: wait
                    # for everything submitted so far, then look once more.
                    await system.journal.flush()
                    await trio.testing.wait_all_tasks_blocked()
                    busy = _busy(system)
                    if busy is None:
                        return
                await trio.sleep(poll)
                poll = min(2 * poll, _POLL_MAX)
    except trio.TooSlowError:
        raise trio.TooSlowError(
            f"the system was not quiescent within {timeout} s: {busy}"
        ) from None


# Seconds between looks while something is busy: soon at first, then less
# often (a long step under a real clock, a timeout under autojump).
_POLL_FIRST = 0.001
_POLL_MAX = 0.01


def _busy(system: ActorSystem) -> str | None:
    """What keeps ``system`` from being quiescent (see `wait_quiescent`), or None."""
    for what, iids in (
        ("being loaded", system.registry.activating),
        ("being created", system.lifecycle.creating),
        ("being cancelled", system.lifecycle.cancelling),
    ):
        if iids:
            return f"{len(iids)} instance(s) {what}"
    for actor in system.registry.live.values():
        if actor.done:
            why = "ending"
        elif actor.busy:
            why = "running a step (or other work of an effect)"
        elif actor.parked is None or actor.woken or actor.interrupt is not None:
            why = "runnable"
        elif actor.writes.txn.ops or (
            actor.writes.ticket is not None and not actor.writes.ticket.done
        ):
            why = "writing to the journal"
        else:
            continue
        return f"{actor.address} is {why}"
    return None


async def replay_check(
    journal_or_path: Journal | str | os.PathLike[str],
    processes: Iterable[ProcessDef[..., Any]],
    *,
    include_finished: bool = False,
) -> list[ReplayProblem]:
    """Replay every recorded instance against the current code, running nothing.

    Each instance's current run is replayed from its log (steps, waits,
    timers and children answered from the record) up to where its history
    ends. Reports every `NonDeterminismError` with the instance, the
    position and what differed: run it before deploying changed code.

    Args:
        journal_or_path: a journal (opened here unless a system in this
            process has it open), or the path of an LMDB journal.
        processes: the current definitions.
        include_finished: also check completed/failed/cancelled instances
            (they never replay again, so a mismatch there is only a warning).

    Returns:
        The problems found; empty if the code matches every history.

    Raises:
        InvalidArguments: ``processes`` is no collection of ``@process`` definitions.
    """
    processes = check_definitions(processes, "replay_check")
    journal = (
        journal_or_path if isinstance(journal_or_path, Journal) else LMDBJournal(journal_or_path)
    )
    try:
        await journal.open()
        owns = True
    except JournalLocked:
        if not isinstance(journal_or_path, Journal):
            raise
        owns = False  # a journal object a system here already has open
    try:
        system = checking_system(journal, processes)
        statuses = ["running", "suspended", "compensation_stuck"]
        if include_finished:
            statuses += ["completed", "failed", "cancelled"]

        def scan(r: Any) -> list[Any]:
            return [
                (row, r.entries(row.iid, row.record.run))
                for status in statuses
                for row in r.instances(status)
            ]

        problems = []
        for row, log in await journal.read(scan):
            proc = system.registry.procs.get(row.process)
            if proc is None:
                continue
            problem = await replay_one(system, row, proc, log)
            if problem is not None:
                problems.append(problem)
        return problems
    finally:
        if owns:
            await journal.close()


async def replay_history(
    path: str | os.PathLike[str], processes: Iterable[ProcessDef[..., Any]]
) -> list[ReplayProblem]:
    """Replay a history file (``python -m actors export ADDRESS > FILE``)
    against the current code, running nothing, as `replay_check` replays a
    journal: for a test that a fix (or a refactoring) still fits what
    production recorded.

    Every instance in the file (the exported one and its descendants) is
    replayed from its current run's log, whatever its status (a failed
    order's history is the usual one to take home). Values of
    ``@serializable`` classes are read as those classes: import the modules
    that define them first. See docs/histories.md for the format.

    Args:
        path: the history file.
        processes: the current definitions.

    Returns:
        The problems found, empty if the code makes every recorded effect
        in its order; an instance whose process is not in ``processes``, or
        whose params and input its function does not take, is a problem too.

    Raises:
        HistoryFormatError: the file is not a history, is damaged, is of a
            format version this code does not read, or cannot be read (none
            there, a directory: the error it met is its ``__cause__``).
        InvalidArguments: ``path`` is no path, or ``processes`` no
            collection of ``@process`` definitions.
    """
    processes = check_definitions(processes, "replay_history")
    history = await read_history_file(path, "replay_history")
    journal = MemoryJournal()  # nothing is read from it: the file holds the history
    await journal.open()
    try:
        system = checking_system(journal, processes)
        problems = []
        for one in history.instances:
            proc = system.registry.procs.get(one.process)
            row = InstanceRow(
                instance_id(one.address), one.address, one.process, one.status, one.record
            )
            if proc is None:
                problems.append(
                    unreplayed(
                        one,
                        f"its process {one.process!r} is not among the processes given; "
                        "pass its definition to check its history",
                    )
                )
                continue
            try:
                problem = await replay_one(system, row, proc, one.log)
            except InvalidArguments as exc:  # its params or input do not fit the code
                problem = unreplayed(one, str(exc))
            if problem is not None:
                problems.append(problem)
        return problems
    finally:
        await journal.close()


async def import_history(
    path: str | os.PathLike[str], journal: Journal, *, replace: bool = False
) -> list[str]:
    """Put a history file's instances into ``journal``, as ``python -m
    actors import FILE`` does, so that a system opened on it resumes them
    (and a debugger can watch them run): in one transaction, all or none.

    Args:
        path: the history file.
        journal: a journal no running system holds (opened and closed here).
        replace: put each instance in place of one at its address, instead
            of refusing.

    Returns:
        The addresses imported, the exported instance first.

    Raises:
        HistoryFormatError: the file is not a history this code reads, or
            cannot be read (see `replay_history`).
        InvalidArguments: ``path`` is no path, or ``journal`` no `Journal`.
        AlreadyStarted: an instance is at one of its addresses (without
            ``replace``); nothing was written.
        JournalLocked: a running system holds ``journal``.
    """
    if not isinstance(journal, Journal):
        raise InvalidArguments(
            f"import_history takes the journal to import into (a storage.Journal such as "
            f"LMDBJournal(path)), not {shown(journal)}"
        )
    history = await read_history_file(path, "import_history")
    await journal.open()
    try:
        await _history.import_history(journal, history, replace=replace)
    finally:
        await journal.close()
    return [one.address for one in history.instances]


name_public_classes(globals(), __name__)
