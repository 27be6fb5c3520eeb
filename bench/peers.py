"""The peers suite: our runtime beside DBOS Transact, the same shapes in the same run.

``python -m bench peers`` (needs the ``peers`` extra: ``pip install -e
'.[peers]'``, which installs DBOS). Ours runs on its embedded default, an
`LMDBJournal` (durability "sync"); DBOS on its embedded default, SQLite (a
rollback journal with ``synchronous=FULL``: every commit is synced too).
Each sample gets a fresh directory and a fresh system (or a freshly
launched DBOS); rounds are interleaved, so ours and DBOS's samples of one
shape are taken seconds apart and their ratio (ours/DBOS) is a median of
same-round ratios. docs/peers.md says how to read it and how to run the
same shapes against Restate.

Shapes, each as ours and as DBOS's:

- ``1-step, sequential``: start a workflow (a process) whose body runs one
  durable step of a trivial function, await its result, start the next.
- ``1-step, 100 at once``: the same, 100 started together, then all awaited.
- ``10-step, ...``: the same with ten steps.
- ``send->... p50``, ``p99``: one message to a workflow waiting for it,
  from before the send until the workflow's code has it (ours ``ctx.wait``,
  DBOS ``DBOS.recv``; DBOS's listener polls SQLite every 1 ms, its fastest).

Baselines for context: one synced commit of one row, raw, in each store
(``lmdb commit``, ``sqlite commit``): what each system's every durable
write costs at least.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

from ._kit import _IN_FLIGHT, _lmdb, _open, _repeat_rate, _Sampler, job
from ._registry import Measurement, Options, Result, run_measurements, suite
from .journal import raw_commit
from .runtime import latency, process_rate

INSTALL = "pip install -e '.[peers]'"


def missing() -> str | None:
    """What to tell a user who lacks DBOS, or None when it is installed."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        return (
            "the peers suite runs DBOS Transact beside our runtime, and DBOS is not "
            f"installed; install it with:\n    {INSTALL}\n(or: pip install dbos)"
        )
    return None


def sequential_rate(directory: Path, seconds: float, *, steps: int) -> float:
    """Processes/s: start one, await its result, start the next."""

    async def main() -> float:
        async with _open(_lmdb(directory)) as system:
            n = 0

            async def once() -> int:
                nonlocal n
                n += 1
                await (await system.start(job, str(n), steps=steps)).result()
                return 1

            return await _repeat_rate(seconds, once, once)

    return trio.run(main)


def sqlite_commit(directory: Path, seconds: float) -> float:
    """µs per SQLite commit of one row, in its default (DBOS's) mode."""
    connection = sqlite3.connect(directory / "raw.sqlite", isolation_level=None)
    try:
        connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
        value = b"v" * 100
        start, count = time.perf_counter(), 0
        while (now := time.perf_counter()) < start + seconds or count < 10:
            connection.execute("BEGIN")
            connection.execute("INSERT INTO t (v) VALUES (?)", (value,))
            connection.execute("COMMIT")
            count += 1
        return 1e6 * (now - start) / count
    finally:
        connection.close()


@suite("peers")
def peers_suite(options: Options) -> list[Result]:
    problem = missing()
    if problem is not None:
        raise SystemExit(f"python -m bench peers: {problem}")
    from . import _dbos  # imports dbos: only once we know it is there

    def pair(shape: str, steps: int, in_flight: int | None, what: str) -> list[Measurement]:
        theirs = f"DBOS {shape}"
        ours: Callable[[Path, float], float]
        dbos: Callable[[Path, float], float]
        if in_flight is None:
            ours = partial(sequential_rate, steps=steps)
            dbos = partial(_dbos.sequential_rate, steps=steps)
        else:  # ours: waves of _IN_FLIGHT, as the runtime suite measures them
            ours = partial(process_rate, steps=steps)
            dbos = partial(_dbos.concurrent_rate, steps=steps, in_flight=in_flight)
        return [
            Measurement(theirs, "workflows/s", dbos, meaning=f"DBOS: {what}, on SQLite"),
            Measurement(
                f"ours {shape}",
                "processes/s",
                ours,
                (theirs,),
                meaning="ours: the same on LMDB; ratio ours/DBOS, above 1x ours is faster",
            ),
        ]

    seq, wave = "one at a time", f"{_IN_FLIGHT} started together"
    latencies = ("the same, 99th percentile",)
    measurements = [
        Measurement(
            "lmdb commit",
            "µs",
            lambda d, s: 1e6 / raw_commit(d, s),
            meaning="baseline: one synced LMDB commit of one row: under every write of ours",
        ),
        Measurement(
            "sqlite commit",
            "µs",
            sqlite_commit,
            meaning="baseline: one SQLite commit of one row, its default (DBOS's) mode",
        ),
        *pair("1-step, sequential", 1, None, f"a durable 1-step workflow, start to result, {seq}"),
        *pair(
            f"1-step, {_IN_FLIGHT} at once",
            1,
            _IN_FLIGHT,
            f"a durable 1-step workflow, start to result, {wave}",
        ),
        *pair(
            "10-step, sequential", 10, None, f"a durable 10-step workflow, start to result, {seq}"
        ),
        *pair(
            f"10-step, {_IN_FLIGHT} at once",
            10,
            _IN_FLIGHT,
            f"a durable 10-step workflow, start to result, {wave}",
        ),
        *_Sampler(_dbos.latency).measurements(
            [
                (
                    "DBOS send->recv p50",
                    "µs",
                    "p50",
                    (),
                    None,
                    "DBOS: a message to a waiting workflow, DBOS.send until DBOS.recv has it (median)",
                ),
                ("DBOS send->recv p99", "µs", "p99", (), None, *latencies),
            ]
        ),
        *_Sampler(latency).measurements(
            [
                (
                    "ours send->resumed p50",
                    "µs",
                    "p50",
                    ("DBOS send->recv p50",),
                    None,
                    "ours: the same, send until ctx.wait has it; below 1x ours is faster",
                ),
                ("ours send->resumed p99", "µs", "p99", ("DBOS send->recv p99",), None, *latencies),
            ]
        ),
    ]
    return run_measurements("peers", measurements, options)
