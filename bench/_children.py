"""The runtime suite's figures 8 and 9 (see `bench.runtime`): children
and supervision trees, streams and sagas."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import trio

import actors

from ._kit import (
    _count_rate,
    _lmdb,
    _open,
    _probe,
    _repeat_rate,
    _until,
    caller,
    producer,
    root,
    saga,
    scoper,
)

# -- 8: supervision ------------------------------------------------------------------


def call_rate(directory: Path, seconds: float, parents: int = 10) -> float:
    """Children/s through ``ctx.call``, ``parents`` parents each calling one at a time."""

    async def main() -> float:
        _probe.reset()
        async with _open(_lmdb(directory)) as system:
            for k in range(parents):
                await system.start(caller, str(k))
            return await _count_rate(seconds, lambda: _probe.count)

    return trio.run(main)


def nursery_seq_rate(directory: Path, seconds: float, parents: int = 10) -> float:
    """Tasks/s, ``parents`` tasks each starting one task in a nursery and awaiting it."""

    async def main() -> float:
        done = 0

        async def trivial() -> None:
            await trio.lowlevel.checkpoint()

        async def parent() -> None:
            nonlocal done
            while True:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trivial)
                done += 1

        async with trio.open_nursery() as nursery:
            for _ in range(parents):
                nursery.start_soon(parent)
            rate = await _count_rate(seconds, lambda: done)
            nursery.cancel_scope.cancel()
        return rate

    return trio.run(main)


def scope_rate(directory: Path, seconds: float, n: int = 1000) -> float:
    """Children/s through ``ctx.scope`` over ``n`` items, one scope after another."""

    async def main() -> float:
        async with _open(_lmdb(directory)) as system:
            runs = 0

            async def once(size: int = n) -> int:
                nonlocal runs
                runs += 1
                handle = await system.start(scoper, str(runs), n=size)
                return await handle.result()

            return await _repeat_rate(seconds, once, lambda: once(n // 10))

    return trio.run(main)


def nursery_batch_rate(directory: Path, seconds: float, n: int = 1000) -> float:
    """Tasks/s, ``n`` trivial tasks started together in a nursery, one nursery after another."""

    async def main() -> float:
        async def trivial() -> None:
            await trio.lowlevel.checkpoint()

        async def once() -> int:
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(trivial)
            return n

        return await _repeat_rate(seconds, once)

    return trio.run(main)


def cascade(directory: Path, seconds: float, fanout: int) -> dict[str, float]:
    """A tree of fanout**2 waiting descendants: built per second, and ms to cancel it."""

    async def main() -> dict[str, float]:
        _probe.reset()
        descendants = fanout + fanout * fanout
        async with _open(_lmdb(directory)) as system:
            start = time.perf_counter()
            await system.start(root, "r", fanout=fanout)
            await _until(lambda: _probe.count == fanout * fanout, every=0.005)
            await _until(
                lambda: (
                    len(system.registry.live) == descendants + 1
                    and all(a.status == "suspended" for a in system.registry.live.values())
                ),
                every=0.005,
            )
            built = time.perf_counter() - start
            start = time.perf_counter()
            await system.cancel("root/r")
            await _until(lambda: not system.registry.live, every=0.0005)
            cancelled = time.perf_counter() - start
        return {"built_per_s": descendants / built, "cancel_ms": 1e3 * cancelled}

    return trio.run(main)


def nursery_cancel(directory: Path, seconds: float, fanout: int) -> float:
    """ms to cancel a two-level nursery tree of fanout**2 sleeping tasks."""

    async def main() -> float:
        ready = 0

        async def sleeper() -> None:
            nonlocal ready
            ready += 1
            await trio.sleep_forever()

        async def subtree() -> None:
            async with trio.open_nursery() as nursery:
                for _ in range(fanout):
                    nursery.start_soon(sleeper)

        async with trio.open_nursery() as nursery:
            for _ in range(fanout):
                nursery.start_soon(subtree)
            while ready < fanout * fanout:
                await trio.sleep(0.001)
            start = time.perf_counter()
            nursery.cancel_scope.cancel()
        return 1e3 * (time.perf_counter() - start)

    return trio.run(main)


# -- 9: streams and sagas --------------------------------------------------------------


def stream_rate(directory: Path, seconds: float, batch: int = 100) -> float:
    """Values/s read by a durable consumer while a producer emits ``batch`` at a time."""

    async def main() -> float:
        read = 0
        async with _open(_lmdb(directory)) as system:
            await system.start(producer, "p", batch=batch)

            async def consume() -> None:
                nonlocal read
                async with system.stream("producer/p", consumer="c") as stream:
                    async for _ in stream:
                        read += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                rate = await _count_rate(seconds, lambda: read)
                nursery.cancel_scope.cancel()
        return rate

    return trio.run(main)


def saga_costs(directory: Path, seconds: float, steps: int = 100) -> dict[str, float]:
    """µs per step of a failing saga's forward phase and of its compensation phase."""

    async def main() -> dict[str, float]:
        _probe.reset()
        forward = compensation = 0.0
        runs = 0
        async with _open(_lmdb(directory)) as system:
            deadline = time.perf_counter() + seconds
            while runs < 2 or time.perf_counter() < deadline:
                runs += 1
                start = time.perf_counter()
                handle = await system.start(saga, str(runs), n=steps)
                with contextlib.suppress(actors.ProcessFailed):
                    await handle.result()
                end = time.perf_counter()
                if runs > 1:  # the first run warms up
                    failed_at = _probe.marks[str(runs)]
                    forward += failed_at - start
                    compensation += end - failed_at
        return {
            "forward_us": 1e6 * forward / ((runs - 1) * steps),
            "compensation_us": 1e6 * compensation / ((runs - 1) * steps),
        }

    return trio.run(main)
