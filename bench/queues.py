"""The queues suite: 1-step processes through a queue at concurrency 100,
against the same processes started without a queue, 100 at a time.

Both keep 100 instances running at once on an LMDB journal (durability
"sync"): "unqueued" has 100 tasks that each start an instance and await its
result, over and over; "queued" starts instances with ``queue=`` (a queue of
concurrency 100), in batches of 1000 by 100 starters, and awaits them all,
so the queue's pump decides when each runs. The ratio is queued/unqueued,
measured round by round in the same run.
"""

from __future__ import annotations

import itertools
import random
import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import trio

import actors
from actors import Context, Queue, process
from storage import LMDBJournal

from ._registry import Measurement, Options, Result, at_least, run_measurements, suite

_CONCURRENCY = 100
_BATCH = 1000
_MAP_SIZE = 1 << 30
_FOREVER = 1e9  # passivate_after that never passivates during a measurement

limited = Queue("bench", concurrency=_CONCURRENCY)


async def _noop(i: int) -> int:
    return i


@process("qjob/:id")
async def qjob(ctx: Context, id: str) -> int:
    result: int = await ctx.step(_noop, 1)
    return result


def _open(directory: Path) -> AbstractAsyncContextManager[actors.ActorSystem]:
    return actors.open_system(
        LMDBJournal(directory / "journal", map_size=_MAP_SIZE),
        processes=[qjob],
        random=random.Random(0),
        passivate_after=_FOREVER,
        queues=[limited],
    )


def unqueued_rate(directory: Path, seconds: float) -> float:
    """Processes/s with 100 tasks each starting one and awaiting it, in a loop."""

    async def main() -> float:
        async with _open(directory) as system:
            ids = itertools.count()
            done = 0
            deadline = time.perf_counter() + seconds

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < deadline:
                    handle = await system.start(qjob, f"u{next(ids)}")
                    await handle.result()
                    done += 1

            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(_CONCURRENCY):
                    nursery.start_soon(worker)
            return done / (time.perf_counter() - start)

    return trio.run(main)


def queued_rate(directory: Path, seconds: float) -> float:
    """Processes/s started with queue= (concurrency 100), batches of 1000."""

    async def main() -> float:
        async with _open(directory) as system:
            ids = itertools.count()
            done = 0
            start = time.perf_counter()
            while True:
                batch = [f"q{next(ids)}" for _ in range(_BATCH)]
                handles: list[actors.Handle] = []

                async def starter(k: int) -> None:
                    for i in range(k, len(batch), _CONCURRENCY):
                        handles.append(await system.start(qjob, batch[i], queue=limited))

                async with trio.open_nursery() as nursery:
                    for k in range(_CONCURRENCY):
                        nursery.start_soon(starter, k)
                for handle in handles:
                    await handle.result()
                done += len(batch)
                if (now := time.perf_counter()) >= start + seconds:
                    return done / (now - start)

    return trio.run(main)


@suite("queues")
def queues_suite(options: Options) -> list[Result]:
    unqueued = "process, 1 async step, 100 at a time"
    return run_measurements(
        "queues",
        [
            Measurement(
                unqueued,
                "processes/s",
                unqueued_rate,
                meaning="a durable 1-step process, start to result, by 100 tasks in a loop",
            ),
            Measurement(
                "queued, 1 async step, concurrency 100",
                "processes/s",
                queued_rate,
                (unqueued,),
                at_least(0.8, unqueued),
                meaning="the same started with queue= (concurrency 100), 1000 at a time",
            ),
        ],
        options,
    )
