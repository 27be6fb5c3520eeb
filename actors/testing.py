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
import uuid as _uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs
import trio
import trio.testing

from storage import (
    InstanceRow,
    Journal,
    JournalFaults,
    JournalLocked,
    LMDBJournal,
    MemoryJournal,
    SimulatedJournal,
    WriteLog,
    instance_id,
)

from . import _history
from ._instance import Actor
from ._process import ProcessDef
from ._open import open_system
from ._system import ActorSystem
from .errors import InvalidArguments

__all__ = [
    "open_test_system",
    "wait_quiescent",
    "replay_check",
    "replay_history",
    "import_history",
    "ReplayProblem",
    "TEST_EPOCH",
    "simulate",
    "Simulation",
    "SimulationReport",
    "JournalFaults",
]

#: The wall-clock epoch that virtual time 0 maps to in `open_test_system`.
TEST_EPOCH = 1_800_000_000.0


def _virtual_wall() -> float:
    return TEST_EPOCH + trio.current_time()


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
        ("being loaded", system._activating),
        ("being created", system._creating),
        ("being cancelled", system._cancelling),
    ):
        if iids:
            return f"{len(iids)} instance(s) {what}"
    for actor in system._live.values():
        if actor.done:
            why = "ending"
        elif actor.busy:
            why = "running a step (or other work of an effect)"
        elif actor.parked is None or actor.woken or actor.interrupt is not None:
            why = "runnable"
        elif actor.txn.ops or (actor.ticket is not None and not actor.ticket.done):
            why = "writing to the journal"
        else:
            continue
        return f"{actor.address} is {why}"
    return None


@attrs.frozen
class ReplayProblem:
    """An instance whose recorded history the current code does not match."""

    address: str
    process: str
    status: str
    position: int
    expected: Any  # what the log holds there (kind, name), or None
    found: Any  # what the code asked for there, or None (it stopped early)
    message: str

    def __str__(self) -> str:
        return f"{self.address} ({self.status}) at effect {self.position}: {self.message}"


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
    """
    journal = (
        journal_or_path
        if isinstance(journal_or_path, Journal)
        else LMDBJournal(journal_or_path)
    )
    try:
        await journal.open()
        owns = True
    except JournalLocked:
        if not isinstance(journal_or_path, Journal):
            raise
        owns = False  # a journal object a system here already has open
    try:
        system = _checking_system(journal, processes)
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
            proc = system._procs.get(row.process)
            if proc is None:
                continue
            problem = await _replay_one(system, row, proc, log)
            if problem is not None:
                problems.append(problem)
        return problems
    finally:
        if owns:
            await journal.close()


def _checking_system(journal: Journal, processes: Iterable[ProcessDef[..., Any]]) -> ActorSystem:
    """The system a replay check builds its actors in: it never runs one."""
    return ActorSystem(
        journal, processes, _random.Random(0),
        passivate_after=0, max_sync_steps=1, max_payload=1 << 30, now=_virtual_wall,
    )  # fmt: skip


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
        HistoryFormatError: the file is not a history, is damaged, or is of
            a format version this code does not read.
        OSError: the file cannot be read.
    """
    history = _history.loads(await trio.Path(path).read_bytes())
    journal = MemoryJournal()  # nothing is read from it: the file holds the history
    await journal.open()
    try:
        system = _checking_system(journal, processes)
        problems = []
        for one in history.instances:
            proc = system._procs.get(one.process)
            row = InstanceRow(
                instance_id(one.address), one.address, one.process, one.status, one.record
            )
            if proc is None:
                problems.append(ReplayProblem(
                    address=one.address, process=one.process, status=one.status, position=0,
                    expected=None, found=None,
                    message=f"its process {one.process!r} is not among the processes given; "
                    "pass its definition to check its history",
                ))  # fmt: skip
                continue
            try:
                problem = await _replay_one(system, row, proc, one.log)
            except InvalidArguments as exc:  # its params or input do not fit the code
                problem = ReplayProblem(
                    address=one.address, process=one.process, status=one.status, position=0,
                    expected=None, found=None, message=str(exc),
                )  # fmt: skip
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
        HistoryFormatError: the file is not a history this code reads.
        AlreadyStarted: an instance is at one of its addresses (without
            ``replace``); nothing was written.
        JournalLocked: a running system holds ``journal``.
    """
    history = _history.loads(await trio.Path(path).read_bytes())
    await journal.open()
    try:
        await _history.import_history(journal, history, replace=replace)
    finally:
        await journal.close()
    return [one.address for one in history.instances]


async def _replay_one(
    system: ActorSystem, row: Any, proc: ProcessDef[..., Any], log: dict[int, Any]
) -> ReplayProblem | None:
    actor = Actor(system, row.iid, row.address, proc, row.record)
    exc = await actor.check_history(log)
    if exc is None:
        return None
    return ReplayProblem(
        address=row.address,
        process=row.process,
        status=row.status,
        position=exc.position,
        expected=exc.expected,
        found=exc.found,
        message=str(exc),
    )


# -- deterministic simulation -----------------------------------------------------


@attrs.frozen
class SimulationReport:
    """What `simulate` saw: the digest of the run's journal writes, and a trace.

    Two runs of one seed, with the same code and workload, give the same
    ``digest`` (of every transaction written, byte for byte, in order, and
    of every fault and crash). ``failure`` is what ended the run early (an
    invariant a check found broken, or an error of the runtime), or None.
    ``trace`` holds the last journal commits, faults, crashes and notes;
    ``schedule`` the names of the last tasks trio's scheduler ran.
    """

    seed: int
    digest: str
    commits: int
    writes: int
    crashes: int
    seconds: float
    trace: tuple[str, ...]
    schedule: tuple[str, ...]
    failure: BaseException | None = None

    @property
    def ok(self) -> bool:
        """Whether the run ended without a failure."""
        return self.failure is None

    def explain(self) -> str:
        """The failure (if any), then the trace and the last scheduler picks."""
        lines = [
            f"seed {self.seed}: {self.commits} commits, {self.writes} transactions written, "
            f"{self.crashes} crash(es), {self.seconds:.3f} virtual seconds, digest {self.digest}"
        ]
        if self.failure is not None:
            lines.append(f"failure: {type(self.failure).__name__}: {self.failure}")
        lines.append("last journal events (virtual time, newest last):")
        lines += [f"  {line}" for line in self.trace]
        lines.append("last scheduler picks: " + ", ".join(self.schedule))
        return "\n".join(lines)


class Simulation:
    """What a workload sees of a run of `simulate`.

    ``system`` is the system of the host's current life (a new one after
    each crash; ``life`` counts them from 0); ``random`` is the workload's
    own random source, derived from the seed; ``journal`` the
    `storage.SimulatedJournal` every life shares.
    """

    def __init__(
        self, seed: int, journal: SimulatedJournal, clock: trio.testing.MockClock
    ) -> None:
        self.seed = seed
        self.random = _random.Random(f"{seed}:workload")
        self.journal = journal
        self.life = 0
        self.crashes = 0
        self._clock = clock
        self._system: ActorSystem | None = None

    @property
    def system(self) -> ActorSystem:
        """The running system of this life.

        Raises:
            RuntimeError: between lives (no system runs).
        """
        if self._system is None:
            raise RuntimeError("no system runs now: the host is down between two lives")
        return self._system

    def jump(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` at once (a clock jump)."""
        self.journal.log.event(f"clock jumps {seconds:.3f} s")
        self._clock.jump(seconds)

    def note(self, text: str) -> None:
        """Add ``text`` to the trace (the digest leaves notes out)."""
        self.journal.log.note(text)


def simulate(
    processes: Iterable[ProcessDef[..., Any]],
    workload: Callable[[Simulation], Awaitable[None]],
    *,
    seed: int,
    crashes: int = 2,
    crash_within: int = 300,
    faults: JournalFaults | None = None,
    durability: str = "sync",
    settle: float = 600.0,
    check: Callable[[Simulation], Awaitable[None]] | None = None,
    trace: int = 40,
    **options: Any,
) -> SimulationReport:
    """Run ``workload`` against a system of ``processes`` in a deterministic
    simulation: one seed fixes the order in which trio runs tasks, the
    clock, the journal's commits and faults, and where the host crashes.

    The run is its own ``trio.run`` on a ``MockClock`` (autojump at once:
    timers of days pass in milliseconds), with trio's scheduler made
    deterministic and seeded, on a `storage.SimulatedJournal`. Sync steps
    run on the trio thread (as with ``thread=False``) and take no virtual
    time; ``uuid.uuid4`` gives seeded values inside the run. The host
    crashes (0 to ``crashes`` times) at a commit the seed picks among the
    next ``crash_within``, before or after that commit is written: the
    system and every task of that life are gone, the journal keeps what was
    committed, and a new system opens on it; ``workload(sim)`` is called
    again for each life (keep its progress in its own state, and carry on).
    Once the workload returns, the host runs ``settle`` virtual seconds
    with faults and crashes still armed, then ``settle`` more without them,
    and then ``check(sim)`` is called with the last system still open.

    Two runs of a seed write the same bytes, in one process or in two
    (whatever their ``PYTHONHASHSEED``: the runtime wakes instances that
    fall due together in a fixed order). Threads, real time and real I/O in
    the workload or its steps are outside the simulation: use
    ``trio.sleep`` for time, not ``time``.

    Args:
        processes: the definitions the system runs.
        workload: ``async def workload(sim)``: drives ``sim.system`` as
            clients would; raise to report a broken expectation.
        seed: what the whole run is a function of.
        crashes: the most host crashes in the run.
        crash_within: how many commits ahead a crash may be placed.
        faults: the journal's faults (`JournalFaults`; default: none).
        durability: the journal's (``"sync"`` or ``"async"``).
        settle: virtual seconds to settle, twice (see above).
        check: ``async def check(sim)``, run at the end; raise to fail.
        trace: how many journal events and scheduler picks to keep.
        **options: passed to `open_system` (``queues``, ``passivate_after``, ...).

    Returns:
        A `SimulationReport`; its ``failure`` is what the workload, the
        check or the runtime raised (outside a crash), else None.
    """
    processes = list(processes)
    clock = trio.testing.MockClock(autojump_threshold=0)
    log = WriteLog(keep=trace)
    journal = SimulatedJournal(
        _random.Random(f"{seed}:journal"),
        faults=faults if faults is not None else JournalFaults(),
        durability=durability,
        log=log,
    )
    sim = Simulation(seed, journal, clock)
    picks = _Picks(trace)
    plan = _random.Random(f"{seed}:crashes")
    failure: BaseException | None = None
    root: list[trio.lowlevel.Task] = []

    async def main() -> None:
        task = trio.lowlevel.current_root_task()
        assert task is not None
        root.append(task)
        planned = plan.randint(0, crashes)
        calm = journal.faults.quiet()
        while True:
            if sim.crashes < planned:
                journal.crash_at = log.commits + plan.randint(1, crash_within)
                journal.crash_after_write = plan.random() < 0.5
            await _live(sim, processes, workload, check, settle, calm, options)
            if not journal.crashed:
                return
            sim.crashes += 1
            sim.life += 1
            journal.recover()

    with _deterministic(seed, root):
        try:
            trio.run(main, clock=clock, instruments=[picks])
        except Exception as exc:  # noqa: BLE001 - reported, with the trace
            failure = exc
    return SimulationReport(
        seed=seed,
        digest=log.hexdigest(),
        commits=log.commits,
        writes=log.writes,
        crashes=sim.crashes,
        seconds=clock.current_time(),
        trace=tuple(log.recent),
        schedule=tuple(picks.picks),
        failure=failure,
    )


async def _live(
    sim: Simulation,
    processes: list[ProcessDef[..., Any]],
    workload: Callable[[Simulation], Awaitable[None]],
    check: Callable[[Simulation], Awaitable[None]] | None,
    settle: float,
    calm: JournalFaults,
    options: dict[str, Any],
) -> None:
    """One life of the host: open a system, run the workload, settle, check;
    return early (quietly) if the host crashes."""
    journal = sim.journal
    with trio.CancelScope() as host:
        journal.on_crash = host.cancel
        try:
            async with open_system(
                journal, processes, _random.Random(f"{sim.seed}:system:{sim.life}"),
                now=_virtual_wall, control=False, **options,
            ) as system:  # fmt: skip
                sim._system = system
                await workload(sim)
                await trio.sleep(settle)
                journal.crash_at = None  # the run settles without faults from here
                journal.faults = calm
                await trio.sleep(settle)
                if check is not None:
                    await check(sim)
        except BaseException as exc:
            if not journal.crashed or isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            # What a dying host raised (its writes refused, its tasks
            # cancelled) died with it.
        finally:
            sim._system = None
            journal.on_crash = None


class _Picks(trio.abc.Instrument):
    """Keeps the names of the last tasks the scheduler ran."""

    def __init__(self, keep: int) -> None:
        self.picks: deque[str] = deque(maxlen=keep)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.picks.append(task.name)


@contextmanager
def _deterministic(seed: int, root: list[trio.lowlevel.Task]) -> Iterator[None]:
    """Make a trio run (whose root task ``root`` will hold) a function of ``seed``.

    trio shuffles each batch of runnable tasks with ``trio._core._run._r``;
    with ``_ALLOW_DETERMINISTIC_SCHEDULING`` (what Hypothesis turns on) it
    sorts the batch by task creation first, so a seeded ``_r`` gives the
    same order on every run. Worker threads finish when the OS says, so
    ``trio.to_thread.run_sync`` runs its function inline in that run; and
    the runtime draws ask ids from ``uuid.uuid4``, which gives seeded values
    there. Everything is put back afterwards; other trio runs (in other
    threads) keep the real ones.
    """
    run = trio._core._run
    saved = (run._ALLOW_DETERMINISTIC_SCHEDULING, run._r.getstate())
    real_run_sync = trio.to_thread.run_sync
    real_uuid4 = _uuid.uuid4
    ids = _random.Random(f"{seed}:uuid")

    def ours() -> bool:
        return trio.lowlevel.in_trio_run() and bool(root) and (
            trio.lowlevel.current_root_task() is root[0]
        )

    async def run_sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not ours():
            return await real_run_sync(fn, *args, **kwargs)
        await trio.lowlevel.checkpoint()
        return fn(*args)

    def uuid4() -> _uuid.UUID:
        if not ours():
            return real_uuid4()
        return _uuid.UUID(int=ids.getrandbits(128), version=4)

    setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", True)
    run._r.seed(f"{seed}:scheduler")
    setattr(trio.to_thread, "run_sync", run_sync)
    setattr(_uuid, "uuid4", uuid4)
    try:
        yield
    finally:
        setattr(_uuid, "uuid4", real_uuid4)
        setattr(trio.to_thread, "run_sync", real_run_sync)
        setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", saved[0])
        run._r.setstate(saved[1])
