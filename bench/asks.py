"""The ask suite: request/reply round trips, beside trio's own ping-pong.

One asker loops on ``await system.ask(...)`` to one in-memory instance whose
process takes each request with ``ctx.receive`` and answers with
``ctx.reply`` (nothing else): the runtime's cost of a durable round trip,
the send and the reply each committed. The baseline, measured in the same
run and interleaved with it:

- ``trio ping-pong``: one task sends a request on a memory channel, a
  second task receives it and sends the answer back on another, the first
  receives it (round trips/s): trio's cost of the same round trip.

Measurements (targets declared beside the figures, printed with them):

1. ask round trips/s on `MemoryJournal`, one asker. Target >= 0.5x trio
   ping-pong.
2. the same with 100 concurrent askers, each to its own instance.
3. ask round trip on LMDB (durability "sync"), µs: two synced commits (the
   ask, then the reply's log entry) against one raw LMDB commit.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal, MemoryJournal

from ._registry import (
    Measurement,
    Options,
    Result,
    at_least,
    contains,
    run_measurements,
    suite,
)
from .journal import raw_commit

_FOREVER = 1e9  # passivate_after that never passivates during a measurement
_MAP_SIZE = 1 << 30

request = Signal("request")


@process("server/:id")
async def server(ctx: Context, id: str) -> None:
    while True:
        _, payload = await ctx.receive(request)
        await ctx.reply(payload)


def _open(journal: Any) -> Any:
    return actors.open_system(
        journal, processes=[server], random=random.Random(0), passivate_after=_FOREVER
    )


async def _rate(seconds: float, count: Any) -> float:
    await trio.sleep(min(0.25, seconds / 4))  # warm up
    start, first = time.perf_counter(), count()
    await trio.sleep(seconds)
    return (count() - first) / (time.perf_counter() - start)


def pingpong_rate(directory: Path, seconds: float) -> float:
    """Round trips/s between two trio tasks over two memory channels."""

    async def main() -> float:
        done = 0
        ask_send, ask_recv = trio.open_memory_channel[Any](math.inf)
        reply_send, reply_recv = trio.open_memory_channel[Any](math.inf)

        async def asker() -> None:
            nonlocal done
            n = 0
            while True:
                n += 1
                await ask_send.send(n)
                await reply_recv.receive()
                done += 1

        async def answerer() -> None:
            async for n in ask_recv:
                await reply_send.send(n)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(asker)
            nursery.start_soon(answerer)
            rate = await _rate(seconds, lambda: done)
            nursery.cancel_scope.cancel()
        return rate

    return trio.run(main)


def ask_rate(directory: Path, seconds: float, *, askers: int = 1) -> float:
    """Ask round trips/s on a MemoryJournal, ``askers`` each to its own instance."""

    async def main() -> float:
        done = 0
        async with _open(MemoryJournal()) as system:
            for k in range(askers):
                await system.start(server, str(k))

            async def asker(k: int) -> None:
                nonlocal done
                n = 0
                while True:
                    n += 1
                    await system.ask(f"server/{k}", request, n)
                    done += 1

            async with trio.open_nursery() as nursery:
                for k in range(askers):
                    nursery.start_soon(asker, k)
                rate = await _rate(seconds, lambda: done)
                nursery.cancel_scope.cancel()
        return rate

    return trio.run(main)


def lmdb_ask_latency(directory: Path, seconds: float) -> float:
    """Median µs of one ask round trip on LMDB, one asker."""

    async def main() -> float:
        journal = LMDBJournal(directory / "journal", map_size=_MAP_SIZE)
        async with _open(journal) as system:
            await system.start(server, "0")
            samples = []
            deadline = time.perf_counter() + seconds
            n = 0
            while time.perf_counter() < deadline or n < 10:
                n += 1
                start = time.perf_counter()
                await system.ask("server/0", request, n)
                samples.append(time.perf_counter() - start)
        samples.sort()
        return 1e6 * samples[len(samples) // 2]

    return trio.run(main)


def raw_commit_latency(directory: Path, seconds: float) -> float:
    """µs per raw LMDB synced commit of one put."""
    return 1e6 / raw_commit(directory, seconds)


@suite("ask")
def ask_suite(options: Options) -> list[Result]:
    pingpong = ("trio ping-pong",)
    return run_measurements(
        "ask",
        [
            Measurement(
                "trio ping-pong",
                "round trips/s",
                pingpong_rate,
                meaning="baseline: a request and its answer between two trio tasks, in memory",
            ),
            Measurement(
                "memory ask, 1 asker",
                "round trips/s",
                ask_rate,
                pingpong,
                target=at_least(0.5, "trio ping-pong"),
                meaning="system.ask to a process that replies, one after another, MemoryJournal",
            ),
            Measurement(
                "memory ask, 100 askers",
                "round trips/s",
                lambda d, s: ask_rate(d, s, askers=100),
                pingpong,
                meaning="the same from 100 askers at once, each to its own process",
            ),
            Measurement(
                "raw-commit",
                "µs",
                raw_commit_latency,
                meaning="baseline: one raw LMDB synced commit of one put",
            ),
            Measurement(
                "lmdb ask round trip p50",
                "µs",
                lmdb_ask_latency,
                ("raw-commit",),
                meaning="one system.ask answered, on LMDB: the ask and the reply each stored",
                floor=contains("raw-commit", "an ask waits for at least one synced commit"),
            ),
        ],
        options,
    )
