"""``ctx.join(child)``: a process learns a spawned child's outcome, alone
or in a race, through supervised restarts, across a reopen."""

from __future__ import annotations

import pytest
import trio

import actors
from actors import ChildFailed, Context, Signal, process

GO = Signal("go")
crashes: list[str] = []


@process("kid/:id")
async def kid(ctx: Context, id: str, *, how: str = "ok", wait: bool = False) -> str:
    if wait:
        await ctx.wait(GO)
    if how == "fail":
        raise RuntimeError("kid broke")
    if how == "crash_once":
        await ctx.step(_crash_once, id)
    return f"kid {id} done"


def _crash_once(id: str) -> None:
    if id not in crashes:
        crashes.append(id)
        raise RuntimeError("first run crashes")


@process("mom/:id")
async def mom(ctx: Context, id: str, *, how: str = "ok", wait: bool = False) -> object:
    # A child that fails for good is temporary: a transient one failing past the
    # restart limit would crash this parent instead (supervision).
    restart = "temporary" if how == "fail" else "transient"
    child = await ctx.spawn(kid, id, how=how, wait=wait, restart=restart)
    try:
        got = await ctx.join(child)
    except ChildFailed as exc:
        return f"failed: {exc}"
    await ctx.wait(GO)  # a later wait: a replay passes the join from the log
    return got


@process("racer/:id")
async def racer(ctx: Context, id: str) -> str:
    child = await ctx.spawn(kid, id, wait=True)
    winner = await ctx.first(done=ctx.join(child), late=ctx.sleep(60))
    return "joined" if "done" in winner else "timed out"


@process("stranger/:id")
async def stranger(ctx: Context, id: str) -> str:
    await ctx.join("kid/someone-else")
    return "never"


@pytest.fixture(autouse=True)
def _reset():
    crashes.clear()


async def test_join_gives_the_childs_result(any_opener, autojump_clock):
    async with any_opener(mom, kid) as system:
        handle = await system.start(mom, "a")
        await trio.sleep(1)
        await system.send("mom/a", GO)
        assert "kid a done" == await handle.result()


async def test_join_raises_child_failed(any_opener, autojump_clock):
    async with any_opener(mom, kid) as system:
        handle = await system.start(mom, "b", how="fail")
        result = await handle.result()
        assert result.startswith("failed: child 'mom/b/kid/b' failed") and "kid broke" in result


async def test_join_waits_through_a_supervised_restart(any_opener, autojump_clock):
    async with any_opener(mom, kid) as system:
        handle = await system.start(mom, "c", how="crash_once")
        await trio.sleep(10)
        assert 1 == len(system.get("mom/c/kid/c").restarts)
        await system.send("mom/c", GO)
        assert "kid c done" == await handle.result()


async def test_a_join_in_a_race_can_lose_and_the_child_lives_on(any_opener, autojump_clock):
    async with any_opener(racer, kid) as system:
        assert "timed out" == await (await system.start(racer, "r")).result()
        # The race's loser was the join, not the child: cancelled with its parent's end.
        assert "cancelled" == system.get("racer/r/kid/r").status


async def test_a_join_in_a_race_can_win(any_opener, autojump_clock):
    async with any_opener(racer, kid) as system:
        handle = await system.start(racer, "w")
        await trio.sleep(1)
        await system.send("racer/w/kid/w", GO)
        assert "joined" == await handle.result()


async def test_a_parent_waiting_in_join_resumes_after_a_reopen(any_opener, autojump_clock):
    async with any_opener(mom, kid) as system:
        await system.start(mom, "d", wait=True)
        await trio.sleep(1)
    async with any_opener(mom, kid) as system:
        await system.send("mom/d/kid/d", GO)
        await trio.sleep(1)
    async with any_opener(mom, kid) as system:  # the join is in the log now: replayed
        await system.send("mom/d", GO)
        assert "kid d done" == await system.get("mom/d").result()


async def test_join_takes_only_this_runs_children(any_opener, autojump_clock):
    async with any_opener(stranger, kid) as system:
        with pytest.raises(actors.ProcessFailed, match=r"ctx\.join takes a child this run spawned"):
            await (await system.start(stranger, "s")).result()
