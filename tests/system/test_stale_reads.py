"""A read of an instance's status off the trio thread (a remote journal's)
that was under way as the instance's run here ended comes back with what
it found before that end: the system keeps the end, not the stale read, for
its handles, whatever drops the end afterwards."""

from __future__ import annotations

import trio

import actors
from actors import Context, Signal, process
from actors._system._registry import Registry
from storage import instance_id
from tests.runtime_helpers import ReadsOffTheLoop

go = Signal("go")


@process("jobs/:id")
async def job(ctx: Context, id: str) -> str:
    await ctx.wait(go)
    return f"job {id}"


async def test_a_read_under_way_as_the_run_ends_does_not_outlive_the_end(monkeypatch):
    journal = ReadsOffTheLoop()
    iid = instance_id("jobs/j1")
    ended = Registry.ended

    def ended_here(self, actor, status):
        ended(self, actor, status)
        if actor.iid == iid and status == "completed":
            journal.until.set()

    monkeypatch.setattr(Registry, "ended", ended_here)
    # passivate_after=0: it leaves memory as it waits, so a handle's refresh reads
    async with actors.open_system(journal, processes=[job], passivate_after=0) as system:
        handle = await system.start(job, "j1")
        with trio.fail_after(10):
            while iid in system.registry.live:
                await trio.sleep(0.01)
            async with trio.open_nursery() as nursery:
                journal.slow = True  # it finds the run waiting, and comes back after its end
                nursery.start_soon(handle.refresh)
                await journal.held.wait()
                await system.send("jobs/j1", go)
            # A change by other means than the run (as after a lost journal
            # connection) drops the end kept: handles read what was last read.
            system.statuses.changed(iid)
            assert "job j1" == await handle.result()
        assert "completed" == handle.status
