"""Queues through the public API: limits that hold across restarts and nodes,
priority then FIFO order, rate windows, cancel of a queued instance."""

from __future__ import annotations

import logging

import pytest
import trio

import actors
from actors import Context, Queue, process
from storage import LMDBJournal, MemoryJournal

# Instrumentation: how many jobs run their step right now, and the most ever.
RUNNING = {"now": 0, "max": 0}
STARTED: list[str] = []
STARTED_AT: list[float] = []


async def work(name: str, seconds: float) -> str:
    RUNNING["now"] += 1
    RUNNING["max"] = max(RUNNING["max"], RUNNING["now"])
    STARTED.append(name)
    STARTED_AT.append(trio.current_time())
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
    STARTED_AT.clear()


def clock() -> float:
    """Epoch time that carries on with virtual time across reopens."""
    return 1_700_000_000.0 + trio.current_time()


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


async def test_a_fan_out_runs_only_as_many_children_as_its_queue_allows(autojump_clock):
    q = Queue("children", concurrency=20)
    async with actors.open_system(MemoryJournal(), processes=[fan, job], queues=[q]) as system:
        t0 = trio.current_time()
        handle = await system.start(fan, "f", count=400)
        assert await handle.result() == 400
        # 400 one-second children, 20 at a time: 20 waves of one second.
        assert trio.current_time() - t0 == pytest.approx(20, abs=1)
    assert RUNNING["max"] == 20
    assert len(STARTED) == 400


async def test_queued_instances_start_in_priority_then_fifo_order(tmp_path, autojump_clock):
    q = Queue("one", concurrency=1)
    path = tmp_path / "j"
    async with actors.open_system(
        LMDBJournal(path), processes=[job], queues=[q], now=clock
    ) as system:
        await system.start(job, "first", queue=q, seconds=5.0)
        await trio.sleep(1)  # "first" holds the only slot
        for name, priority in [("a", 5), ("b", 0), ("c", 5), ("d", -1), ("e", 0)]:
            await system.start(job, name, queue=q, priority=priority, seconds=1.0)
        assert (await system.queue_info(q)).waiting == 5
    # The order is kept in the journal: a restart changes nothing.
    async with actors.open_system(
        LMDBJournal(path), processes=[job], queues=[q], now=clock
    ) as system:
        for name in "abcde":
            await system.get(f"job/{name}").result()
        info = await system.queue_info(q)
        assert (info.waiting, info.oldest_wait) == (0, None)
    # "first" ran its step again after the restart (it was in flight at close).
    assert STARTED == ["first", "first", "d", "b", "e", "a", "c"]


async def test_rate_limit_holds_over_every_window_across_a_restart(tmp_path, autojump_clock):
    q = Queue("api", rate=(5, 10.0))
    path = tmp_path / "j"
    async with actors.open_system(
        LMDBJournal(path), processes=[job], queues=[q], now=clock
    ) as system:
        for i in range(20):
            await system.start(job, f"r{i}", queue=q, seconds=0.1)
        await trio.sleep(12)  # two windows' worth started
    assert 5 <= len(STARTED_AT) <= 10
    async with actors.open_system(
        LMDBJournal(path), processes=[job], queues=[q], now=clock
    ) as system:
        for i in range(20):
            await system.get(f"job/r{i}").result()
    starts = sorted(STARTED_AT)
    assert len(set(STARTED)) == 20
    for i, t in enumerate(starts):
        in_window = [u for u in starts[i:] if u < t + 10.0 - 1e-6]  # (clock rounding)
        assert len(in_window) <= 5, (t, in_window)
    # And it is no slower than the limit: 20 starts at 5 per 10 s take 30 s and a bit.
    assert starts[-1] - starts[0] < 40


async def test_cancel_of_a_queued_instance_removes_it(autojump_clock):
    q = Queue("one", concurrency=1)
    async with actors.open_system(MemoryJournal(), processes=[job], queues=[q]) as system:
        first = await system.start(job, "first", queue=q, seconds=5.0)
        waiting = await system.start(job, "second", queue=q, seconds=1.0)
        third = await system.start(job, "third", queue=q, seconds=1.0)
        assert waiting.status == "queued"
        assert (await system.queue_info(q)).waiting == 2
        assert sorted([i.id async for i in system.query(status="queued")]) == [
            "job/second",
            "job/third",
        ]
        assert await system.cancel("job/second") is True
        assert waiting.status == "cancelled"
        assert (await system.queue_info(q)).waiting == 1
        with pytest.raises(actors.ProcessCancelled):
            await waiting.result()
        assert await third.result() == "third"
        assert await first.result() == "first"
    assert "second" not in STARTED


async def test_a_queue_that_is_not_registered_is_refused(autojump_clock):
    async with actors.open_system(MemoryJournal(), processes=[job]) as system:
        with pytest.raises(actors.InvalidArguments, match="not registered"):
            await system.start(job, "x", queue=Queue("nope"))
        with pytest.raises(actors.InvalidArguments, match="pass queue= too"):
            await system.start(job, "x", priority=3)
        with pytest.raises(actors.InvalidArguments, match="whole number"):
            await system.start(job, "x", queue="nope", priority=1.5)
        assert system.get("job/x") is None  # nothing was written
    with pytest.raises(actors.InvalidArguments, match="whole number"):
        Queue("q", concurrency=0)
    with pytest.raises(actors.InvalidArguments, match="count, seconds"):
        Queue("q", rate=5)


@process("parent/:name")
async def parent(ctx: Context, name: str, *, children: int) -> list[str]:
    spawned = []
    for i in range(children):
        child = await ctx.spawn(job, f"k{i}", queue="one", restart="temporary", seconds=100.0)
        spawned.append(child.id)
    return spawned


async def test_queued_children_end_with_their_parent_and_leave_the_queue(tmp_path, autojump_clock):
    q = Queue("one", concurrency=1)
    path = tmp_path / "j"
    async with actors.open_system(
        LMDBJournal(path), processes=[parent, job], queues=[q], now=clock
    ) as system:
        blocker = await system.start(job, "blocker", queue=q, seconds=50.0)
        handle = await system.start(parent, "p", children=3)
        ids = await handle.result()  # it completes at once: its spawned children are cancelled
        assert [system.get(a).status for a in ids] == ["cancelled"] * 3
        assert (await system.queue_info(q)).waiting == 0
        assert await blocker.result() == "blocker"
    assert "k0" not in STARTED


async def test_queued_instances_survive_a_restart_before_any_starts(tmp_path, autojump_clock):
    q = Queue("slow", rate=(1, 60.0))
    path = tmp_path / "j"
    async with actors.open_system(
        LMDBJournal(path), processes=[job], queues=[q], now=clock
    ) as system:
        for i in range(3):
            await system.start(job, f"s{i}", queue=q, seconds=0.5)
        await trio.sleep(1)
        assert [system.get(f"job/s{i}").status for i in range(3)] == [
            "completed",
            "queued",
            "queued",
        ]
    async with actors.open_system(
        LMDBJournal(path), processes=[job], queues=[q], now=clock
    ) as system:
        t0 = trio.current_time()
        assert await system.get("job/s2").result() == "s2"
        # The window of the first start (kept in the journal) holds across the restart.
        assert trio.current_time() - t0 >= 118


@process("spawner/:name")
async def spawner(ctx: Context, name: str, *, count: int) -> int:
    children = [
        await ctx.spawn(job, f"s{i}", queue="children", restart="temporary", seconds=1.0)
        for i in range(count)
    ]
    await ctx.sleep(3600)  # its children live while it does
    return len(children)


async def test_a_fan_out_of_2000_spawned_children_runs_20_at_a_time(autojump_clock):
    q = Queue("children", concurrency=20)
    async with actors.open_system(MemoryJournal(), processes=[spawner, job], queues=[q]) as system:
        handle = await system.start(spawner, "big", count=2000)
        await trio.sleep(60)
        info = await system.queue_info(q)
        assert info.running <= 20 and info.waiting > 0
        assert await handle.result() == 2000
    assert RUNNING["max"] == 20
    assert len(set(STARTED)) == 2000


async def test_per_node_limits_one_node(autojump_clock):
    q = Queue("local", per_node=2)
    async with actors.open_system(MemoryJournal(), processes=[job], queues=[q]) as system:
        handles = [await system.start(job, f"n{i}", queue=q, seconds=1.0) for i in range(10)]
        for handle in handles:
            await handle.result()
    assert RUNNING["max"] == 2


@process("elsewhere/:name")
async def elsewhere(ctx: Context, name: str) -> str:
    return name


@pytest.mark.parametrize("ahead", [1, 20])
async def test_queued_work_of_a_process_this_system_does_not_run_holds_nothing_up(
    tmp_path, autojump_clock, caplog, ahead
):
    # Instances of "elsewhere" (another node registers it) wait at the head
    # of the queue; those behind them, of a process this system runs, start.
    q = Queue("mixed", concurrency=1)
    path = tmp_path / "j"
    async with actors.open_system(
        LMDBJournal(path), processes=[job, elsewhere], queues=[q], now=clock
    ) as system:
        await system.start(job, "blocker", queue=q, seconds=5.0)
        await trio.sleep(1)  # it holds the only slot
        for i in range(ahead):
            await system.start(elsewhere, f"e{i}", queue=q, priority=-1)
        for i in range(4):
            await system.start(job, f"w{i}", queue=q)
        assert (await system.queue_info(q)).waiting == ahead + 4
    caplog.set_level(logging.WARNING, logger="actors")
    async with actors.open_system(
        LMDBJournal(path), processes=[job], queues=[q], now=clock
    ) as system:
        with trio.fail_after(60):
            results = [await system.get(f"job/w{i}").result() for i in range(4)]
        assert [f"w{i}" for i in range(4)] == results
        await trio.sleep(1)  # the last one's slot is released
        info = await system.queue_info(q)
        assert (ahead, 0) == (info.waiting, info.running)  # left for a node that runs them
        assert ["queued"] * ahead == [system.get(f"elsewhere/e{i}").status for i in range(ahead)]
    said = [r.getMessage() for r in caplog.records if "elsewhere/:name" in r.getMessage()]
    assert 1 == len(said), said  # said once, not at every round
    assert RUNNING["max"] == 1


async def test_only_the_instances_holding_a_slot_call_the_queue_service(
    monkeypatch, autojump_clock
):
    # Watchers are per instance: a start without a queue calls no code of
    # queues at its changes and end, and a holder's end still frees its slot.
    from actors._features._queues import QueueService

    told: list[str] = []
    status_changed, ended = QueueService.status_changed, QueueService.ended

    def spy_changed(self, iid):
        told.append("changed")
        status_changed(self, iid)

    def spy_ended(self, iid, status):
        told.append("ended")
        ended(self, iid, status)

    monkeypatch.setattr(QueueService, "status_changed", spy_changed)
    monkeypatch.setattr(QueueService, "ended", spy_ended)
    q = Queue("jobs", concurrency=1)
    async with actors.open_system(MemoryJournal(), processes=[job], queues=[q]) as system:
        assert await (await system.start(job, "free", seconds=1.0)).result() == "free"
        assert told == []
        first = await system.start(job, "a", queue=q, seconds=1.0)
        second = await system.start(job, "b", queue=q, seconds=1.0)
        assert await second.result() == "b"  # started once "a" freed the only slot
        assert await first.result() == "a"
        assert "ended" in told and "changed" in told
