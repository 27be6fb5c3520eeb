"""Queues through the public API: limits that hold across restarts and nodes,
priority then FIFO order, rate windows, cancel of a queued instance."""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Queue, process
from storage import LMDBJournal, MemoryJournal

# Instrumentation: how many jobs run their step right now, and the most ever.
RUNNING = {"now": 0, "max": 0}
STARTED: list[str] = []


async def work(name: str, seconds: float) -> str:
    RUNNING["now"] += 1
    RUNNING["max"] = max(RUNNING["max"], RUNNING["now"])
    STARTED.append(name)
    try:
        await trio.sleep(seconds)
    finally:
        RUNNING["now"] -= 1
    return name


@process("job/:name")
async def job(ctx: Context, name: str, *, seconds: float = 1.0) -> str:
    return await ctx.step(work, name, seconds)


@process("fan/:name")
async def fan(ctx: Context, name: str, *, count: int) -> int:
    results = await ctx.scope([f"c{i}" for i in range(count)], job, queue="children")
    return len(results)


@pytest.fixture(autouse=True)
def _reset():
    RUNNING.update(now=0, max=0)
    STARTED.clear()


async def test_queue_never_exceeds_its_concurrency_across_a_restart(tmp_path, autojump_clock):
    q = Queue("jobs", concurrency=3)
    path = tmp_path / "j"
    async with actors.open_system(LMDBJournal(path), processes=[job], queues=[q]) as system:
        handles = [await system.start(job, f"j{i}", queue=q, seconds=10.0) for i in range(30)]
        assert {h.status for h in handles} <= {"queued", "running"}
        await trio.sleep(25)  # some finish, three run, the rest wait
        done_before = sum(h.status == "completed" for h in handles)
        assert 3 <= done_before < 30
        info = await system.queue_info(q)
        assert info.waiting > 0 and info.running <= 3
    async with actors.open_system(LMDBJournal(path), processes=[job], queues=[q]) as system:
        results = [await system.get(f"job/j{i}").result() for i in range(30)]
    assert results == [f"j{i}" for i in range(30)]
    assert RUNNING["max"] == 3
