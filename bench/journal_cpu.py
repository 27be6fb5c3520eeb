"""CPU time per durable commit through `LMDBJournal`, all threads counted.

``python -m bench.journal_cpu [--commits N] [--runs R] [WRITERS ...]``

The journal suite measures throughput, which on a shared machine moves with
the neighbours; this measures what a commit costs the process: the
process's CPU time (``time.process_time``: every thread, user and system)
over ``N`` commits (and, apart, its user and system parts) of ``Txn().put_log(...)`` from ``WRITERS`` concurrent
trio tasks, divided by ``N``. The figure is the minimum of ``R`` runs, each
on a fresh journal, as the least disturbed. The workload is the journal
suite's (`bench.journal`): same entry, same key layout.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import trio

from storage import LMDBJournal, Txn, instance_id

from .journal import _ENTRY, _MAP_SIZE

__all__ = ["cpu_per_commit", "main"]


def _user_sys() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def cpu_per_commit(directory: Path, writers: int, commits: int) -> tuple[float, float, float]:
    """CPU seconds the process spent per acknowledged commit (all, user,
    system), ``commits`` commits shared among ``writers`` trio tasks (after
    a warm-up of a tenth as many, not counted)."""

    async def run() -> tuple[float, float, float]:
        journal = LMDBJournal(directory / "journal", map_size=_MAP_SIZE)
        per_writer = max(1, commits // writers)
        warmup = max(1, per_writer // 10)

        async def writer(i: int, seqs: range) -> None:
            iid = instance_id(f"bench/w{i}")
            for seq in seqs:
                txn = Txn()
                txn.put_log(iid, 0, seq, _ENTRY)
                await journal.commit(txn)

        async with journal:
            async with trio.open_nursery() as nursery:
                for i in range(writers):
                    nursery.start_soon(writer, i, range(warmup))
            cpu, (user, system) = time.process_time(), _user_sys()
            async with trio.open_nursery() as nursery:
                for i in range(writers):
                    nursery.start_soon(writer, i, range(warmup, warmup + per_writer))
            cpu = time.process_time() - cpu
            user_after, system_after = _user_sys()
        n = per_writer * writers
        return cpu / n, (user_after - user) / n, (system_after - system) / n

    return trio.run(run)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.journal_cpu", description=__doc__)
    parser.add_argument("writers", nargs="*", type=int, default=[1, 1024])
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="parent of the journals")
    args = parser.parse_args(argv)
    print(f"{'writers':>8}  {'CPU µs/commit (min)':>20}  {'user':>6}  {'sys':>6}  all runs")
    for writers in args.writers:
        figures = []
        for _ in range(args.runs):
            directory = Path(tempfile.mkdtemp(prefix="bench-cpu-", dir=args.dir))
            try:
                figures.append(cpu_per_commit(directory, writers, args.commits))
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        best = min(figures)
        shown = " ".join(f"{f[0] * 1e6:.1f}" for f in figures)
        print(
            f"{writers:>8}  {best[0] * 1e6:>20.1f}  {best[1] * 1e6:>6.1f}  {best[2] * 1e6:>6.1f}"
            f"  {shown}"
        )


if __name__ == "__main__":
    main()
