"""What was committed is acted on, whatever happens to its caller: mail is
routed, a started instance runs.

A sender cancelled while its commit is in flight (the transaction is
submitted, so it commits) must still hand the message to a live receiver;
otherwise the receiver, suspended in memory, never learns of it.
"""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import MemoryJournal, Txn, instance_id

ping = Signal("ping")
slow_box = Signal("slow_box")


class SlowCommits(MemoryJournal):
    """Applies a transaction at once, and answers its caller a while later."""

    delay = 0.0

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        results = await super().commit(txn, durable=durable)
        with trio.CancelScope(shield=True):  # the answer comes late, not never
            await trio.sleep(self.delay)
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except trio.Cancelled:
            # Its caller gave up while the commit was in flight: as every
            # journal's commit does, it says so (`Journal.commit`).
            txn.doubt()
            raise
        return results


@process("inbox/:id")
async def inbox(ctx: Context, id: str) -> str:
    _signal, payload = await ctx.receive(ping)
    return payload


@process("asker/:id")
async def asker(ctx: Context, id: str, *, to: str) -> str:
    await ctx.send(to, ping, "from a process")
    return "sent"


async def test_a_send_cancelled_after_its_commit_still_reaches_the_live_receiver(autojump_clock):
    journal = SlowCommits()
    async with actors.open_system(journal, processes=[inbox], passivate_after=3600) as system:
        box = await system.start(inbox, "a")
        await trio.sleep(1)  # suspended in memory, waiting for ping
        journal.delay = 1.0
        began = trio.current_time()
        with trio.move_on_after(0.5) as scope:
            await system.send(box.id, ping, "late answer")
        journal.delay = 0.0
        assert scope.cancel_called  # the caller gave up while the commit was answered...
        assert trio.current_time() - began >= 1.0
        with trio.fail_after(5):
            assert await box.result() == "late answer"  # ...the message was routed


async def test_a_send_cancelled_before_it_is_submitted_writes_nothing(autojump_clock):
    journal = SlowCommits()
    async with actors.open_system(journal, processes=[inbox], passivate_after=3600) as system:
        box = await system.start(inbox, "b")
        with trio.CancelScope() as scope:
            scope.cancel()
            await system.send(box.id, ping, "never")
        with journal.reader() as r:
            assert r.mailbox(instance_id(box.id)) == []


@pytest.mark.parametrize("delay", [0.0, 1.0])
async def test_a_process_send_reaches_the_receiver_whatever_the_commit_time(autojump_clock, delay):
    journal = SlowCommits()
    journal.delay = delay
    async with actors.open_system(
        journal, processes=[inbox, asker], passivate_after=3600
    ) as system:
        box = await system.start(inbox, "c")
        sender = await system.start(asker, "c", to=box.id)
        with trio.fail_after(30):
            assert await sender.result() == "sent"
            assert await box.result() == "from a process"


@process("worker/:id")
async def worker(ctx: Context, id: str) -> str:
    await ctx.sleep(1)
    return f"done {id}"


async def test_a_start_cancelled_after_its_commit_still_runs(autojump_clock):
    # Written 'running' but never run: a live instance nobody runs until
    # the next open, and its handle's result() would wait for ever.
    journal = SlowCommits()
    async with actors.open_system(journal, processes=[worker], passivate_after=3600) as system:
        journal.delay = 1.0
        with trio.move_on_after(0.5) as scope:
            await system.start(worker, "w")
        journal.delay = 0.0
        assert scope.cancel_called
        handle = system.get("worker/w")
        assert handle is not None
        with trio.fail_after(30):
            assert await handle.result() == "done w"
