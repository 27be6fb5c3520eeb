"""A handle of an instance that a cleanup removed after it ended never says
it was cancelled: a handle that saw the end keeps it and answers with it,
and one that did not raises `InstanceRemoved`, which names the cleanup.
Through the public API on every journal."""

from __future__ import annotations

import pytest

import actors
from actors import Context, process


@process("job/:id")
async def job(ctx: Context, id: str) -> int:
    return 42


@process("flop/:id")
async def flop(ctx: Context, id: str) -> int:
    raise ValueError("no luck")


async def test_result_after_a_cleanup_names_the_cleanup(make_journal, autojump_clock):
    async with actors.open_system(make_journal(), processes=[job]) as system:
        handle = await system.start(job, "a")
        waiter = await system.start(job, "a")  # the same instance, through another handle
        assert 42 == await waiter.result()
        assert 1 == await system.cleanup(0)
        with pytest.raises(actors.InstanceRemoved, match=r"removed .*by a cleanup") as caught:
            await handle.result()
        assert ("job/a", 1) == (caught.value.address, caught.value.incarnation)
        assert not isinstance(caught.value, actors.ProcessCancelled)
        # The address starts afresh: the old handle's incarnation was still removed,
        # not cancelled.
        again = await system.start(job, "a")
        assert 2 == again.incarnation
        assert 42 == await again.result()
        with pytest.raises(actors.InstanceRemoved, match="incarnation 1"):
            await handle.result()


async def test_a_handle_that_saw_the_end_keeps_it(make_journal, autojump_clock):
    async with actors.open_system(make_journal(), processes=[job, flop]) as system:
        done = await system.start(job, "b")
        assert 42 == await done.result()
        failed = await system.start(flop, "c")
        with pytest.raises(actors.ProcessFailed, match="no luck"):
            await failed.result()
        assert 2 == await system.cleanup(0)
        assert system.get("job/b") is None
        assert ("completed", 42) == (done.status, await done.result())
        assert "failed" == failed.status
        with pytest.raises(actors.ProcessFailed, match="no luck"):
            await failed.result()


async def test_a_removed_child_handle_names_the_cleanup(make_journal, autojump_clock):
    @process("boss/:id")
    async def boss(ctx: Context, id: str) -> int:
        kid = await ctx.spawn(job, "k")
        return await ctx.join(kid)

    async with actors.open_system(make_journal(), processes=[job, boss]) as system:
        assert 42 == await (await system.start(boss, "b-1")).result()
        child = system.get("boss/b-1/job/k")  # (a handle that reads nothing yet)
        assert child is not None
        seen = system.get("boss/b-1/job/k")
        assert "completed" == seen.status
        assert 2 == await system.cleanup(0)  # the parent, and its child with it
        with pytest.raises(actors.InstanceRemoved, match="'boss/b-1/job/k'"):
            await child.result()
        assert 42 == await seen.result()
