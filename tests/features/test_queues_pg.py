"""A queue's limit on PostgreSQL with two nodes: a global count, not per node.

Two systems (nodes "a" and "b") in this process share one schema; each
starts half of the jobs, and every job's step counts how many steps run at
once over both nodes. Real time against a real server (see tests/pg.py).
"""

from __future__ import annotations

import os

import pytest
import trio

import actors
from actors import Context, Queue, process
from actors.testing import wait_quiescent
from tests.pg import fresh_schema

if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
    pytest.importorskip("psycopg", reason="PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")

RUNNING = {"now": 0, "max": 0, "done": 0}
# per starting node ("a" starts a0..a11, "b" starts b0..b11): running now, most at once
BY_NODE = {"a": [0, 0], "b": [0, 0]}


async def work(name: str) -> str:
    node = BY_NODE[name[0]]
    RUNNING["now"] += 1
    RUNNING["max"] = max(RUNNING["max"], RUNNING["now"])
    node[0] += 1
    node[1] = max(node[1], node[0])
    try:
        await trio.sleep(0.15)
    finally:
        RUNNING["now"] -= 1
        RUNNING["done"] += 1
        node[0] -= 1
    return name


@process("pgjob/:name")
async def pgjob(ctx: Context, name: str) -> str:
    return await ctx.step(work, name)


@pytest.mark.slow  # real time: about two seconds
async def test_two_nodes_hold_one_global_limit(request):
    from storage import PostgresJournal

    dsn, schema = fresh_schema(request)
    q = Queue("global", concurrency=3, per_node=2)

    def journal() -> PostgresJournal:
        return PostgresJournal(dsn, schema=schema, lease_timeout=1.0)

    with trio.fail_after(60):
        async with (
            actors.open_system(journal(), [pgjob], node="a", queues=[q]) as a,
            actors.open_system(journal(), [pgjob], node="b", queues=[q]) as b,
        ):
            handles = []
            for i in range(12):
                handles.append(await a.start(pgjob, f"a{i}", queue=q))
                handles.append(await b.start(pgjob, f"b{i}", queue=q))
            results = [await h.result() for h in handles]
            info = await a.queue_info(q)
            assert (info.waiting, info.concurrency) == (0, 3)
            admitted = (a.queues.admitted, b.queues.admitted)
    assert sorted(results) == sorted([f"a{i}" for i in range(12)] + [f"b{i}" for i in range(12)])
    assert RUNNING["max"] == 3  # both nodes filled the slots, never past the global limit
    assert sum(admitted) == 24 and min(admitted) > 0
    # Each node starts its own queued instances (the other's live owner keeps
    # them), at most per_node=2 of them at once.
    assert admitted == (12, 12)
    assert [BY_NODE["a"][1], BY_NODE["b"][1]] == [2, 2]


TICKS: list[str] = []


async def note_tick(tick: str) -> None:
    TICKS.append(tick)


@process("pgtick/:tick")
async def pgtick(ctx: Context, tick: str) -> None:
    await ctx.step(note_tick, tick)


@pytest.mark.slow  # real time: about three seconds
async def test_two_nodes_running_one_schedule_start_each_tick_once(request):
    from storage import PostgresJournal

    dsn, schema = fresh_schema(request)
    TICKS.clear()

    def journal() -> PostgresJournal:
        return PostgresJournal(dsn, schema=schema, lease_timeout=1.0)

    with trio.fail_after(60):
        async with (
            actors.open_system(journal(), [pgtick], node="a") as a,
            actors.open_system(journal(), [pgtick], node="b") as b,
        ):
            await a.schedule("fast", pgtick, every=0.2, overlap="allow", catch_up=100)
            assert await b.schedule("fast", pgtick, every=0.2, overlap="allow", catch_up=100)
            await trio.sleep(2.5)
            await b.pause_schedule("fast")
            await wait_quiescent(a)  # the ticks in flight have started
            await wait_quiescent(b)
            started = sorted([i.id async for i in a.query(process=pgtick)])
            for address in started:
                await a.get(address).result()
    assert len(started) >= 8
    assert len(TICKS) == len(set(TICKS)) == len(started)  # each tick ran once, on one node


DONE: list[str] = []


async def short_work(name: str, seconds: float) -> str:
    await trio.sleep(seconds)
    DONE.append(name)
    return name


@process("pgshort/:name")
async def pgshort(ctx: Context, name: str, *, seconds: float = 0.2) -> str:
    # An attempt the outage cuts off counts as a crash: the next one finishes it.
    return await ctx.step(short_work, name, seconds, retry=actors.Retry(attempts=5, backoff=0.05))


async def released(system, q: Queue) -> actors.QueueInfo:
    """The queue's info once its last holder's slot is released (lazily,
    at the pump's next round): within two seconds."""
    with trio.fail_after(2):
        while True:
            info = await system.queue_info(q)
            if info.running == 0:
                return info
            await trio.sleep(0.05)


@pytest.mark.slow  # real time: a three-second outage, about eight seconds in all
async def test_a_node_with_a_queue_rides_out_a_database_outage(request):
    from urllib.parse import urlsplit

    from storage import PostgresJournal
    from tests.pg_proxy import Proxy

    dsn, schema = fresh_schema(request)
    DONE.clear()
    parts = urlsplit(dsn)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    proxy.start()
    q = Queue("through", concurrency=2)
    journal = PostgresJournal(proxy.dsn(dsn), schema=schema, lease_timeout=1.0)
    try:
        with trio.fail_after(40):
            async with actors.open_system(journal, [pgshort], node="a", queues=[q]) as a:
                handles = [await a.start(pgshort, f"o{i}", queue=q) for i in range(12)]
                while len(DONE) < 2:
                    await trio.sleep(0.05)
                proxy.stop()  # the database goes away with work queued and running
                await trio.sleep(3)
                assert len(DONE) < 12
                proxy.start()
                results = [await h.result() for h in handles]
                # The node is up and serves: new queued work runs too.
                after = await a.start(pgshort, "after", queue=q)
                assert "after" == await after.result()
                info = await released(a, q)
    finally:
        proxy.stop()
    assert [f"o{i}" for i in range(12)] == results
    assert (0, 0) == (info.waiting, info.running)


@pytest.mark.slow  # real time: a lease of one second, about four seconds in all
async def test_a_dead_nodes_queued_work_starts_on_an_idle_survivor(request):
    from storage import PostgresJournal

    dsn, schema = fresh_schema(request)
    DONE.clear()
    q = Queue("shared", concurrency=1)

    def journal() -> PostgresJournal:
        return PostgresJournal(dsn, schema=schema, lease_timeout=1.0)

    with trio.fail_after(60):
        async with actors.open_system(journal(), [pgshort], node="b", queues=[q]) as b:
            await trio.sleep(0.5)  # b's pump has looked: nothing waits
            async with actors.open_system(journal(), [pgshort], node="a", queues=[q]) as a:
                await a.start(pgshort, "d0", queue=q, seconds=1.0)
                for i in range(1, 4):
                    await a.start(pgshort, f"d{i}", queue=q)
                await trio.sleep(0.3)  # d0 is in its step; a "dies" (leaves) here
            assert [] == DONE
            # b takes d0 over and finishes it, and then, with no new work
            # of its own, starts what a left queued.
            died_at = trio.current_time()
            with trio.fail_after(15):
                results = [await b.get(f"pgshort/d{i}").result() for i in range(4)]
            took = trio.current_time() - died_at
            info = await released(b, q)
    assert [f"d{i}" for i in range(4)] == results
    assert (0, 0) == (info.waiting, info.running)
    assert took < 10, took
