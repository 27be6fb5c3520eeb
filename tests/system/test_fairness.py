"""Long loops of the runtime yield: a consumer draining a large backlog, or
a long listing, never starves the other tasks of the trio run."""

from __future__ import annotations

import time

import trio

from actors import Context, Signal, process
from storage import Txn, instance_id

BACKLOG = 30_000
# A stream hands out at most 256 values between two schedule points; trio
# runs each runnable task once per batch, in random order, so a consumer
# may take two turns between two of another task's.
MOST_BETWEEN_TICKS = 2 * 256
stop = Signal("stop")


@process("feed/:name")
async def feed(ctx: Context, name: str) -> None:
    await ctx.emit(0)
    await ctx.wait(stop)


class Ticker:
    """A task that counts its wake-ups, the longest real-time gap between
    them, and the most progress (``progress()``, say values drained) made
    by others between two of them."""

    def __init__(self, progress=lambda: 0) -> None:
        self.ticks = 0
        self.max_gap = 0.0
        self.max_progress = 0
        self._progress = progress

    async def run(self) -> None:
        last = time.perf_counter()
        done = self._progress()
        while True:
            await trio.lowlevel.checkpoint()
            now = time.perf_counter()
            self.max_gap = max(self.max_gap, now - last)
            last = now
            self.max_progress = max(self.max_progress, self._progress() - done)
            done = self._progress()
            self.ticks += 1


async def _with_backlog(any_opener) -> None:
    """An instance at feed/a whose stream holds BACKLOG + 1 values."""
    async with any_opener(feed) as system:
        handle = await system.start(feed, "a")
        async with system.stream("feed/a", consumer="first") as values:
            async for _ in values:
                break
        assert "suspended" == handle.status
    journal = any_opener.journal()
    await journal.open()
    try:
        txn = Txn()
        for i in range(1, BACKLOG + 1):
            txn.append_stream(instance_id("feed/a"), i)
        await journal.commit(txn, durable=True)
    finally:
        await journal.close()


async def test_draining_a_large_backlog_lets_other_tasks_run(any_opener):
    await _with_backlog(any_opener)
    async with any_opener(feed) as system:
        total = seen = 0
        ticker = Ticker(lambda: seen)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker.run)
            await trio.sleep(0.01)
            before = ticker.ticks
            started = time.perf_counter()
            async with system.stream("feed/a", consumer="drain") as values:
                async for value in values:
                    total += value
                    seen += 1
                    if seen == BACKLOG + 1:
                        break
            took = time.perf_counter() - started
            ticks = ticker.ticks - before
            nursery.cancel_scope.cancel()
        print(
            f"drained {seen} values in {took:.3f} s; another task ran {ticks} times, "
            f"longest gap {ticker.max_gap * 1000:.1f} ms, "
            f"most values drained meanwhile {ticker.max_progress}"
        )
        assert BACKLOG * (BACKLOG + 1) // 2 == total
        # One schedule point per batch of 256 values at least: counted in
        # values, not in real time, which a loaded machine stretches.
        assert ticks >= BACKLOG // 256 // 2
        assert ticker.max_progress <= MOST_BETWEEN_TICKS


@process("many/:name")
async def many(ctx: Context, name: str) -> None:
    await ctx.wait(stop)


async def test_a_long_query_lets_other_tasks_run(any_opener):
    async with any_opener(many, passivate_after=0) as system:
        async with trio.open_nursery() as nursery:  # started together: a few group commits
            for i in range(2000):
                nursery.start_soon(system.start, many, str(i))
        ticker = Ticker()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker.run)
            await trio.sleep(0.01)
            before = ticker.ticks
            found = [info.id async for info in system.query(process=many)]
            ticks = ticker.ticks - before
            nursery.cancel_scope.cancel()
        assert 2000 == len(found)
        assert ticks >= 2000 // 256 // 2
