"""What the runtime suites share: the processes they run, the probe their
process code reports to, and the helpers that open systems and time them."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

from ._registry import Measurement

_MAP_SIZE = 1 << 30
_FOREVER = 1e9  # passivate_after that never passivates during a measurement
_SENDERS = 1000
_INSTANCES = 1000
_STARTERS = 1000
_IN_FLIGHT = 100  # processes started together in one wave (the targets are set at 100)
_PAYLOAD = {"order": "o-17", "by": "ann"}
_ROOT = Path(__file__).resolve().parent.parent

ping = Signal("ping")
tick = Signal("tick")


def _warmup(seconds: float) -> float:
    return min(0.25, seconds / 4)


# -- what process code reports back ------------------------------------------------


class _Probe:
    """Process code calls into this (plain calls, never awaits) so the
    benchmark knows when a message reached it. ``expect(token)`` gives an
    event set when a message with that int payload is seen; a replayed wait
    sees an old token, which nobody expects any more."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.waiting: dict[int, trio.Event] = {}
        self.marks: dict[str, float] = {}

    def expect(self, token: int) -> trio.Event:
        event = self.waiting[token] = trio.Event()
        return event

    def seen(self, payload: Any) -> None:
        self.count += 1
        if type(payload) is int:
            event = self.waiting.pop(payload, None)
            if event is not None:
                event.set()


_probe = _Probe()


# -- the processes -----------------------------------------------------------------


@process("sink/:id")
async def sink(ctx: Context, id: str, *, ticks: int = 0) -> None:
    for _ in range(ticks):
        await ctx.wait(tick)
    while True:
        _probe.seen(await ctx.wait(ping))


async def _noop(i: int) -> int:
    return i


def _noop_sync(i: int) -> int:
    return i


@process("job/:id")
async def job(
    ctx: Context, id: str, *, steps: int, sync: bool = False, inline: bool = False
) -> int:
    fn = _noop_sync if sync else _noop
    for i in range(steps):
        await ctx.step(fn, i, thread=not inline)
    return steps


@process("leaf/:n")
async def leaf(ctx: Context, n: str) -> str:
    return n


@process("caller/:id")
async def caller(ctx: Context, id: str) -> None:
    i = 0
    while True:
        await ctx.call(leaf, str(i))
        _probe.count += 1
        i += 1


@process("scoper/:id")
async def scoper(ctx: Context, id: str, *, n: int) -> int:
    return len(await ctx.scope([str(i) for i in range(n)], leaf))


@process("root/:id")
async def root(ctx: Context, id: str, *, fanout: int) -> None:
    await ctx.all(*[ctx.spawn(branch, str(i), fanout=fanout) for i in range(fanout)])
    await ctx.wait(ping)


@process("branch/:id")
async def branch(ctx: Context, id: str, *, fanout: int) -> None:
    await ctx.all(*[ctx.spawn(twig, str(i)) for i in range(fanout)])
    await ctx.wait(ping)


@process("twig/:id")
async def twig(ctx: Context, id: str) -> None:
    _probe.count += 1
    await ctx.wait(ping)


@process("producer/:id")
async def producer(ctx: Context, id: str, *, batch: int) -> None:
    n = 0
    while True:
        await ctx.all(*[ctx.emit(n + i) for i in range(batch)])
        n += batch


async def _undo(i: int) -> None:
    return None


@process("saga/:id")
async def saga(ctx: Context, id: str, *, n: int) -> None:
    for i in range(n):
        await ctx.step(_noop, i, compensate=_undo)
    _probe.marks[id] = time.perf_counter()
    raise RuntimeError("fail after the forward steps, to compensate them")


_PROCESSES = [sink, job, leaf, caller, scoper, root, branch, twig, producer, saga]


# -- helpers -----------------------------------------------------------------------


def _lmdb(directory: Path) -> LMDBJournal:
    return LMDBJournal(directory / "journal", map_size=_MAP_SIZE)


def _open(journal: Any, passivate_after: float = _FOREVER) -> Any:
    return actors.open_system(
        journal, processes=_PROCESSES, random=random.Random(0), passivate_after=passivate_after
    )


async def _until(
    condition: Callable[[], bool], timeout: float = 120.0, every: float = 0.002
) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(every)


def _passivated(system: Any) -> bool:
    # The system's private live table (the tests' until_passivated reads it too).
    return not system.registry.live and not system.registry.activating


async def _count_rate(seconds: float, count: Callable[[], int]) -> float:
    """Events per second over a window of ``seconds``, after a warm-up."""
    await trio.sleep(_warmup(seconds))
    start, first = time.perf_counter(), count()
    await trio.sleep(seconds)
    return (count() - first) / (time.perf_counter() - start)


async def _repeat_rate(
    seconds: float,
    once: Callable[[], Awaitable[int]],
    warm: Callable[[], Awaitable[Any]] | None = None,
) -> float:
    """Things/s: run ``once`` (returning how many things it did) until
    ``seconds`` have passed, at least once; ``warm`` runs first, untimed."""
    if warm is not None:
        await warm()
    start, done = time.perf_counter(), 0
    while True:
        done += await once()
        if (now := time.perf_counter()) >= start + seconds:
            return done / (now - start)


async def _start_many(
    system: Any, proc: Any, ids: Sequence[str], starters: int, **input: Any
) -> None:
    """Start one instance per id, ``starters`` at a time."""
    ids = list(ids)

    async def starter(k: int) -> None:
        for i in range(k, len(ids), starters):
            await system.start(proc, ids[i], **input)

    async with trio.open_nursery() as nursery:
        for k in range(min(starters, len(ids))):
            nursery.start_soon(starter, k)


async def _long_and_short(system: Any, effects: int, first_token: int = 1) -> int:
    """Start ``sink/long`` with a log of ``effects`` + 1 waits and
    ``sink/short`` with a log of 1 (the replay figures wake them); returns
    the next free probe token."""
    await system.start(sink, "long", ticks=effects)
    await system.start(sink, "short")
    async with trio.open_nursery() as nursery:
        for _ in range(effects):
            nursery.start_soon(system.send, "sink/long", tick, None)
    for token, address in enumerate(("sink/long", "sink/short"), start=first_token):
        await _ping(system, address, token)
    return first_token + 2


async def _ping(system: Any, address: str, token: int) -> float:
    """Seconds from before ``send`` until the process code has the message."""
    event = _probe.expect(token)
    start = time.perf_counter()
    await system.send(address, ping, token)
    await event.wait()
    return time.perf_counter() - start


class _Sampler:
    """One sample that gives several values (p50 and p99 of one run, ...).

    The registry takes one value per sample; the first of this sampler's
    measurements runs the sample and the others, next in the same round,
    read the values it left.
    """

    def __init__(self, fn: Callable[[Path, float], dict[str, float]]) -> None:
        self._fn = fn
        self._last: dict[str, float] = {}

    def measurements(self, rows: Sequence[tuple[Any, ...]]) -> list[Measurement]:
        """``rows``: (name, unit, key of the sample's dict, baselines[, target
        [, meaning[, floor]]]): the rest as `Measurement` takes them."""
        out = []
        for i, (name, unit, key, baselines, *rest) in enumerate(rows):
            if i == 0:

                def sample(directory: Path, seconds: float, key: str = key) -> float:
                    self._last = self._fn(directory, seconds)
                    return self._last[key]

            else:

                def sample(directory: Path, seconds: float, key: str = key) -> float:
                    return self._last[key]

            out.append(Measurement(name, unit, sample, baselines, *rest))
        return out
