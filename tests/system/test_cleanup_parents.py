"""`cleanup` never removes a child that any incarnation of a live parent
may need: a child goes with its parent (in the same cleanup), or once its
parent is gone. Through the public API on every journal (the LMDB one
closed and reopened between the cleanup and what needs the child)."""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Signal, process

go = Signal("go")
KEYS: list[str] = []
BROKEN: set[str] = set()


@pytest.fixture(autouse=True)
def _fresh():
    KEYS.clear()
    BROKEN.clear()


def charge(what: str) -> int:
    KEYS.append(actors.current_step().key)
    if what in BROKEN:
        raise RuntimeError(f"{what} declined")
    return 42


@process("pay")
async def pay(ctx: Context) -> int:
    return await ctx.step(charge, "pay")


@process("kid/:id")
async def kid(ctx: Context, id: str) -> int:
    paid = await ctx.call(pay)
    await ctx.step(charge, "ship")
    return paid


@process("mom/:id")
async def mom(ctx: Context, id: str) -> int:
    child = await ctx.spawn(pay)
    await ctx.wait(go)
    return await ctx.join(child)


@process("grandma/:id")
async def grandma(ctx: Context, id: str) -> int:
    return await ctx.call(kid, id)


PROCESSES = [pay, kid, mom, grandma]


async def spawned(system: actors.ActorSystem, address: str) -> actors.Handle:
    """The handle of the child at ``address``, once its parent has spawned it."""
    with trio.fail_after(60):
        while (handle := system.get(address)) is None:
            await trio.sleep(0.01)
    return handle


async def test_a_live_parents_completed_child_is_kept_for_its_join(make_journal, autojump_clock):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await system.start(mom, "m-1")
        assert 42 == await (await spawned(system, "mom/m-1/pay")).result()
        assert 0 == await system.cleanup(0)  # the child's parent is live: it is kept
        assert "completed" == system.get("mom/m-1/pay").status
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await system.send("mom/m-1", go)
        assert 42 == await system.get("mom/m-1").result()
        assert 2 == await system.cleanup(0)  # the parent, and its child with it
        assert system.get("mom/m-1") is None
        assert system.get("mom/m-1/pay") is None
    assert ["mom/m-1/pay/1/0/charge/1"] == KEYS


async def test_a_retried_parent_does_not_pay_twice_after_a_cleanup(make_journal, autojump_clock):
    BROKEN.add("ship")
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        parent = await system.start(kid, "k-1")
        with pytest.raises(actors.ProcessFailed, match="ship declined"):
            await parent.result()
        # Its completed child is what a retry of the failed parent needs.
        assert 0 == await system.cleanup(0, statuses=["completed"])
        assert "completed" == system.get("kid/k-1/pay").status
    BROKEN.clear()
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        again = await system.retry("kid/k-1")
        assert 42 == await again.result()
    assert ["kid/k-1/pay/1/0/charge/1", "kid/k-1/1/0/charge/1", "kid/k-1/2/0/charge/1"] == KEYS


async def test_a_grandchild_is_kept_while_any_ancestor_is(make_journal, autojump_clock):
    BROKEN.add("ship")
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        top = await system.start(grandma, "g-1")
        with pytest.raises(actors.ProcessFailed, match="ship declined"):
            await top.result()
        # grandma failed, kid failed, pay completed: only "failed" asked for, the
        # failed child is kept with its failed parent, the completed grandchild too.
        assert 0 == await system.cleanup(0, statuses=["completed"])
        assert "completed" == system.get("grandma/g-1/kid/g-1/pay").status
        assert 2 == await system.cleanup(0, statuses=["failed"])  # grandma and kid
        assert system.get("grandma/g-1/kid/g-1") is None
        assert 1 == await system.cleanup(0, statuses=["completed"])  # its parent is gone now
    assert ["grandma/g-1/kid/g-1/pay/1/0/charge/1", "grandma/g-1/kid/g-1/1/0/charge/1"] == KEYS


async def test_a_too_recent_parent_keeps_its_old_child(make_journal, autojump_clock):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        parent = await system.start(mom, "m-2")
        assert 42 == await (await spawned(system, "mom/m-2/pay")).result()
        await trio.sleep(100)
        await system.send("mom/m-2", go)
        assert 42 == await parent.result()
        # The child ended 100 s ago, its parent just now: both stay.
        assert 0 == await system.cleanup(50)
        assert "completed" == system.get("mom/m-2/pay").status
        await trio.sleep(100)
        assert 2 == await system.cleanup(50)
