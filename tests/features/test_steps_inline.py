"""Sync steps on the trio thread (``ctx.step(fn, thread=False)``): no worker
thread round trip, the same recording, retries and keys as any step."""

from __future__ import annotations

import threading

import pytest
import trio

import actors
from actors import Context, Retry, Signal, process
from tests.runtime_helpers import Opener, wait_status

go = Signal("go")

CALLS: list[tuple[str, int, str | None]] = []  # (function, thread id, step key)
FLAKY = {"left": 0}


def price(n: int) -> int:
    CALLS.append(("price", threading.get_ident(), actors.current_step().key))
    return n * 3


def flaky(n: int) -> int:
    CALLS.append(("flaky", threading.get_ident(), None))
    if FLAKY["left"] > 0:
        FLAKY["left"] -= 1
        raise RuntimeError("not yet")
    return n + 1


@process("inline/:id")
async def inline(ctx: Context, id: str, *, n: int) -> dict[str, int]:
    a = await ctx.step(price, n, thread=False)
    b = await ctx.step(flaky, a, thread=False, retry=Retry(attempts=3, backoff=0))
    await ctx.wait(go)  # a restart here replays both steps
    c = await ctx.step(price, b)  # the default: a worker thread
    return {"a": a, "b": b, "c": c}


@pytest.fixture
def opener(tmp_path):
    CALLS.clear()
    FLAKY["left"] = 0
    return Opener(tmp_path)


async def test_an_inline_step_runs_on_the_trio_thread_and_is_recorded_once(opener, autojump_clock):
    trio_thread = threading.get_ident()
    FLAKY["left"] = 2  # two failures, then success: retries work inline too
    async with opener(inline) as system:
        handle = await system.start(inline, "a", n=2)
        await wait_status(handle, "running", "suspended")
        while len(CALLS) < 4:
            await trio.sleep(0.01)
    assert [(name, tid == trio_thread) for name, tid, _ in CALLS] == [
        ("price", True),
        ("flaky", True),
        ("flaky", True),
        ("flaky", True),
    ]
    assert CALLS[0][2] == "inline/a/1/0/price/1"  # current_step() works inline
    CALLS.clear()
    async with opener(inline) as system:  # reopened: the recorded steps replay
        await system.send("inline/a", go)
        assert await system.get("inline/a").result() == {"a": 6, "b": 7, "c": 21}
    # Only the step after the wait ran, and in a worker thread.
    assert [(name, tid == trio_thread) for name, tid, _ in CALLS] == [("price", False)]


async def test_inline_takes_no_timeout_and_only_a_bool(opener, autojump_clock):
    @process("bad/:id")
    async def bad(ctx: Context, id: str, *, how: str) -> None:
        if how == "timeout":
            await ctx.step(price, 1, thread=False, timeout=1.0)
        else:
            await ctx.step(price, 1, thread="no")

    async with opener(bad) as system:
        for how, words in (("timeout", "takes no timeout="), ("type", "True or False")):
            handle = await system.start(bad, how, how=how)
            with pytest.raises(actors.ProcessFailed, match=words):
                await handle.result()


async def test_inline_async_step_with_a_timeout_is_allowed(opener, autojump_clock):
    async def slow() -> str:
        await trio.sleep(5)
        return "late"

    @process("slow/:id")
    async def slow_proc(ctx: Context, id: str) -> str:
        try:
            return await ctx.step(slow, thread=False, timeout=1.0)
        except actors.StepTimeout:
            return "timed out"

    async with opener(slow_proc) as system:
        handle = await system.start(slow_proc, "x")
        assert await handle.result() == "timed out"
