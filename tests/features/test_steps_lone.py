"""A step awaited on its own runs in its instance's own task (no task of its
own to spawn and wake); stop requests reach it as they reach a step that
races something: cancelled at once, compensated as possibly applied."""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Signal, process
from tests.runtime_helpers import wait_status

ledger: list[str] = []
go = Signal("go")


async def long_charge(order: str) -> str:
    ledger.append(f"charging {order}")
    await trio.sleep(3600)
    ledger.append(f"charged {order}")
    return f"charge-{order}"


async def refund(order: str) -> None:
    info = actors.current_step()
    ledger.append(f"refund {order} possibly_applied={info.forward_result is None}")


@process("lone/:id", compensate_on_cancel=True)
async def lone(ctx: Context, id: str) -> str:
    return await ctx.step(long_charge, id, compensate=refund)


@process("raced/:id", compensate_on_cancel=True)
async def raced(ctx: Context, id: str) -> str:
    _which, value = await ctx.first(
        charge=ctx.step(long_charge, id, compensate=refund), stop=ctx.wait(go)
    )
    return str(value)


@pytest.mark.parametrize("proc", [lone, raced], ids=["alone", "in a race"])
async def test_a_cancel_stops_a_running_step_at_once_and_compensates_it(
    opener, autojump_clock, proc
):
    ledger.clear()
    async with opener(lone, raced) as system:
        handle = await system.start(proc, "o-1")
        while ledger != ["charging o-1"]:
            await trio.sleep(1)
        before = trio.current_time()
        assert await system.cancel(handle.id)
        with pytest.raises(actors.ProcessCancelled):
            await handle.result()
        # Cancelled, not waited out: the step's hour never passed.
        assert trio.current_time() - before < 60
        assert ledger == ["charging o-1", "refund o-1 possibly_applied=True"]
        assert handle.status == "cancelled"


async def test_a_lone_step_interrupted_by_closing_runs_again_on_reopen(opener, autojump_clock):
    ledger.clear()
    async with opener(lone) as system:
        handle = await system.start(lone, "o-2")
        while ledger != ["charging o-2"]:
            await trio.sleep(1)
    async with opener(lone) as system:
        handle = system.get("lone/o-2")
        assert await handle.result() == "charge-o-2"
        assert ledger == ["charging o-2", "charging o-2", "charged o-2"]
        await wait_status(handle, "completed")
