"""The background services ride out a journal that cannot take their writes.

`Faulty` is a `MemoryJournal` that, while ``fault`` is set, refuses the
admissions of queues (the transactions that expect the ``queue/<name>``
state row) with that error, and takes every other transaction: so the
error reaches only the queue pump, the way a full map or a lost
connection reaches whichever writer meets it first. The system stays up,
says so once per outage, and the queued instances start once the journal
takes writes again. `JournalWatch.keep_running`, which runs every
background service, runs one again after such an error, also inside an
`ExceptionGroup` of the service's own tasks, and hides nothing else.
Virtual time (the autojump clock); the real thing on PostgreSQL, behind a
TCP proxy, is in tests/features/test_queues_pg.py.
"""

from __future__ import annotations

import logging

import pytest
import trio

import actors
from actors import Context, Queue, process
from actors._kernel._outages import JournalWatch
from storage import MemoryJournal, Txn, instance_id
from storage._journal import Settled, Ticket
from storage.errors import (
    CommitOutcomeUnknown,
    JournalDiskFull,
    JournalFull,
    JournalUnavailable,
)

STARTED: list[str] = []


async def work(name: str, seconds: float) -> str:
    STARTED.append(name)
    await trio.sleep(seconds)
    return name


@process("bjob/:name")
async def bjob(ctx: Context, name: str, *, seconds: float = 1.0) -> str:
    return await ctx.step(work, name, seconds)


@pytest.fixture(autouse=True)
def _reset():
    STARTED.clear()


def admits(txn: Txn) -> bool:
    """Whether ``txn`` is a queue's admission (or release) of holders."""
    return any(key.startswith("queue/") for key, _ in txn.expects)


class Faulty(MemoryJournal):
    """Refuses queue admissions with ``fault`` while it is set."""

    fault: Exception | None = None
    applied = False  # refuse after applying (an outcome the caller cannot know)
    refused = 0

    def submit(self, txn: Txn) -> Ticket:
        if self.fault is not None and admits(txn):
            self.refused += 1
            if self.applied:
                super().submit(txn)
            return Settled(self.fault)
        return super().submit(txn)


FAULTS = [
    JournalFull("the map is full (test)"),
    JournalDiskFull("no space left on device (test)", path="/nowhere"),
    JournalUnavailable("the server does not answer (test)"),
]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: type(f).__name__)
async def test_a_queue_rides_out_a_journal_that_refuses_its_admissions(
    fault, autojump_clock, caplog
):
    caplog.set_level(logging.WARNING, logger="actors")
    journal = Faulty()
    q = Queue("one", concurrency=1)
    async with actors.open_system(journal, processes=[bjob], queues=[q]) as system:
        first = await system.start(bjob, "first", queue=q, seconds=5.0)
        await trio.sleep(1)
        journal.fault = fault
        later = [await system.start(bjob, name, queue=q) for name in ("second", "third")]
        assert "completed" == (await first.result() and first.status)
        await trio.sleep(60)  # "first" ended long ago: its slot is free, the journal refuses
        assert ["first"] == STARTED
        assert journal.refused >= 3  # tried again and again (with backoff)
        assert journal.refused < 100
        assert ["queued", "queued"] == [h.status for h in later]
        journal.fault = None
        back_at = trio.current_time()
        assert ["second", "third"] == [await h.result() for h in later]
        # The longest backoff and the two one-second jobs.
        assert trio.current_time() - back_at <= 30 + 2
        # The system is still up: new work runs.
        assert "fourth" == await (await system.start(bjob, "fourth", queue=q)).result()
    said = [r.getMessage() for r in caplog.records if "queue 'one'" in r.getMessage()]
    assert 2 == len(said), said  # once when it met the trouble, once when it was over
    assert type(fault).__name__ in said[0] or str(fault) in said[0]
    assert "admits again" in said[1]
    assert {logging.WARNING} == {
        r.levelno for r in caplog.records if "queue 'one'" in r.getMessage()
    }


async def test_an_admission_of_unknown_outcome_runs_what_it_admitted(autojump_clock):
    # The connection was lost after COMMIT: the admission went through, but
    # the pump was not told so. It reads back what it wrote and runs it.
    journal = Faulty()
    q = Queue("one", concurrency=1)
    async with actors.open_system(journal, processes=[bjob], queues=[q]) as system:
        first = await system.start(bjob, "first", queue=q, seconds=5.0)
        await trio.sleep(1)
        journal.fault, journal.applied = CommitOutcomeUnknown("lost after COMMIT (test)"), True
        second = await system.start(bjob, "second", queue=q)
        await first.result()
        with trio.fail_after(10):
            while journal.refused == 0:
                await trio.sleep(0.1)
        journal.fault = None
        with trio.fail_after(30):
            assert "second" == await second.result()
        assert ["first", "second"] == STARTED
        await trio.sleep(1)  # its slot is released
        info = await system.queue_info(q)
        assert (0, 0) == (info.waiting, info.running)


async def test_a_background_task_that_fails_with_a_group_of_outages_runs_again(
    autojump_clock, caplog
):
    caplog.set_level(logging.WARNING, logger="actors")
    journal = MemoryJournal()
    runs: list[float] = []

    async def task() -> None:
        runs.append(trio.current_time())
        if len(runs) == 1:
            async with trio.open_nursery() as nursery:  # a service with tasks of its own

                async def lost() -> None:
                    raise JournalUnavailable("lost (test)")

                nursery.start_soon(lost)
        if len(runs) == 2:
            raise ExceptionGroup(
                "full", [JournalFull("full (test)"), JournalDiskFull("disk (test)")]
            )

    async with journal, trio.open_nursery() as nursery:
        watch = JournalWatch(journal)
        watch.nursery = nursery
        await watch.keep_running(task, "the test's service")
    assert 3 == len(runs)
    said = [r.getMessage() for r in caplog.records if "the test's service" in r.getMessage()]
    assert 1 == len(said), said  # one streak of trouble: one line
    assert "lost the journal" in said[0]


async def test_a_background_task_that_fails_otherwise_is_not_hidden(autojump_clock):
    journal = MemoryJournal()

    async def task() -> None:
        raise ExceptionGroup("mixed", [JournalUnavailable("lost (test)"), KeyError("bug")])

    async with journal, trio.open_nursery() as nursery:
        watch = JournalWatch(journal)
        watch.nursery = nursery
        with pytest.raises(ExceptionGroup) as caught:
            await watch.keep_running(task, "the test's service")
    assert caught.value.subgroup(KeyError) is not None


never = actors.Signal("never")


@process("waiter/:name")
async def waiter(ctx: Context, name: str) -> None:
    await ctx.wait(never)


@process("racer/:name")
async def racer(ctx: Context, name: str) -> str:
    which, _ = await ctx.first(child=ctx.call(waiter, name), late=ctx.sleep(5))
    return which


class Refusing(MemoryJournal):
    """Refuses, while ``fault`` is set, every write that touches ``iid``."""

    fault: Exception | None = None
    iid = b""
    refused = 0

    def submit(self, txn: Txn) -> Ticket:
        if self.fault is not None and any(op[1] == self.iid for op in txn.ops):
            self.refused += 1
            return Settled(self.fault)
        return super().submit(txn)


async def test_the_cancel_of_a_losing_child_rides_out_a_full_journal(autojump_clock):
    journal = Refusing()
    journal.iid = instance_id("racer/r/waiter/r")
    async with actors.open_system(
        journal, processes=[racer, waiter], passivate_after=0.5
    ) as system:
        handle = await system.start(racer, "r")
        await trio.sleep(2)  # the child waits, passivated
        journal.fault = JournalFull("the map is full (test)")
        await trio.sleep(10)  # the race is lost: the child's cancel meets a full journal
        assert journal.refused >= 1
        journal.fault = None
        assert "late" == await handle.result()
        with trio.fail_after(120):
            while system.get("racer/r/waiter/r").status != "cancelled":
                await trio.sleep(1)
