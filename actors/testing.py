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

Before deploying changed code, check it against recorded histories::

    problems = await replay_check("./state", [order, payment])
    assert not problems, "\\n".join(map(str, problems))
"""

from __future__ import annotations

import os
import random as _random
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from storage import Journal, JournalLocked, LMDBJournal, MemoryJournal

from ._instance import Actor
from ._process import ProcessDef
from ._open import open_system
from ._system import ActorSystem

__all__ = ["open_test_system", "replay_check", "ReplayProblem", "TEST_EPOCH"]

#: The wall-clock epoch that virtual time 0 maps to in `open_test_system`.
TEST_EPOCH = 1_800_000_000.0


def _virtual_wall() -> float:
    return TEST_EPOCH + trio.current_time()


@asynccontextmanager
async def open_test_system(
    processes: Iterable[ProcessDef],
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
    processes: Iterable[ProcessDef],
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
        system = ActorSystem(
            journal, processes, _random.Random(0),
            passivate_after=0, max_sync_steps=1, max_payload=1 << 30, now=_virtual_wall,
        )  # fmt: skip
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


async def _replay_one(
    system: ActorSystem, row: Any, proc: ProcessDef, log: dict[int, Any]
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
