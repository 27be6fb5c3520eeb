"""Memory stays flat however many instances came and went: reading the
result of an ended instance, joining a child that already ended, and a
wait on a handle abandoned before the instance changed keep nothing in the
system. Observed as the trio events alive (one kept per instance was the
leak, about 300 B with its table slot) and, for results, as the bytes
tracemalloc sees allocated by the runtime's status and handle code, once
the instances themselves exist (their ends are kept for handle reads,
bounded apart: `Statuses.keep_end`)."""

from __future__ import annotations

import gc
import tracemalloc

import trio

from actors import Context, Signal, process

go = Signal("go")
N = 300
SLACK = 20  # events alive for other reasons (the system's own, a few in flight)


@process("job/:id")
async def job(ctx: Context, id: str) -> int:
    return 42


@process("idle/:id")
async def idle(ctx: Context, id: str) -> None:
    await ctx.wait(go)


@process("boss/:id")
async def boss(ctx: Context, id: str) -> int:
    kid = await ctx.spawn(job, id)
    await ctx.wait(go)  # the child has long ended when the join starts
    return await ctx.join(kid)


def events_alive() -> int:
    gc.collect()
    return sum(isinstance(thing, trio.Event) for thing in gc.get_objects())


def traced(snapshot: tracemalloc.Snapshot) -> int:
    mine = snapshot.filter_traces(
        [
            tracemalloc.Filter(True, "*actors/_system/_status_watch.py"),
            tracemalloc.Filter(True, "*actors/_kernel/_handles.py"),
            tracemalloc.Filter(True, "*trio/_sync.py"),
            tracemalloc.Filter(True, "<attrs generated*"),
        ]
    )
    return sum(stat.size for stat in mine.statistics("filename"))


async def test_results_of_ended_instances_keep_nothing(any_opener, autojump_clock):
    async with any_opener(job) as system:
        for n in range(N):
            await system.start(job, str(n))
        for n in range(N):  # every one ended and its end is kept: the base line
            with trio.fail_after(60):
                while system.get(f"job/{n}").status != "completed":
                    await trio.sleep(0.01)
        events = events_alive()
        gc.collect()
        tracemalloc.start(1)
        try:
            before = traced(tracemalloc.take_snapshot())
            for _ in range(3):
                for n in range(N):
                    assert 42 == await system.get(f"job/{n}").result()
            gc.collect()
            grown = traced(tracemalloc.take_snapshot()) - before
        finally:
            tracemalloc.stop()
        assert events_alive() - events < SLACK
    # Nothing per instance (before: ~300 B per ended instance read, each kept).
    assert grown < 20 * N, f"{grown} bytes kept by {3 * N} result() calls on ended instances"


async def test_abandoned_waits_keep_nothing(any_opener, autojump_clock):
    async with any_opener(idle) as system:
        handles = [await system.start(idle, str(n)) for n in range(N)]
        for handle in handles:
            with trio.fail_after(60):
                while handle.status != "suspended":
                    await trio.sleep(0.01)
        events = events_alive()
        for handle in handles:
            with trio.move_on_after(1):  # given up on: it does not end meanwhile
                await handle.result()
        assert events_alive() - events < SLACK
        assert all(handle.status == "suspended" for handle in handles)


async def test_joins_of_ended_children_keep_nothing(any_opener, autojump_clock):
    count = N // 2
    async with any_opener(job, boss) as system:
        bosses = [await system.start(boss, str(n)) for n in range(count)]
        for n in range(count):
            with trio.fail_after(60):
                while (child := system.get(f"boss/{n}/job/{n}")) is None:
                    await trio.sleep(0.01)
            assert 42 == await child.result()
        events = events_alive()
        for n in range(count):
            await system.send(f"boss/{n}", go)
        for handle in bosses:
            assert 42 == await handle.result()
        assert events_alive() - events < SLACK
