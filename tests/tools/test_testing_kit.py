"""The test kit itself: virtual time, always-replay, and the replay check."""

from __future__ import annotations

import pytest
import trio

from actors import Context, Signal, process
from actors.testing import open_test_system, replay_check, wait_quiescent
from storage import LMDBJournal, MemoryJournal

tick = Signal("tick")


@process("month/:id")
async def month(ctx: Context, id: str) -> str:
    await ctx.sleep(30 * 86400)
    return "a month later"


async def test_a_thirty_day_sleep_runs_in_milliseconds(autojump_clock):
    async with open_test_system([month]) as system:
        t0 = trio.current_time()
        handle = await system.start(month, "m")
        assert await handle.result() == "a month later"
        assert trio.current_time() - t0 == 30 * 86400


counter = {"n": 0}


@process("global/:id")
async def keeps_state_in_a_global(ctx: Context, id: str) -> int:
    for _ in range(3):
        await ctx.wait(tick)
        counter["n"] += 1  # wrong: not replay-safe, it runs again on every replay
    return counter["n"]


@pytest.mark.parametrize("always_replay, expected", [(False, 3), (True, 6)])
async def test_always_replay_catches_state_kept_in_memory(always_replay, expected):
    counter["n"] = 0
    async with open_test_system([keeps_state_in_a_global], always_replay=always_replay) as system:
        handle = await system.start(keeps_state_in_a_global, "g")
        for _ in range(3):
            await system.send("global/g", tick)
            await wait_quiescent(system)  # taken alone: one resume (and replay) per tick
        # In memory the bug hides (3); replaying at every resume exposes it.
        assert await handle.result() == expected


@process("flow/:id")
async def flow_v1(ctx: Context, id: str) -> str:
    await ctx.step(str, 1, name="reserve")
    await ctx.wait(tick)
    await ctx.step(str, 2, name="charge")
    return "ok"


@process("flow/:id")
async def flow_v2(ctx: Context, id: str) -> str:
    await ctx.step(str, 3, name="fraud-check")  # inserted before recorded effects
    await ctx.step(str, 1, name="reserve")
    await ctx.wait(tick)
    return "ok"


@process("flow/:id")
async def flow_v3(ctx: Context, id: str) -> str:
    await ctx.step(str, 1, name="reserve")
    await ctx.step(str, 4, name="pre-check")  # where flow/a's history ends: fine for it
    await ctx.wait(tick)
    await ctx.step(str, 2, name="charge")
    return "ok"


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
async def test_replay_check_reports_changed_code(tmp_path, backend):
    journal = LMDBJournal(tmp_path / "j") if backend == "lmdb" else MemoryJournal()
    async with open_test_system([flow_v1], journal=journal) as system:
        for name in ("a", "b"):
            handle = await system.start(flow_v1, name)
        await system.send("flow/b", tick)
        await handle.result()
    target = tmp_path / "j" if backend == "lmdb" else journal
    problems = await replay_check(target, [flow_v2])
    assert [(p.address, p.position) for p in problems] == [("flow/a", 1)]
    assert problems[0].expected == {"k": "step", "n": "reserve"}
    assert problems[0].found == {"k": "step", "n": "fraud-check"}
    assert "flow/a" in str(problems[0])
    assert await replay_check(target, [flow_v1]) == []
    assert await replay_check(target, [flow_v3]) == []
    finished = await replay_check(target, [flow_v2], include_finished=True)
    assert sorted(p.address for p in finished) == ["flow/a", "flow/b"]
    # v3 is fine for the suspended flow/a but contradicts the finished flow/b.
    finished = await replay_check(target, [flow_v3], include_finished=True)
    assert [(p.address, p.position) for p in finished] == [("flow/b", 2)]
