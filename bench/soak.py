"""``python -m bench soak --minutes N``: a mixed load on LMDB for N minutes,
sampled as it runs, to see whether anything grows that should not.

    python -m bench soak --minutes 30 [--interval 10] [--json PATH] [--plot PATH]
    python -m bench soak --seconds 20 --interval 1      # a short look

One system on a fresh `storage.LMDBJournal` (durability "sync") runs, all
at once and at a steady pace (`Load`):

- signals: ``system.send`` to long-lived workers, most to a few hot ones,
  the rest spread over many cold ones, which passivate between messages
  and are woken by replay (passivation and wake);
- asks: ``system.ask`` to the workers, each answered with ``ctx.reply``;
- starts: short jobs (a step, a durable timer) whose results clients await
  (``Handle.result()``);
- a queue: jobs started on a `actors.Queue` of concurrency 4, results awaited;
- a periodic ``system.cleanup`` of the ended ones, so the journal stays
  bounded.

Every ``--interval`` seconds (10 by default) a `Sample` is taken: the
process's resident memory, its open file descriptors, the journal's size
on disk, the objects Python's collector tracks, the operations done, and the p50/p99
latency from a ``send`` (or ``ask``) call to the moment the receiving process resumes
with the message (read by the process code itself). The verdict (`judge`):

- memory flat: anonymous memory (RSS less the pages of the journal's file
  that LMDB's reads map in, which grow with the file and are the kernel's
  to drop) at the last sample at most 5% over its value at the end of
  warm-up (the first quarter of the run);
- p99 steady: the p99 of the last quarter at most 1.2 times the second
  quarter's;
- fds flat: the most descriptors open in the last quarter no more than in
  the second quarter.

At the end of warm-up and at the end, a census of the objects the
collector tracks, by type, names the types that grew most in between (a
leak of Python objects names itself there before RSS says much).

Like every bench script this prints a table and can write JSON; it never
asserts (the verdict is printed, the exit status is 0). ``--plot PATH``
draws the samples (matplotlib: ``pip install -e '.[plot]'``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import math
import os
import platform
import random
import shutil
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

import actors
from actors import Context, Queue, Signal, process
from storage import LMDBJournal

from ._table import machine

__all__ = [
    "Quarters",
    "Run",
    "Sample",
    "SoakOptions",
    "Tally",
    "Verdict",
    "census",
    "grown",
    "judge",
    "main",
    "soak",
]

ping = Signal("ping")
question = Signal("question")

QUEUE = Queue("soak", concurrency=4)
HOT, COLD = 20, 400  # workers that get most messages, and the many that sleep between them
WORKER_RUNS = 50  # messages a worker takes before it continues as new (its log stays short)
PASSIVATE_AFTER = 1.0  # seconds: a cold worker (a message every few seconds) passivates
CLEANUP_OLDER_THAN = 5.0  # seconds an ended job is kept before cleanup removes it
WARM_UP = 0.25  # the fraction of the run before memory is judged
MEMORY_GROWTH = 0.05  # memory flat: at most this growth after warm-up
P99_RATIO = 1.2  # p99 steady: the last quarter's at most this many times the second's


@attrs.define
class _Probe:
    """What process code reports to the load (plain calls, never awaits):
    a token's send time in, its send-to-resumed latency out. A replayed
    receive sees an old token, which nobody waits for any more."""

    sent: dict[int, float] = attrs.Factory(dict)  # token -> perf_counter at the send call
    latencies: list[float] = attrs.Factory(list)  # seconds, since the last sample

    def resumed(self, token: int) -> None:
        began = self.sent.pop(token, None)
        if began is not None:
            self.latencies.append(time.perf_counter() - began)


_PROBE: trio.lowlevel.RunVar[_Probe] = trio.lowlevel.RunVar("bench_soak_probe")


def _noop(n: int) -> int:
    return n


@process("soak/worker/:id")
async def worker(ctx: Context, id: str) -> None:
    for _ in range(WORKER_RUNS):
        signal, token = await ctx.receive(ping, question)
        _PROBE.get().resumed(token)
        if signal == question:
            await ctx.reply(token)
    await ctx.continue_as_new()


@process("soak/job/:id")
async def job(ctx: Context, id: str, *, timer: float) -> int:
    value: int = await ctx.step(_noop, 1, name="work", thread=False)
    await ctx.sleep(timer)
    return value


@process("soak/queued/:id")
async def queued(ctx: Context, id: str) -> int:
    value: int = await ctx.step(_noop, 2, name="work", thread=False)
    return value


PROCESSES: list[actors.ProcessDef[..., Any]] = [worker, job, queued]


@attrs.frozen
class SoakOptions:
    """How long, how often sampled, and how hard (operations per second)."""

    seconds: float
    interval: float = 10.0
    sends: float = 200.0
    asks: float = 20.0
    starts: float = 20.0
    queued: float = 10.0
    cleanup_every: float = 5.0
    workdir: Path = Path(tempfile.gettempdir())


@attrs.frozen
class Sample:
    """The process and the journal at one moment, and the load since the
    sample before."""

    at: float  # seconds since the load began
    rss_mb: float
    anon_mb: float  # of which anonymous (the heap: RSS less the journal's mapped file pages)
    fds: int
    journal_mb: float  # the journal directory's size on disk
    objects: int  # objects the garbage collector tracks
    sends: int  # sends acknowledged since the sample before
    asks: int
    results: int  # results of started and queued jobs received
    errors: int  # calls that raised (a timeout, a full disk: the load's own failures)
    latencies: int  # send-to-resumed latencies measured
    p50_ms: float
    p99_ms: float


@attrs.frozen
class Verdict:
    """Whether memory, latency and descriptors stayed flat after warm-up;
    None where the run had too few samples to say (fewer than 4)."""

    memory_growth: float | None  # fraction over the anonymous memory at the end of warm-up
    memory_flat: bool | None
    p99_ratio: float | None  # last quarter's p99 over the second quarter's
    p99_steady: bool | None
    fd_growth: int | None  # descriptors, last quarter's most over the second's
    fds_flat: bool | None


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (nan for none)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


class Tally:
    """Latencies pooled in a fixed amount of memory: counts in buckets 1%
    wide from 1 us to 10,000 s (below and above go to the end ones), each
    with the largest value it holds, so that `percentile` is the
    nearest-rank one to within 1% (exactly it when no two values share a
    bucket). A run keeps two, whatever its length: the bench's own memory
    must not grow with the run it measures (a list of every latency of a
    60-minute run is ~0.5 MB a minute, which the memory verdict read as a
    leak)."""

    LOW, RATIO, BUCKETS = 1e-6, 1.01, 2316  # 1.01 ** 2315 > 1e10

    def __init__(self) -> None:
        self.counts = array("q", bytes(8 * self.BUCKETS))
        self.largest = array("d", bytes(8 * self.BUCKETS))
        self.total = 0

    def add(self, values: Iterable[float]) -> None:
        low, log_ratio, top = self.LOW, math.log(self.RATIO), self.BUCKETS - 1
        for value in values:
            i = 0 if value <= low else min(top, int(math.log(value / low) / log_ratio))
            self.counts[i] += 1
            self.largest[i] = max(self.largest[i], value)
            self.total += 1

    def percentile(self, fraction: float) -> float:
        """As `percentile` of the values added (nan for none)."""
        if not self.total:
            return math.nan
        rank = min(self.total, max(1, math.ceil(fraction * self.total)))
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                return self.largest[i]
        raise AssertionError("unreachable: the counts add up to the total")


class Quarters:
    """The latencies `judge` reads, pooled as they come: those measured up
    to the samples of the second quarter of a run of ``count`` samples, and
    of the last (the first is warm-up; the third is read by nobody)."""

    def __init__(self, count: int) -> None:
        self.second_samples = range(count // 4, count // 2)
        self.last_samples = range(count - max(1, count // 4), count)
        self.second = Tally()
        self.last = Tally()

    def add(self, index: int, values: Iterable[float]) -> None:
        """Add the latencies measured up to sample ``index`` (from 0)."""
        if index in self.second_samples:
            self.second.add(values)
        elif index in self.last_samples:
            self.last.add(values)

    @classmethod
    def of(cls, latencies: Sequence[Iterable[float]]) -> Quarters:
        """``latencies[i]`` measured up to sample ``i``, pooled."""
        quarters = cls(len(latencies))
        for index, values in enumerate(latencies):
            quarters.add(index, values)
        return quarters


def judge(samples: Sequence[Sample], latencies: Quarters | Sequence[Sequence[float]]) -> Verdict:
    """The verdict on a run: its latencies pooled by `Quarters` (as the
    soak does), or ``latencies[i]`` the seconds measured up to
    ``samples[i]``. The run is cut in quarters by sample; the first is
    warm-up."""
    n = len(samples)
    if n < 4:
        return Verdict(None, None, None, None, None, None)
    pooled = latencies if isinstance(latencies, Quarters) else Quarters.of(latencies)
    second, last = pooled.second_samples, pooled.last_samples
    warm = samples[n // 4 - 1].anon_mb
    growth = samples[-1].anon_mb / warm - 1
    p99_second = pooled.second.percentile(0.99)
    p99_last = pooled.last.percentile(0.99)
    ratio = p99_last / p99_second if p99_second > 0 else math.nan
    fd_growth = max(samples[i].fds for i in last) - max(samples[i].fds for i in second)
    return Verdict(
        growth,
        growth <= MEMORY_GROWTH,
        ratio,
        ratio <= P99_RATIO if math.isfinite(ratio) else None,
        fd_growth,
        fd_growth <= 0,
    )


# -- the load ------------------------------------------------------------------------


@attrs.define
class _Counts:
    sends: int = 0
    asks: int = 0
    results: int = 0
    errors: int = 0


class Load:
    """The clients: each kind of operation at its own steady pace."""

    def __init__(self, system: actors.ActorSystem, options: SoakOptions, probe: _Probe) -> None:
        self.system = system
        self.options = options
        self.probe = probe
        self.counts = _Counts()
        self.random = random.Random(17)
        self._token = 0
        self._job = 0

    def _next_token(self) -> int:
        self._token += 1
        return self._token

    def _worker(self) -> str:
        n = (
            self.random.randrange(HOT)
            if self.random.random() < 0.8
            else HOT + self.random.randrange(COLD)
        )
        return f"soak/worker/w{n}"

    async def run(self, nursery: trio.Nursery) -> None:
        for n in range(HOT + COLD):  # idempotent: the workers exist before the load begins
            await self.system.start(worker, f"w{n}")
        o = self.options
        for _ in range(4):
            nursery.start_soon(self._paced, o.sends / 4, self._send)
            nursery.start_soon(self._paced, o.starts / 4, self._start)
        nursery.start_soon(self._paced, o.asks, self._ask)
        for _ in range(2):
            nursery.start_soon(self._paced, o.queued / 2, self._queued)
        nursery.start_soon(self._paced, 1 / o.cleanup_every, self._cleanup)

    async def _paced(self, rate: float, operation: Any) -> None:
        """Call ``operation`` ``rate`` times a second, one after another; a
        pace it cannot keep is not caught up later (no bursts)."""
        period = 1 / rate
        due = trio.current_time()
        while True:
            try:
                await operation()
            except actors.ActorError:
                self.counts.errors += 1
            due = max(due + period, trio.current_time())
            await trio.sleep_until(due)

    async def _send(self) -> None:
        token = self._next_token()
        self.probe.sent[token] = time.perf_counter()
        await self.system.send(self._worker(), ping, token)
        self.counts.sends += 1

    async def _ask(self) -> None:
        token = self._next_token()
        self.probe.sent[token] = time.perf_counter()
        await self.system.ask(self._worker(), question, token, timeout=30)
        self.counts.asks += 1

    async def _start(self) -> None:
        self._job += 1
        handle = await self.system.start(job, f"j{self._job}", timer=0.2)
        await handle.result()
        self.counts.results += 1

    async def _queued(self) -> None:
        self._job += 1
        handle = await self.system.start(queued, f"q{self._job}", queue=QUEUE)
        await handle.result()
        self.counts.results += 1

    async def _cleanup(self) -> None:
        await self.system.cleanup(older_than=CLEANUP_OLDER_THAN)


# -- sampling ------------------------------------------------------------------------


def _memory_mb() -> tuple[float, float]:
    """Resident memory, and the anonymous part of it (Linux's /proc)."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon"):
                found[name] = int(value.split()[0]) / 1024  # kB
    return found["VmRSS"], found["RssAnon"]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _disk_mb(path: Path) -> float:
    """Bytes on disk (allocated blocks: LMDB's file is sparse) under ``path``."""
    return sum(f.stat().st_blocks * 512 for f in path.iterdir() if f.is_file()) / 2**20


def census() -> Counter[str]:
    """How many objects of each type the collector tracks, after a full
    collection (garbage is not counted): taken twice, at the end of warm-up
    and at the end, the difference names what grew."""
    gc.collect()
    return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())


def grown(before: Counter[str], after: Counter[str], most: int = 8) -> list[tuple[str, int]]:
    """The ``most`` types whose count grew most from ``before`` to ``after``."""
    growth = after.copy()
    growth.subtract(before)
    return [(name, n) for name, n in growth.most_common(most) if n > 0]


@attrs.frozen
class Run:
    """What `soak` measured: the samples, the latencies (seconds) the
    verdict reads (pooled: a run keeps no list of them, see `Tally`), and
    the types of objects that grew after warm-up."""

    samples: list[Sample]
    latencies: Quarters
    grown: list[tuple[str, int]]


async def soak(options: SoakOptions) -> Run:
    """Run the load for ``options.seconds`` and sample it every
    ``options.interval`` (see the module docstring)."""
    probe = _Probe()
    _PROBE.set(probe)
    directory = Path(tempfile.mkdtemp(prefix="bench-soak-", dir=options.workdir))
    samples: list[Sample] = []
    count = max(1, round(options.seconds / options.interval))
    latencies = Quarters(count)
    warm: Counter[str] = Counter()
    end: Counter[str] = Counter()
    try:
        journal = LMDBJournal(directory / "journal", map_size=1 << 32)
        async with actors.open_system(
            journal, PROCESSES, queues=[QUEUE], passivate_after=PASSIVATE_AFTER, control=False
        ) as system:
            load = Load(system, options, probe)
            async with trio.open_nursery() as nursery:
                await load.run(nursery)
                began = trio.current_time()
                for n in range(1, count + 1):
                    await trio.sleep_until(began + n * options.interval)
                    window, probe.latencies = probe.latencies, []
                    counts, load.counts = load.counts, _Counts()
                    samples.append(_sample(trio.current_time() - began, directory, counts, window))
                    latencies.add(n - 1, window)  # (then the window goes)
                    print(_row(samples[-1]), flush=True)
                    if n == max(1, count // 4):  # the end of warm-up (as `judge` cuts it)
                        warm = census()
                end = census()
                nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return Run(samples, latencies, grown(warm, end))


def _sample(at: float, directory: Path, counts: _Counts, window: list[float]) -> Sample:
    rss, anon = _memory_mb()
    return Sample(
        at=round(at, 3),
        rss_mb=round(rss, 2),
        anon_mb=round(anon, 2),
        fds=_fds(),
        journal_mb=round(_disk_mb(directory / "journal"), 2),
        objects=len(gc.get_objects()),
        sends=counts.sends,
        asks=counts.asks,
        results=counts.results,
        errors=counts.errors,
        latencies=len(window),
        p50_ms=round(percentile(window, 0.5) * 1000, 3),
        p99_ms=round(percentile(window, 0.99) * 1000, 3),
    )


# -- the report ----------------------------------------------------------------------

_HEADING = (
    f"{'t (s)':>8} {'RSS MB':>8} {'anon MB':>8} {'fds':>5} {'journal MB':>10} {'objects':>9} "
    f"{'sends':>6} {'asks':>5} {'results':>7} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8}"
)


def _row(s: Sample) -> str:
    return (
        f"{s.at:>8.1f} {s.rss_mb:>8.1f} {s.anon_mb:>8.1f} {s.fds:>5} {s.journal_mb:>10.2f} {s.objects:>9} "
        f"{s.sends:>6} {s.asks:>5} {s.results:>7} {s.errors:>6} {s.p50_ms:>8.2f} {s.p99_ms:>8.2f}"
    )


def describe(verdict: Verdict) -> list[str]:
    """The verdict, one line per judgement."""
    if verdict.memory_flat is None:
        return [
            "verdict: too few samples to judge (4 at least: a longer run or a shorter --interval)"
        ]

    def word(ok: bool | None) -> str:
        return {True: "yes", False: "NO", None: "cannot say"}[ok]

    growth = verdict.memory_growth or 0.0
    return [
        f"memory flat after warm-up: {word(verdict.memory_flat)} "
        f"(anonymous memory {growth:+.1%} since the end of the first quarter; at most "
        f"{MEMORY_GROWTH:.0%})",
        f"p99 steady: {word(verdict.p99_steady)} (last quarter {verdict.p99_ratio:.2f}x the "
        f"second quarter's; at most {P99_RATIO}x)",
        f"fds flat: {word(verdict.fds_flat)} ({verdict.fd_growth:+d} in the last quarter "
        "over the second's most)",
    ]


def _document(options: SoakOptions, run: Run, verdict: Verdict) -> dict[str, Any]:
    return {
        "suite": "soak",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "python": platform.python_version(),
        "options": {
            k: str(v) if isinstance(v, Path) else v for k, v in attrs.asdict(options).items()
        },
        "samples": [attrs.asdict(s) for s in run.samples],
        "verdict": attrs.asdict(verdict),
        "grown": [{"type": name, "count": n} for name, n in run.grown],
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long the load runs (default 10)")
    length.add_argument("--seconds", type=float, help="how long, in seconds (a short look)")
    parser.add_argument(
        "--interval", type=float, default=10.0, help="seconds between samples (default 10)"
    )
    parser.add_argument("--sends", type=float, default=200.0, help="sends per second (default 200)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the samples as JSON")
    parser.add_argument(
        "--plot", type=Path, metavar="PATH", help="also draw the samples as a PNG (matplotlib)"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the journal's fresh directory goes (default: the temp dir)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line: run, print the table and the verdict, write what was asked."""
    parser = _parser()
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (args.minutes or 10.0) * 60
    if seconds <= 0 or args.interval <= 0:
        parser.error("--minutes, --seconds and --interval take positive numbers")
    # Checked before the load runs: minutes of load must not end in
    # "matplotlib is missing".
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        parser.exit(
            2,
            "python -m bench soak: --plot needs matplotlib, which is not installed; "
            "install it with:\n    pip install -e '.[plot]'\n",
        )
    options = SoakOptions(
        seconds=seconds, interval=args.interval, sends=args.sends, workdir=args.dir
    )
    print(
        f"soak: {seconds:g} s of mixed load on LMDB, a sample every {args.interval:g} s "
        f"({datetime.date.today().isoformat()}, python {platform.python_version()} on {machine()})"
    )
    print(_HEADING, flush=True)
    run = trio.run(soak, options)
    verdict = judge(run.samples, run.latencies)
    for line in describe(verdict):
        print(line)
    print(
        "objects that grew after warm-up: "
        + (", ".join(f"{name} {n:+,}" for name, n in run.grown) or "none")
    )
    if args.json is not None:
        document = _document(options, run, verdict)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    if args.plot is not None:
        # (matplotlib is optional: its module is imported only when asked for)
        importlib.import_module("bench._soak_plot").plot(args.plot, run.samples, verdict)
        print(f"soak: wrote {args.plot}")
    return 0
