"""The postgres suite: the runtime on `PostgresJournal`, on one node and on two.

One run, one fresh schema (dropped afterwards), interleaved rounds of:

- ``raw-commit-1conn``: raw PostgreSQL, one psycopg (sync) connection
  looping INSERT + COMMIT, ``synchronous_commit`` on: commits/s. No durable
  write of ours can be cheaper than one of these; batching is what lets us
  beat it.
- ``raw-commit-8conn``: the same from 8 connections in 8 threads.
- ``signals-1node``: durable signals/s taken by process code, 1000
  concurrent senders each looping ``send`` into its own of 1000 instances,
  all on node A (this process). Target >= 5x raw-commit-1conn.
- ``procs-1node``: 1-step processes started and completed per second, 100
  concurrent workers looping ``start`` + ``result()``, on node A (as the
  runtime suite starts 100 at a time; with 1000 the workers moved in
  lock-step waves, each start queued behind the other 999 in the
  journal's 8 threads: 3.7 s to the first end on a slow day, and a 1 s
  window saw none). The window opens once a wave of them has ended.
- ``signals-2node-remote``: as ``signals-2node``, but each node's senders
  send into the other node's instances (each send a write and a NOTIFY to
  the owner). Target >= 0.8x ``signals-2node``.
- ``signals-3node``, ``signals-3node-remote``: three nodes (a second
  child, node C, with 333 instances), 333 senders each, into their own
  instances, and into the next node's (A into B's, B into C's, C into A's).
- ``signals-2node``, ``procs-2node``: the same total load split over two
  nodes: node A (this process) and node B (bench/postgres_node.py, a child
  process), each with 500 senders into its own 500 instances (or 50
  workers starting its own processes). The rate is the sum of both nodes'
  counts over one window: the parent sends ``mark`` and ``end`` to the child
  at the edges of its own window. Target >= 1.3x the 1-node rate.
- ``cpu ...`` rows: CPU (% of one core) used during the 2-node windows by
  node A, node B, the PostgreSQL server processes, and the whole machine,
  from /proc/<pid>/stat and /proc/stat deltas; ``other`` is the rest of
  the machine's busy time (other programs, kernel threads). A line on stderr says what
  bounds the scaling.

Nodes B and C stay open (idle between windows) for the whole suite, so their instances are not
recreated each round. Samples are 2 s (1 s with ``--quick``) after a 0.5 s
warm-up; always 3 samples, for a suite of about a minute.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg  # the suite needs the PostgreSQL extra; without it it is skipped
import trio

from ._registry import Options, Result, at_least, progress, spread_of, suite
from .postgres_node import Counter, open_node, process_load, signal_load, start_sinks

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
_ROOT = Path(__file__).resolve().parent.parent
_NODE_SCRIPT = Path(__file__).resolve().parent / "postgres_node.py"
_INSTANCES = 1000
_CONCURRENCY = 1000  # senders over all nodes
_WORKERS = 100  # process workers over all nodes (see procs-1node)
_THIRD = _CONCURRENCY // 3  # each node's senders (and sinks they use) with three nodes
_THREADS = 8
_REPEATS = 3
_WARMUP = 0.5
# A process load first has every worker's start go through the journal's
# threads before any process ends (on a slow day 1000 workers saw their
# first end after 3.7 s): a window opens once a round of the load is done.
_WARMUP_MAX = 30.0
_SETTLE = 0.3  # after stopping a load, for delivered messages to land
_TICK = os.sysconf("SC_CLK_TCK")


def _dsn() -> str:
    return os.environ.get("ACTORS_BENCH_PG_DSN") or os.environ.get(
        "ACTORS_TEST_PG_DSN", DEFAULT_DSN
    )


# -- raw PostgreSQL ----------------------------------------------------------------


def _raw_commits(dsn: str, table: str, seconds: float, threads: int) -> float:
    """INSERT + COMMIT per transaction, from ``threads`` connections: commits/s."""
    conns = [psycopg.connect(dsn) for _ in range(threads)]
    for conn in conns:
        conn.execute("SET synchronous_commit = on")
        conn.commit()
    counts = [0] * threads
    state = {"counting": False, "stop": False}

    def loop(i: int) -> None:
        conn, n = conns[i], 0
        while not state["stop"]:
            conn.execute(f"INSERT INTO {table} (v) VALUES (%s)", [b"x" * 64])
            conn.commit()
            if state["counting"]:
                n += 1
        counts[i] = n

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    time.sleep(_WARMUP)
    state["counting"] = True
    start = time.perf_counter()
    time.sleep(seconds)
    state["stop"] = True
    elapsed = time.perf_counter() - start
    for w in workers:
        w.join()
    for conn in conns:
        conn.close()
    return sum(counts) / elapsed


# -- CPU accounting ----------------------------------------------------------------


def _cpu_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _postgres_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                comm = Path(f"/proc/{entry}/comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith("postgres"):
                pids.append(int(entry))
    return pids


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies over all cpus, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


class _CpuWindow:
    """CPU used by node A, node B and the server between ``start`` and ``stop``,
    as % of one core."""

    def __init__(self, child_pid: int) -> None:
        self.groups: dict[str, list[int]] = {
            "node A": [os.getpid()],
            "node B": [child_pid],
            "postgres": _postgres_pids(),
        }

    def _read(self) -> dict[int, int]:
        return {
            pid: t
            for pids in self.groups.values()
            for pid in pids
            if (t := _cpu_ticks(pid)) is not None
        }

    def start(self) -> None:
        self.t0, self.before, self.machine0 = (
            time.perf_counter(),
            self._read(),
            _machine_ticks(),
        )

    def stop(self) -> dict[str, float]:
        after, machine1 = self._read(), _machine_ticks()
        elapsed = time.perf_counter() - self.t0
        out = {}
        for name, pids in self.groups.items():
            ticks = sum(after[p] - self.before[p] for p in pids if p in after and p in self.before)
            out[name] = 100.0 * ticks / _TICK / elapsed
        busy, total = (m1 - m0 for m0, m1 in zip(self.machine0, machine1, strict=True))
        out["machine"] = 100.0 * (os.cpu_count() or 1) * busy / total if total else float("nan")
        # Everything else on the machine (other programs, kernel threads):
        out["other"] = max(0.0, out["machine"] - out["node A"] - out["node B"] - out["postgres"])
        return out


# -- node B ------------------------------------------------------------------------


class _Child:
    """Node B: a child process obeying one command per line (see postgres_node)."""

    def __init__(self, dsn: str, schema: str, instances: int, name: str = "bench-b") -> None:
        env = {**os.environ, "PYTHONPATH": str(_ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(_NODE_SCRIPT), dsn, schema, name, str(instances)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=env,
        )
        self.pid = self.proc.pid

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    async def answer(self) -> str:
        assert self.proc.stdout is not None
        line = await trio.to_thread.run_sync(self.proc.stdout.readline)
        if not line:
            raise RuntimeError(f"node B exited (code {self.proc.poll()}); see its stderr")
        return line.strip()

    async def ask(self, line: str) -> str:
        self.send(line)
        return await self.answer()

    async def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("quit")
                await trio.to_thread.run_sync(self.proc.wait, 30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


# -- the suite ---------------------------------------------------------------------


async def _window(
    system: Any,
    load: Callable[..., Any],
    args: tuple[Any, ...],
    seconds: float,
    child: _Child | None = None,
    child_cmd: str = "",
    cpu: _CpuWindow | None = None,
    more: tuple[tuple[_Child, str], ...] = (),
) -> tuple[float, dict[str, float]]:
    """Run ``load`` on node A (and ``child_cmd`` on node B, and each of
    ``more``'s commands on its node); the count of all over one window of
    ``seconds`` after a warm-up, per second."""
    usage: dict[str, float] = {}
    others = ([(child, child_cmd)] if child is not None else []) + list(more)
    async with trio.open_nursery() as nursery:
        for node, cmd in others:
            assert await node.ask(cmd) == "ok"
        nursery.start_soon(load, system, *args)
        await trio.sleep(_WARMUP)
        # And until the load has done a round (as many signals taken, or
        # processes ended, as this node has workers): a signal load has by
        # now, a process load may not have (see _WARMUP_MAX).
        wave = Counter.count + args[1]
        with trio.move_on_after(_WARMUP_MAX):
            while Counter.count < wave:
                await trio.sleep(0.05)
        for node, _ in others:
            node.send("mark")
        if cpu is not None:
            cpu.start()
        start, first = time.perf_counter(), Counter.count
        await trio.sleep(seconds)
        for node, _ in others:
            node.send("end")
        ours, elapsed = Counter.count - first, time.perf_counter() - start
        if cpu is not None:
            usage = cpu.stop()
        nursery.cancel_scope.cancel()
    theirs = 0
    for node, _ in others:
        assert await node.answer() == "ok"  # mark
        theirs += int(await node.answer())
        assert await node.ask("stop") == "ok"
    await trio.sleep(_SETTLE)
    return (ours + theirs) / elapsed, usage


_RAW = ("raw-commit-1conn", "raw-commit-8conn")
_OURS = (
    "signals-1node",
    "procs-1node",
    "signals-2node",
    "signals-2node-remote",
    "procs-2node",
    "signals-3node",
    "signals-3node-remote",
)
_UNITS = {
    "raw-commit-1conn": "commits/s",
    "raw-commit-8conn": "commits/s",
    "signals-1node": "signals/s",
    "signals-2node": "signals/s",
    "signals-2node-remote": "signals/s",
    "signals-3node": "signals/s",
    "signals-3node-remote": "signals/s",
    "procs-1node": "procs/s",
    "procs-2node": "procs/s",
}

# The line under each figure in the table: what it is for a user.
_MEANINGS = {
    "raw-commit-1conn": "baseline: raw PostgreSQL, INSERT + COMMIT in a loop on one connection",
    "raw-commit-8conn": "baseline: the same on 8 connections at once",
    "signals-1node": "durable messages from 1000 senders into 1000 processes, one node",
    "signals-2node": "the same load split over two nodes on one database",
    "signals-2node-remote": "the same, each node sending into the other node's processes",
    "signals-3node": "three nodes, each sending into its own processes",
    "signals-3node-remote": "three nodes, each sending into the next node's processes",
    "procs-1node": "a durable 1-step process, start to result, 100 in flight, one node",
    "procs-2node": "the same load split over two nodes",
}


async def _run(dsn: str, schema: str, seconds: float) -> tuple[dict, dict]:
    samples: dict[str, list[float]] = {name: [] for name in _RAW + _OURS}
    cpu: dict[str, dict[str, list[float]]] = {}
    raw_table = f'"{schema}_raw".commits'
    half = _INSTANCES // 2
    async with open_node(dsn, schema, "bench-a") as system:
        ids = [f"bench-a.{i}" for i in range(_INSTANCES)]
        t = time.perf_counter()
        await start_sinks(system, ids)
        progress(
            f"postgres: node A started {_INSTANCES} instances in {time.perf_counter() - t:.1f} s"
        )
        one_node = [f"pgsink/{i}" for i in ids]
        child = _Child(dsn, schema, half)
        third_node = _Child(dsn, schema, _THIRD, "bench-c")
        try:
            for node in (child, third_node):
                ready = await node.answer()
                if not ready.startswith("ready"):
                    raise RuntimeError(f"node {node.pid} said {ready!r}")
            for round_ in range(1, _REPEATS + 1):

                def note(name: str, value: float, round_: int = round_) -> None:
                    samples[name].append(value)
                    progress(f"postgres: {name} [{round_}/{_REPEATS}] {value:,.0f} {_UNITS[name]}")

                for name, threads in zip(_RAW, (1, _THREADS), strict=True):
                    note(
                        name,
                        await trio.to_thread.run_sync(
                            _raw_commits, dsn, raw_table, seconds, threads
                        ),
                    )
                rate, _ = await _window(system, signal_load, (one_node, _CONCURRENCY), seconds)
                note("signals-1node", rate)
                rate, _ = await _window(system, process_load, (f"a1.{round_}", _WORKERS), seconds)
                note("procs-1node", rate)
                for name, load, args, cmd in (
                    (
                        "signals-2node",
                        signal_load,
                        (one_node[:half], half),
                        f"sig {half}",
                    ),
                    (
                        "signals-2node-remote",
                        signal_load,
                        ([f"pgsink/bench-b.{i}" for i in range(half)], half),
                        f"rsig {half} bench-a {half}",
                    ),
                    (
                        "procs-2node",
                        process_load,
                        (f"a2.{round_}", _WORKERS // 2),
                        f"proc {_WORKERS // 2}",
                    ),
                ):
                    window = _CpuWindow(child.pid)
                    rate, usage = await _window(
                        system,
                        load,
                        args,
                        seconds,
                        child=child,
                        child_cmd=cmd,
                        cpu=window,
                    )
                    note(name, rate)
                    for group, value in usage.items():
                        cpu.setdefault(name, {}).setdefault(group, []).append(value)
                    progress(
                        f"postgres: {name} cpu: "
                        + ", ".join(f"{g} {v:.0f}%" for g, v in usage.items())
                    )
                # Three nodes, _THIRD senders each: into their own sinks, and
                # into the next node's (A -> B -> C -> A).
                own = [f"pgsink/bench-a.{i}" for i in range(_THIRD)]
                into_b = [f"pgsink/bench-b.{i}" for i in range(_THIRD)]
                for name, targets, cmds in (
                    ("signals-3node", own, (f"sig {_THIRD}", f"sig {_THIRD}")),
                    (
                        "signals-3node-remote",
                        into_b,
                        (f"rsig {_THIRD} bench-c {_THIRD}", f"rsig {_THIRD} bench-a {_THIRD}"),
                    ),
                ):
                    rate, _ = await _window(
                        system,
                        signal_load,
                        (targets, _THIRD),
                        seconds,
                        child=child,
                        child_cmd=cmds[0],
                        more=((third_node, cmds[1]),),
                    )
                    note(name, rate)
        finally:
            await child.close()
            await third_node.close()
    return samples, cpu


def _paired(values: list[float], baseline: list[float]) -> float:
    return statistics.median(
        v / b if b else float("nan") for v, b in zip(values, baseline, strict=True)
    )


@suite("postgres")
def postgres(options: Options) -> list[Result]:
    dsn = _dsn()
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        raise SystemExit(f"postgres suite: no server at {dsn!r} ({str(exc).strip()})") from exc
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    seconds = 1.0 if options.quick else 2.0
    progress(f"postgres: {_REPEATS} samples of {seconds:g} s each (its own window, not --seconds)")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}_raw"')
        conn.execute(
            f'CREATE TABLE "{schema}_raw".commits (id bigserial PRIMARY KEY, v bytea NOT NULL)'
        )
    try:
        samples, cpu = trio.run(_run, dsn, schema, seconds)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}_raw" CASCADE')

    baselines = {
        "signals-1node": ("raw-commit-1conn",),
        "procs-1node": ("raw-commit-1conn",),
        "signals-2node": ("raw-commit-1conn", "signals-1node"),
        "signals-2node-remote": ("signals-2node",),
        "signals-3node": ("signals-1node",),
        "signals-3node-remote": ("signals-3node",),
        "procs-2node": ("raw-commit-1conn", "procs-1node"),
    }
    targets = {
        "signals-1node": at_least(5, "raw-commit-1conn"),
        "signals-2node": at_least(1.3, "signals-1node"),
        "signals-2node-remote": at_least(0.8, "signals-2node"),
        "signals-3node-remote": at_least(0.8, "signals-3node"),
    }
    results = [
        Result(
            suite="postgres",
            name=name,
            value=statistics.median(values),
            unit=_UNITS[name],
            samples=tuple(values),
            ratios={b: _paired(values, samples[b]) for b in baselines.get(name, ())},
            target=targets.get(name),
            meaning=_MEANINGS[name],
            baseline_spreads={
                b: s for b in baselines.get(name, ()) if (s := spread_of(samples[b])) is not None
            },
        )
        for name, values in samples.items()
    ]
    for name, groups in cpu.items():
        for group, values in groups.items():
            results.append(
                Result(
                    suite="postgres",
                    name=f"cpu {group} ({name})",
                    value=statistics.median(values),
                    unit="% of a core",
                    samples=tuple(values),
                    meaning=f"CPU used by {group} while the {name} figure was measured",
                )
            )
    _verdict(results, cpu)
    return results


def _verdict(results: list[Result], cpu: dict[str, dict[str, list[float]]]) -> None:
    by_name = {r.name: r for r in results}
    sig1, sig2 = by_name["signals-1node"], by_name["signals-2node"]
    x_raw = sig1.ratios["raw-commit-1conn"]
    scale = sig2.ratios["signals-1node"]
    progress(
        f"postgres: target signals-1node >= 5x raw-commit-1conn: {x_raw:.2f}x "
        f"({'met' if x_raw >= 5 else 'missed'})"
    )
    remote = by_name["signals-2node-remote"].ratios["signals-2node"]
    progress(
        f"postgres: target signals to the other node's instances >= 0.8x to one's own "
        f"(2 nodes): {remote:.2f}x ({'met' if remote >= 0.8 else 'missed'})"
    )
    remote3 = by_name["signals-3node-remote"].ratios["signals-3node"]
    progress(
        f"postgres: signals to the next node's instances vs to one's own (3 nodes): "
        f"{remote3:.2f}x ({'met' if remote3 >= 0.8 else 'missed'} 0.8x)"
    )
    progress(
        f"postgres: target signals 2-node >= 1.3x 1-node: {scale:.2f}x "
        f"({'met' if scale >= 1.3 else 'missed'}); procs 2-node/1-node: "
        f"{by_name['procs-2node'].ratios['procs-1node']:.2f}x"
    )
    cores = os.cpu_count() or 1
    for name, groups in cpu.items():
        med = {g: statistics.median(v) for g, v in groups.items()}
        share = med["machine"] / (100.0 * cores)
        parts = ", ".join(f"{g} {med[g]:.0f}%" for g in ("node A", "node B", "postgres", "other"))
        if share >= 0.85:
            why = (
                f"CPU-bound: the machine is {share:.0%} busy on {cores} cores shared by both "
                f"nodes, the server and other programs ({med['other']:.0f}% of a core), so a "
                "second node adds no CPU to run on"
            )
        else:
            why = (
                f"not CPU-bound ({share:.0%} of {cores} cores busy): bounded by commit "
                "round trips / WAL flushes, not by the nodes' CPU"
            )
        progress(f"postgres: {name}: {parts}, machine {med['machine']:.0f}%; scaling is {why}")
