"""A supervised restart is a new run: steps completed before the crash run
again, under new idempotency keys (README's supervision section says so)."""

from __future__ import annotations

import actors

charges: list[str] = []
crashed: list[bool] = []


def charge() -> None:
    charges.append(actors.current_step().key)


def crash_once() -> None:
    if not crashed:
        crashed.append(True)
        raise RuntimeError("boom")


@actors.process("order/:id", restart="transient")
async def order(ctx: actors.Context, id: str) -> str:
    await ctx.step(charge)
    await ctx.step(crash_once)
    return "done"


async def test_a_restart_charges_again_under_a_new_key(any_opener, autojump_clock):
    charges.clear()
    crashed.clear()
    async with any_opener(order) as system:
        handle = await system.start(order, "o-1")
        assert "done" == await handle.result()
        assert 1 == len(handle.restarts)
    assert ["order/o-1/1/0/charge/1", "order/o-1/1/1/charge/1"] == charges
