"""What a fork does with the compensations and timers of the kept part, and
a fork of a completed instance: through the public API, on virtual time and
on every journal."""

from __future__ import annotations

import collections

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import open_test_system

go = Signal("go")
RAN: collections.Counter[str] = collections.Counter()


@pytest.fixture(autouse=True)
def _fresh():
    RAN.clear()


def charge(order_id: str) -> str:
    RAN["charge"] += 1
    return f"charged {order_id}"


def refund(order_id: str) -> None:
    RAN["refund"] += 1


def pack(order_id: str, fine: bool) -> str:
    RAN["pack"] += 1
    if not fine:
        raise RuntimeError("out of boxes")
    return f"packed {order_id}"


@process("sagas/:id")
async def saga(ctx: Context, id: str, *, fine: bool = True) -> str:
    await ctx.step(charge, id, compensate=refund)  # effect 1
    await ctx.wait(go)  # effect 2
    return await ctx.step(pack, id, fine)  # effect 3


async def test_compensations_of_kept_steps_are_kept(make_journal):
    async with actors.open_system(make_journal(), processes=[saga]) as system:
        await system.start(saga, "s-1")
        with trio.fail_after(20):
            while system.get("sagas/s-1").status != "suspended":
                await trio.sleep(0.01)
        assert await system.cancel("sagas/s-1")  # no compensation runs on a plain cancel
        assert {"charge": 1} == RAN
    async with actors.open_system(make_journal(), processes=[saga]) as system:
        # The new run keeps the charge and its compensation; it fails packing,
        # so the kept compensation runs (once) as the run fails.
        handle = await system.fork("sagas/s-1", from_effect=1, input={"fine": False})
        await system.send("sagas/s-1", go, None)
        with pytest.raises(actors.ProcessFailed, match="out of boxes"):
            await handle.result()
        assert {"charge": 1, "pack": 1, "refund": 1} == RAN


async def test_a_completed_instance_is_forked_as_a_new_incarnation(make_journal):
    async with actors.open_system(make_journal(), processes=[saga]) as system:
        first = await system.start(saga, "s-2")
        await system.send("sagas/s-2", go, None)
        assert "packed s-2" == await first.result()
        again = await system.fork("sagas/s-2", from_effect=2)  # keeps the charge and the take
        assert (2, "packed s-2") == (again.incarnation, await again.result())
        assert {"charge": 1, "pack": 2} == RAN


@process("naps/:id")
async def nap(ctx: Context, id: str) -> float:
    await ctx.sleep(100)  # effect 1
    return ctx.now()


async def test_a_kept_timer_fires_at_its_recorded_due_time(autojump_clock):
    async with open_test_system(processes=[nap]) as system:
        start = trio.current_time()
        await system.start(nap, "n-1")
        await trio.sleep(10)
        assert await system.cancel("naps/n-1")
        await trio.sleep(10)
        handle = await system.fork("naps/n-1", from_effect=1)  # keeps the sleep's due time
        await handle.result()
        assert 100 == pytest.approx(trio.current_time() - start, abs=0.5)
        # From before it, the sleep starts afresh.
        again = await system.fork("naps/n-1", from_effect=0)
        t0 = trio.current_time()
        await again.result()
        assert 100 == pytest.approx(trio.current_time() - t0, abs=0.5)
