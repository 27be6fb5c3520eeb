"""CPU time of waking a passivated instance, and of the parts of the wake.

``python -m bench.wake_cpu [--effects N] [--wakes N] [--profile long|short] [--json PATH]``

Builds an LMDB journal holding ``sink/long`` (a log of N effects) and
``sink/short`` (a log of 1), reopens it with ``passivate_after=0`` and
wakes each in turn with a message, as the runtime suite's "wake, log of
1000" does (each wake adds one entry to the log). Prints, per instance, the
CPU time of a wake from before ``send`` to the process code having the
message: the trio thread's (``time.thread_time``) and the process's (the
LMDB writer thread's too), min and median over the wakes, with wall time
beside them. Then the parts of the long wake alone: reading its log
(`Reader.entries`), reading it through the system's cache of decoded
logs (`storage._log_cache`: the stored rows compared, nothing decoded) and
replaying it with nothing run live (`Actor.check_history`). On a shared machine CPU time is steadier than
wall-clock time; compare the mins.

``--profile long`` runs cProfile over the long wakes and prints its top
functions (by own time, then cumulative).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from actors._actor._instance import Actor
from storage import instance_id

from ._kit import _lmdb, _long_and_short, _open, _passivated, _probe, _until, ping

_ADDRESSES = ("sink/long", "sink/short")


async def _build(directory: Path, effects: int) -> None:
    async with _open(_lmdb(directory)) as system:
        await _long_and_short(system, effects)


async def _wakes(directory: Path, wakes: int, profile: str | None) -> dict[str, list[float]]:
    """Seconds per wake: ``{"sink/long thread": [...], ...}``, and the parts."""
    found: dict[str, list[float]] = {}
    profiler = cProfile.Profile(time.thread_time) if profile else None  # CPU, not fsync waits
    token = 100
    async with _open(_lmdb(directory), passivate_after=0) as system:
        for _ in range(wakes):
            for address in _ADDRESSES:
                token += 1
                event = _probe.expect(token)
                profiling = profiler is not None and address == f"sink/{profile}"
                t0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
                if profiling:
                    profiler.enable()  # type: ignore[union-attr]
                await system.send(address, ping, token)
                await event.wait()
                if profiling:
                    profiler.disable()  # type: ignore[union-attr]
                for kind, spent in (
                    ("thread", time.thread_time() - t0),
                    ("process", time.process_time() - p0),
                    ("wall", time.perf_counter() - w0),
                ):
                    found.setdefault(f"{address} {kind}", []).append(spent)
                await _until(lambda: _passivated(system), every=0.0005)
        found.update(await _parts(system, wakes))
    if profiler is not None:
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(40)
    return found


async def _parts(system: Any, rounds: int) -> dict[str, list[float]]:
    """Trio-thread CPU of reading the long log, and of replaying it with
    nothing run live."""
    iid = instance_id("sink/long")
    journal = system.journal
    with journal.reader() as r:
        row = r.instance(iid)
    read, cached, check = [], [], []
    logs = system.registry.logs
    for _ in range(rounds):
        t0 = time.thread_time()
        with journal.reader() as r:
            log = r.entries(iid, row.record.run)
        read.append(time.thread_time() - t0)
        t0 = time.thread_time()
        with journal.reader() as r:
            logs.entries(r, iid, row.record.run)  # (a hit: the log is as the last wake kept it)
        cached.append(time.thread_time() - t0)
        actor = Actor(system, iid, row.address, system.registry.procs[row.process], row.record)
        t0 = time.thread_time()
        problem = await actor.check_history(log)
        check.append(time.thread_time() - t0)
        if problem is not None:
            print(f"the replay check found a problem: {problem}")
    return {
        f"read {len(log)} entries": read,
        f"read {len(log)}, cached": cached,
        f"replay {len(log)} entries": check,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wake_cpu", description=__doc__)
    parser.add_argument("--effects", type=int, default=1000)
    parser.add_argument("--wakes", type=int, default=30)
    parser.add_argument("--profile", choices=["long", "short"])
    parser.add_argument("--json", type=Path, help="also write the figures (µs) here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(_build, Path(tmp), args.effects)
        found = trio.run(_wakes, Path(tmp), args.wakes, args.profile)
    figures = {
        name: {"min_us": 1e6 * min(values), "median_us": 1e6 * statistics.median(values)}
        for name, values in found.items()
    }
    print(f"{'measurement':28} {'min µs':>9} {'median µs':>10}")
    for name, figure in figures.items():
        print(f"{name:28} {figure['min_us']:9,.0f} {figure['median_us']:10,.0f}")
    ratio = figures["sink/long thread"]["min_us"] / figures["sink/short thread"]["min_us"]
    print(f"long/short, trio-thread CPU (mins): {ratio:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
