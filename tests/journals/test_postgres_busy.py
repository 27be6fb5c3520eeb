"""The PostgreSQL journal beside a CPU-busy trio task.

The committer thread needs the GIL after each round trip to the server, and
a task that computes and checkpoints often keeps the trio thread holding it
(see storage/_handoff.py, and the LMDB journal's test of the same in
test_journal_hostile.py, whose harness this uses). Without the handoff 18
sends got through in 3 s beside a task that checkpoints with ``sleep(0)``,
127 ms each at the median; with it, about 290 at 10 ms. The reads of a
wake run in worker threads, which the same handoff lends the GIL to.
"""

from __future__ import annotations

import time

import pytest
import trio

pytest.importorskip("psycopg", reason="install the 'postgres' extra")

import actors
from actors import process
from storage import PostgresJournal
from tests.journals.test_journal_hostile import (
    _compute_and_checkpoint,
    _trio_thread_on_a_core_of_its_own,
    check_prompt,
    ping,
    send_beside_a_busy_task,
)
from tests.pg import fresh_schema

# The events the test waits on, by the token a ping carries: process code
# sets one once its wait has the ping (a plain call, never an await).
_seen: dict[int, trio.Event] = {}


@process("waker/:n")
async def waker(ctx, n):
    while True:
        token = await ctx.wait(ping)
        if token in _seen:
            _seen.pop(token).set()


# Late time allowed in all, beside the LMDB journal's 50 ms: the server
# shares this host, and its own commit (an fsync of its log) is not ours to
# hurry. In one CI run, one send of 381 took about 150 ms while none of the
# next nine slowest took over 3 ms. What the test guards against is of
# another order: without the handoff every send was slow (127 ms at the
# median, 18 in 3 s).
SERVER_LATE_BUDGET = 0.25


@pytest.mark.slow  # real time: 3 s of sends (1 s with the mild neighbour)
@pytest.mark.parametrize("durability", ["sync", "async"])
@pytest.mark.parametrize("pause", [0, 0.001], ids=["sleep0", "sleep1ms"])
async def test_sends_return_promptly_beside_a_cpu_busy_task(request, pause, durability):
    dsn, schema = fresh_schema(request)
    journal = PostgresJournal(dsn, schema=schema, durability=durability)
    times, stolen = await send_beside_a_busy_task(
        journal, pause, seconds=3.0 if pause == 0 else 1.0
    )
    check_prompt(times, stolen, SERVER_LATE_BUDGET)


@pytest.mark.slow  # real time: 3 s of wakes
async def test_passivated_instances_wake_promptly_beside_a_cpu_busy_task(request):
    # A wake reads the instance in worker threads (a read, a claim, ...),
    # each of which needs the GIL back after its round trip; before the
    # handoff counted them, 8 wakes got through in 3 s (447 ms at the
    # median, 721 ms the slowest); with it 71 (37 ms, 75 ms). The bounds
    # leave room for a 2-core machine that also runs the server.
    dsn, schema = fresh_schema(request)
    journal = PostgresJournal(dsn, schema=schema)
    times: list[float] = []
    async with actors.open_system(
        journal, processes=[waker], control=False, passivate_after=0
    ) as system:
        for i in range(10):
            await system.start(waker, str(i))
        with _trio_thread_on_a_core_of_its_own():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_compute_and_checkpoint, 0, [0.0])
                with trio.move_on_after(3.0):
                    while True:
                        token = len(times) + 1
                        seen = _seen[token] = trio.Event()
                        t0 = time.perf_counter()
                        try:
                            await system.send(f"waker/{token % 10}", ping, token)
                            await seen.wait()
                        finally:
                            times.append(time.perf_counter() - t0)
                nursery.cancel_scope.cancel()
    times.sort()
    shown = [round(t, 3) for t in times[-5:]]
    assert len(times) >= 20, (len(times), shown)
    assert times[len(times) // 2] < 0.2, shown  # the median
