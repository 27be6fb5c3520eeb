"""A start afresh on an "async" journal, whose commit returns before it is
written: the new incarnation runs, even when mail routed to the address
while no actor held it makes its actor read the journal as it starts."""

from __future__ import annotations

import trio

import actors
from actors import Context, process
from storage import LMDBJournal
from tests.runtime_helpers import virtual_wall


@process("nap/:id")
async def nap(ctx: Context, id: str) -> None:
    await ctx.sleep(3600)


@process("holder/:id")
async def holder(ctx: Context, id: str, *, round: int) -> int:
    if round == 1:
        await ctx.call(nap, "n")  # cancelled with its parent
    return round


async def test_a_cancelled_instance_started_again_runs_on_an_async_journal(
    tmp_path, autojump_clock
):
    journal = LMDBJournal(tmp_path / "journal", durability="async")
    async with actors.open_system(
        journal, processes=[holder, nap], passivate_after=0.0, now=virtual_wall
    ) as system:
        first = await system.start(holder, "a", round=1)
        await trio.sleep(5)  # both suspended and out of memory
        assert await system.cancel("holder/a")
        # The child's end notice was mailed to its parent as both were
        # cancelled on disk, with no actor to take it.
        assert await first.refresh() == "cancelled"
        second = await system.start(holder, "a", round=2)
        assert second.incarnation == first.incarnation + 1
        # Before its start is written, it reads as running, not as the
        # cancelled incarnation the journal still shows.
        assert second.status == "running"
        with trio.fail_after(60):
            assert await second.result() == 2
