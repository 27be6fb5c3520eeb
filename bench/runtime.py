"""The runtime suite: the actor runtime end to end, beside the raw baselines.

Every measurement runs on a fresh directory (a fresh `LMDBJournal`, or a
fresh `MemoryJournal`) with its own system, closed before the next one. The
sends, steps and children are trivial, so what is measured is the runtime's
own cost. Baselines are measured in the same run, interleaved with it:

- ``raw-1000/txn``: raw LMDB, 1000 puts per synced transaction (records/s,
  as in the journal suite): the disk ceiling for batched durable writes.
- ``raw-commit``: raw LMDB, one put per synced transaction, as a latency
  (µs): no durable send can be faster than one of these; and the same
  sample as a rate, ``raw-commits/s``.
- ``trio-channel``: 1000 trio tasks ``send_nowait`` into memory channels
  read by 1000 receiver tasks (msgs/s): trio's cost of handing a message over.
- ``bare-task``: RSS of one ``trio.sleep_forever`` task.
- ``nursery-seq``, ``nursery-1000``, ``nursery-cancel``: the same number of
  plain trio tasks started in a nursery (one at a time, or 1000 together),
  and cancelling a nursery tree of as many sleeping tasks.

Measurements (each target is declared beside its figure in `runtime_suite`,
printed with it and checked against the ratio measured in the same run):

1. durable signals/s on LMDB (durability "sync"): 1000 concurrent senders
   loop on ``await system.send(...)``, all into one instance, or each into
   its own of 1000 instances; each instance loops on ``ctx.wait``. Counted
   when the process code has the message. Target, over 1000 instances:
   >= 0.10x raw-1000/txn.
2. the same on `MemoryJournal`.
3. processes started and completed per second, in waves of 100
   concurrent ``start`` then ``result()``; 1 or 10 steps of a trivial ``async``
   function, and 1 step of a trivial sync function (in a worker thread).
   Targets >= 2.3x raw-commits/s for 1 async step, >= 0.6x for 10; the
   sync steps are read against the async one (the thread's cost).
4. send -> resumed latency, one sender, one in-memory instance: from before
   ``send`` to the process code having the message (it sets a trio.Event
   right after its ``ctx.wait`` returns; no step). Targets p50 <= 1.2x and
   p99 <= 2x raw-commit; the send contains one synced commit, so a ratio
   under 1x is noise, and its verdict says so.
5. RSS per live instance (suspended on a wait, in memory) against a bare
   sleeping task: N instances or tasks in a child process, VmRSS after
   ``gc.collect()``, delta / N. Target <= 1.5x a bare task.
6. N stored instances, all passivated (``passivate_after=0``): the process's
   VmRSS after, its growth, the rate they were created and passivated at,
   and send -> resumed for 200 random ones (median and p99; includes
   activation and replay). Targets for 1M (``--full``): RSS <= 200 MB,
   anonymous growth <= 60 MB, p99 <= 10 ms. In a child process.
7. send -> resumed of a passivated instance whose log holds 1000 effects
   (waits), against one whose log holds 1: the replay cost. Target <= 3x.
8. children through ``ctx.call`` (10 parents, each one call at a time) and
   ``ctx.scope`` over 1000 items, children/s; a tree of 10k descendants
   (100 children of ``ctx.spawn``, 100 grandchildren each, all waiting):
   the rate it is built at and the time from ``system.cancel(root)`` until
   every descendant is cancelled and out of memory.
9. stream values/s from a producer (emitting 100 at a time with
   ``ctx.all``) to a durable consumer (``async for v in system.stream(...)``);
   a saga of 100 compensable ``async`` steps that fails: µs per step of the
   forward phase and of the compensation phase.

Window measurements take ``options.repeats`` samples each, interleaved by
the registry; the RSS and cascade ones (seconds of fixed work a sample) take
at most 3 (1 in the default run); creating 1M instances takes 3-5 minutes on
a 2-core machine, so 6 is one sample. The default run (not ``--full``) also
uses N=5k for 5, N=10k for 6 and a 50x50 tree for 8 (the rows say which N).
"""

from __future__ import annotations

import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from storage import MemoryJournal

from ._children import (
    call_rate,
    cascade,
    nursery_batch_rate,
    nursery_cancel,
    nursery_seq_rate,
    saga_costs,
    scope_rate,
    stream_rate,
)
from ._kit import (
    _IN_FLIGHT,
    _INSTANCES,
    _PAYLOAD,
    _ROOT,
    _SENDERS,
    _STARTERS,
    _count_rate,
    _lmdb,
    _long_and_short,
    _open,
    _passivated,
    _ping,
    _probe,
    _repeat_rate,
    _Sampler,
    _start_many,
    _until,
    _warmup,
    job,
    ping,
    sink,
)
from ._registry import (
    Measurement,
    Options,
    Result,
    at_least,
    at_most,
    contains,
    progress,
    run_measurements,
    suite,
)
from .journal import raw_batch, raw_commit

# -- 1, 2: signals -----------------------------------------------------------------


def raw_commit_costs(directory: Path, seconds: float) -> dict[str, float]:
    """Raw LMDB synced commits of one put: µs each, and commits/s."""
    rate = raw_commit(directory, seconds)
    return {"us": 1e6 / rate, "per_s": rate}


def channel_rate(directory: Path, seconds: float, pairs: int = _SENDERS) -> float:
    """Messages/s from ``pairs`` tasks ``send_nowait`` into channels read by as many tasks."""

    async def main() -> float:
        received = 0

        async def pair() -> None:
            send, recv = trio.open_memory_channel[Any](math.inf)

            async def produce() -> None:
                while True:
                    send.send_nowait(_PAYLOAD)
                    await trio.lowlevel.checkpoint()

            async def consume() -> None:
                nonlocal received
                async for _ in recv:
                    received += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(produce)
                nursery.start_soon(consume)

        async with trio.open_nursery() as nursery:
            for _ in range(pairs):
                nursery.start_soon(pair)
            rate = await _count_rate(seconds, lambda: received)
            nursery.cancel_scope.cancel()
        return rate

    return trio.run(main)


def signal_rate(directory: Path, seconds: float, *, memory: bool, instances: int) -> float:
    """Signals/s taken by process code, from ``_SENDERS`` concurrent senders."""

    async def main() -> float:
        _probe.reset()
        journal = MemoryJournal() if memory else _lmdb(directory)
        async with _open(journal) as system:
            ids = [str(i) for i in range(instances)]
            await _start_many(system, sink, ids, _STARTERS)

            async def sender(address: str) -> None:
                while True:
                    await system.send(address, ping, _PAYLOAD)

            async with trio.open_nursery() as nursery:
                for k in range(_SENDERS):
                    nursery.start_soon(sender, f"sink/{ids[k % instances]}")
                rate = await _count_rate(seconds, lambda: _probe.count)
                nursery.cancel_scope.cancel()
        return rate

    return trio.run(main)


def send_many_rate(directory: Path, seconds: float, *, instances: int = _INSTANCES) -> float:
    """Signals/s durably stored by ``system.send_many``, 1000 per call (one
    to each of ``instances`` live instances), as fast as one sender can; the
    instances take them meanwhile (the trio thread is shared)."""

    async def main() -> float:
        _probe.reset()
        async with _open(_lmdb(directory)) as system:
            ids = [str(i) for i in range(instances)]
            await _start_many(system, sink, ids, _STARTERS)
            batch = [(f"sink/{ids[k % instances]}", ping, _PAYLOAD) for k in range(1000)]

            async def once() -> int:
                await system.send_many(batch)
                # Let the instances keep up, so mailboxes do not grow without bound.
                while _probe.count < sent[0] - 4 * len(batch):
                    await trio.sleep(0.001)
                sent[0] += len(batch)
                return len(batch)

            sent = [0]
            return await _repeat_rate(seconds, once, once)

    return trio.run(main)


# -- 3: processes ------------------------------------------------------------------


def process_rate(
    directory: Path, seconds: float, *, steps: int, sync: bool = False, inline: bool = False
) -> float:
    """Instances started and completed per second, in waves of ``_IN_FLIGHT``
    concurrent ``start`` + ``result()``."""

    async def main() -> float:
        async with _open(_lmdb(directory)) as system:
            waves = 0

            async def wave(n: int = _IN_FLIGHT) -> int:
                nonlocal waves
                waves += 1

                async def one(k: int) -> None:
                    handle = await system.start(
                        job, f"{waves}.{k}", steps=steps, sync=sync, inline=inline
                    )
                    await handle.result()

                async with trio.open_nursery() as nursery:
                    for k in range(n):
                        nursery.start_soon(one, k)
                return n

            return await _repeat_rate(seconds, wave, wave)

    return trio.run(main)


# -- 4: latency --------------------------------------------------------------------


def latency(directory: Path, seconds: float) -> dict[str, float]:
    """p50 and p99 µs of send -> resumed, one sender, one in-memory instance."""

    async def main() -> dict[str, float]:
        _probe.reset()
        async with _open(_lmdb(directory)) as system:
            await system.start(sink, "echo")
            token = 0
            deadline = time.perf_counter() + _warmup(seconds)
            while time.perf_counter() < deadline:
                token += 1
                await _ping(system, "sink/echo", token)
            samples = []
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                token += 1
                samples.append(await _ping(system, "sink/echo", token))
        samples.sort()
        return {
            "p50": 1e6 * samples[len(samples) // 2],
            "p99": 1e6 * samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        }

    return trio.run(main)


_WAKES = 200  # random passivated instances woken, for the median and p99


# -- 5, 6: memory (in child processes, so each starts from a clean heap) --------------


def _rss() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process, in bytes."""
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                found[key] = int(value.split()[0]) * 1024
    return found


def _settled_rss() -> dict[str, int]:
    gc.collect()
    return _rss()


async def _child_live(directory: Path, n: int) -> dict[str, float]:
    async with _open(_lmdb(directory)) as system:
        await _start_many(system, sink, [f"w{i}" for i in range(100)], 100)  # warm the code paths
        await _until(lambda: all(a.status == "suspended" for a in system.registry.live.values()))
        before = _settled_rss()
        await _start_many(system, sink, [str(i) for i in range(n)], _STARTERS)
        await _until(
            lambda: (
                len(system.registry.live) == n + 100
                and all(a.status == "suspended" for a in system.registry.live.values())
            ),
            every=0.02,
        )
        after = _settled_rss()
    return {k: (after[k] - before[k]) / n for k in after}


async def _child_bare(directory: Path, n: int) -> dict[str, float]:
    async with trio.open_nursery() as nursery:
        for _ in range(100):
            nursery.start_soon(trio.sleep_forever)
        await trio.sleep(0.01)
        before = _settled_rss()
        for _ in range(n):
            nursery.start_soon(trio.sleep_forever)
        await trio.sleep(0.05)  # every task has run to its sleep
        after = _settled_rss()
        nursery.cancel_scope.cancel()
    return {k: (after[k] - before[k]) / n for k in after}


async def _child_passivated(directory: Path, n: int) -> dict[str, float]:
    async with _open(_lmdb(directory), passivate_after=0) as system:
        before = _settled_rss()
        tasks = trio.lowlevel.current_statistics().tasks_living
        start = time.perf_counter()
        await _start_many(system, sink, [str(i) for i in range(n)], _STARTERS)
        # Out of the live table, and their tasks have exited.
        await _until(
            lambda: (
                _passivated(system) and trio.lowlevel.current_statistics().tasks_living <= tasks
            ),
            every=0.01,
        )
        created = time.perf_counter() - start
        after = _settled_rss()
        rng = random.Random(0)
        wake = []
        for token, i in enumerate(rng.sample(range(n), _WAKES), start=1):
            wake.append(await _ping(system, f"sink/{i}", token))
            await _until(lambda: _passivated(system), every=0.0005)
    return {
        "rss_mb": after["VmRSS"] / 2**20,
        "growth_mb": (after["VmRSS"] - before["VmRSS"]) / 2**20,
        "anon_growth_mb": (after["RssAnon"] - before["RssAnon"]) / 2**20,
        "created_per_s": n / created,
        "wake_us": 1e6 * statistics.median(wake),
        "wake_p99_us": 1e6 * sorted(wake)[int(len(wake) * 0.99)],
    }


_CHILDREN = {"live": _child_live, "bare": _child_bare, "passivated": _child_passivated}


def _child_main(argv: list[str]) -> None:
    """Entry point of the child process: ``MODE DIRECTORY N``; prints JSON."""
    mode, directory, n = argv
    result = trio.run(_CHILDREN[mode], Path(directory), int(n))
    print(json.dumps(result), flush=True)


def _in_child(mode: str, directory: Path, n: int) -> dict[str, float]:
    code = "import sys; from bench.runtime import _child_main; _child_main(sys.argv[1:])"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [sys.executable, "-c", code, mode, str(directory), str(n)],
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {mode!r} child process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def rss_per_instance(directory: Path, seconds: float, n: int) -> dict[str, float]:
    live = _in_child("live", directory, n)
    bare = _in_child("bare", directory, n)
    progress(
        f"runtime: rss per live instance {live['VmRSS']:,.0f} B (anon {live['RssAnon']:,.0f}, "
        f"file {live['RssFile']:,.0f}); per bare task {bare['VmRSS']:,.0f} B"
    )
    return {"instance": live["VmRSS"], "task": bare["VmRSS"]}


# -- 7: replay ---------------------------------------------------------------------


def replay(
    directory: Path, seconds: float, effects: int = 1000, wakes: int = 20
) -> dict[str, float]:
    """Median µs of send -> resumed for passivated instances with a long and a short log."""

    async def main() -> dict[str, float]:
        _probe.reset()
        async with _open(_lmdb(directory)) as system:
            token = await _long_and_short(system, effects) - 1
        # Reopened: both are suspended on disk; each message activates and replays one.
        times: dict[str, list[float]] = {"sink/long": [], "sink/short": []}
        async with _open(_lmdb(directory), passivate_after=0) as system:
            for _ in range(wakes):
                for address, found in times.items():
                    token += 1
                    found.append(await _ping(system, address, token))
                    await _until(lambda: _passivated(system), every=0.0005)
        return {
            "long": 1e6 * statistics.median(times["sink/long"]),
            "short": 1e6 * statistics.median(times["sink/short"]),
        }

    return trio.run(main)


# -- the suite ---------------------------------------------------------------------


@suite("runtime")
def runtime_suite(options: Options) -> list[Result]:
    quick, full = options.quick, options.full
    live_n = 5_000 if quick else 10_000
    stored_n = 10_000 if quick else 1_000_000
    fanout = 50 if quick else 100
    tree = f"{fanout + fanout * fanout:,}"
    raw = ("raw-1000/txn",)
    commits = "raw-commits/s"
    chan = ("trio-channel",)
    wake_1 = "wake, log of 1"
    cancel = f"nursery-cancel {fanout * fanout:,}"
    forward = "saga forward/step"
    sends_commit = contains("raw-commit", "a durable send waits for one synced commit")
    async_1 = "process, 1 async step"
    # Window measurements: options.repeats samples each, interleaved.
    main = [
        Measurement(
            "raw-1000/txn",
            "records/s",
            raw_batch,
            meaning="baseline: raw LMDB, 1000 puts per synced commit: the disk's ceiling "
            "for batched durable writes",
        ),
        *_Sampler(raw_commit_costs).measurements(
            [
                (
                    "raw-commit",
                    "µs",
                    "us",
                    (),
                    None,
                    "baseline: one raw LMDB synced commit of one put: no durable write is faster",
                ),
                (
                    commits,
                    "commits/s",
                    "per_s",
                    (),
                    None,
                    "baseline: the same as a rate, one synced commit after another",
                ),
            ]
        ),
        Measurement(
            "trio-channel",
            "msgs/s",
            channel_rate,
            meaning="baseline: 1000 trio tasks handing messages over memory channels, "
            "nothing stored",
        ),
        Measurement(
            "lmdb signals -> 1 instance",
            "signals/s",
            lambda d, s: signal_rate(d, s, memory=False, instances=1),
            raw,
            meaning="durable messages into one waiting process, 1000 senders each "
            "awaiting send; counted as the process takes them",
        ),
        Measurement(
            f"lmdb signals -> {_INSTANCES} instances",
            "signals/s",
            lambda d, s: signal_rate(d, s, memory=False, instances=_INSTANCES),
            raw,
            at_least(0.10, "raw-1000/txn"),
            meaning=f"the same, each sender into its own of {_INSTANCES} processes",
        ),
        Measurement(
            "memory signals -> 1 instance",
            "signals/s",
            lambda d, s: signal_rate(d, s, memory=True, instances=1),
            chan,
            meaning="the same into one process on MemoryJournal: the runtime's cost, no disk",
        ),
        Measurement(
            f"memory signals -> {_INSTANCES} instances",
            "signals/s",
            lambda d, s: signal_rate(d, s, memory=True, instances=_INSTANCES),
            chan,
            meaning=f"the same into {_INSTANCES} processes on MemoryJournal",
        ),
        Measurement(
            "send_many, 1000 per call -> 1000 instances",
            "signals/s",
            lambda d, s: send_many_rate(d, s),
            raw,
            at_least(0.25, "raw-1000/txn"),
            meaning="one sender storing 1000 durable messages per send_many call",
        ),
        Measurement(
            async_1,
            "processes/s",
            lambda d, s: process_rate(d, s, steps=1),
            (commits,),
            at_least(2.3, commits),
            meaning=f"a durable 1-step process, start to result, {_IN_FLIGHT} in flight",
        ),
        Measurement(
            "process, 10 async steps",
            "processes/s",
            lambda d, s: process_rate(d, s, steps=10),
            (commits,),
            at_least(0.6, commits),
            meaning=f"a durable 10-step process, start to result, {_IN_FLIGHT} in flight",
        ),
        # Read against the async step: what running the step in a worker
        # thread (or on the trio thread) costs, not against the disk.
        Measurement(
            "process, 1 sync step",
            "processes/s",
            lambda d, s: process_rate(d, s, steps=1, sync=True),
            (async_1,),
            meaning="the 1-step process with a sync step function, run in a worker thread",
        ),
        Measurement(
            "process, 1 sync step, thread=False",
            "processes/s",
            lambda d, s: process_rate(d, s, steps=1, sync=True, inline=True),
            (async_1,),
            meaning="the same with the sync step run on the trio thread (thread=False)",
        ),
        *_Sampler(latency).measurements(
            [
                (
                    "send->resumed p50",
                    "µs",
                    "p50",
                    ("raw-commit",),
                    at_most(1.2, "raw-commit"),
                    "one message to a waiting process, from send to the process having it (median)",
                    sends_commit,
                ),
                (
                    "send->resumed p99",
                    "µs",
                    "p99",
                    ("raw-commit",),
                    at_most(2, "raw-commit"),
                    "the same, 99th percentile",
                    sends_commit,
                ),
            ]
        ),
        *_Sampler(replay).measurements(
            [
                (
                    wake_1,
                    "µs",
                    "short",
                    (),
                    None,
                    "a message to a passivated process with 1 log entry: loaded, replayed, resumed",
                ),
                (
                    "wake, log of 1000",
                    "µs",
                    "long",
                    (wake_1,),
                    at_most(3, wake_1),
                    "the same with 1000 entries in its log: what a long history costs a wake",
                ),
            ]
        ),
        Measurement(
            "nursery-seq",
            "tasks/s",
            nursery_seq_rate,
            meaning="baseline: plain trio tasks started and awaited one at a time",
        ),
        Measurement(
            "ctx.call, 10 parents",
            "children/s",
            call_rate,
            ("nursery-seq",),
            meaning="durable child processes, each called and awaited in turn by 10 parents",
        ),
        Measurement(
            "nursery-1000",
            "tasks/s",
            nursery_batch_rate,
            meaning="baseline: 1000 plain trio tasks started together and awaited",
        ),
        Measurement(
            "ctx.scope of 1000",
            "children/s",
            scope_rate,
            ("nursery-1000",),
            meaning="1000 durable children started together by one parent and awaited",
        ),
        Measurement(
            "stream -> durable consumer",
            "values/s",
            stream_rate,
            raw,
            meaning="values a process emits, read durably by a consumer (system.stream)",
        ),
        *_Sampler(saga_costs).measurements(
            [
                (
                    forward,
                    "µs",
                    "forward_us",
                    (),
                    None,
                    "a step with a compensation registered, per step",
                ),
                (
                    "saga compensation/step",
                    "µs",
                    "compensation_us",
                    (forward,),
                    None,
                    "undoing one such step after the process failed, per step",
                ),
            ]
        ),
    ]
    # Fixed work of a few seconds a sample: at most 3 samples (1 with --quick).
    heavy = [
        *_Sampler(lambda d, s: rss_per_instance(d, s, live_n)).measurements(
            [
                ("bare-task", "B", "task", (), None, "baseline: memory of one sleeping trio task"),
                (
                    f"RSS per live instance, N={live_n:,}",
                    "B",
                    "instance",
                    ("bare-task",),
                    at_most(1.5, "bare-task"),
                    "memory of one process waiting in memory",
                ),
            ]
        ),
        Measurement(
            cancel,
            "ms",
            lambda d, s: nursery_cancel(d, s, fanout),
            meaning=f"baseline: cancelling a nursery tree of {fanout * fanout:,} sleeping "
            "trio tasks",
        ),
        *_Sampler(lambda d, s: cascade(d, s, fanout)).measurements(
            [
                (
                    f"cascade-cancel {tree} descendants",
                    "ms",
                    "cancel_ms",
                    (cancel,),
                    None,
                    "system.cancel of a process until all its descendants are cancelled and gone",
                ),
                (
                    f"spawn tree of {tree}",
                    "instances/s",
                    "built_per_s",
                    (),
                    None,
                    f"a tree of durable processes built: {fanout} children, {fanout} each below",
                ),
            ]
        ),
    ]
    # Creating 1M instances takes minutes: one sample.
    stored = _Sampler(lambda d, s: _in_child("passivated", d, stored_n)).measurements(
        [
            # README's targets are for 1M (the --full N); the default N has none.
            (
                f"{stored_n:,} passivated: RSS",
                "MB",
                "rss_mb",
                (),
                at_most(200) if full else None,
                f"memory of a program holding {stored_n:,} stored processes, none in memory",
            ),
            (
                f"{stored_n:,} passivated: RSS growth",
                "MB",
                "growth_mb",
                (),
                None,
                "what storing them added to it",
            ),
            # The rest of the growth is the journal's map: file pages LMDB's
            # reads touched, which the kernel can drop (page cache).
            (
                f"{stored_n:,} passivated: anonymous growth",
                "MB",
                "anon_growth_mb",
                (),
                at_most(60) if full else None,
                "of which the program's own memory (the rest is page cache)",
            ),
            (
                f"{stored_n:,} passivated: created",
                "instances/s",
                "created_per_s",
                (),
                None,
                "processes started, then passivated at their first wait",
            ),
            (
                f"{stored_n:,} passivated: send->resumed",
                "µs",
                "wake_us",
                (),
                None,
                "a message to a random one of them until it has it (median)",
            ),
            (
                f"{stored_n:,} passivated: send->resumed p99",
                "µs",
                "wake_p99_us",
                (),
                at_most(10_000) if full else None,
                "the same, 99th percentile",
            ),
        ]
    )
    results = run_measurements("runtime", main, options)
    results += run_measurements(
        "runtime", heavy, attrs.evolve(options, repeats=1 if quick else min(options.repeats, 3))
    )
    results += run_measurements("runtime", stored, attrs.evolve(options, repeats=1))
    # The table follows the order of the module doc.
    replay_at = next(i for i, m in enumerate(main) if m.name == wake_1)
    stream_at = next(i for i, m in enumerate(main) if m.name.startswith("stream"))
    order = [
        *main[:replay_at],
        *heavy[:2],
        *stored,
        *main[replay_at:stream_at],
        *heavy[2:],
        *main[stream_at:],
    ]
    position = {m.name: i for i, m in enumerate(order)}
    return sorted(results, key=lambda r: position[r.name])
