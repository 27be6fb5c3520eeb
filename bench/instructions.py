"""Instructions per operation on the start and end paths, counted by callgrind.

``python -m bench.instructions [--tree DIR ...] [--only NAME,...] [--json PATH]``

Wall-clock and CPU time on a shared VM swing by tens of percent between
runs; an instruction count does not (valgrind counts the same total for
the same program and input whatever else the machine does). Each workload
of `bench._workloads` (a ctx.call child, a 1-step process, creating a
passivated instance, waking one, cancelling one instance of a tree) runs
under ``valgrind --tool=callgrind`` with n and 2n operations, and the table
shows the difference divided by n: start-up, imports and the opening of the
system cancel out. ``--tree`` measures other checkouts of this repository
(an older commit's worktree, say) with the same workloads, side by side;
the first column is this checkout. Two workloads run at a time (one per
core); the default run takes about 3 minutes per tree.

It needs valgrind (Debian's package ``valgrind``) and counts only what runs
on MemoryJournal: the LMDB journal's timed background work (the deferred
writes' 5 ms window, the writer's hand-over watch) fires once per few
milliseconds of wall time, and under valgrind's slowdown that is once per
operation, so its counts would say more about valgrind than about us.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Run in this checkout (so `bench` is this one's) with the tree measured
# first on sys.path, put there after `bench` is imported: `actors` and
# `storage` come from the tree, the workloads from here.
# The collector is off: a full collection falls between the n and the 2n run
# in one tree and not in another (a heap a few thousand objects larger moves
# it), and then adds ~100k instructions per operation to that tree alone (a
# 1-step process: 882k before, 1,021k after a change, with it on; 872k and
# 897k with it off). What collections cost at run time is in `python -m
# bench` (a few µs per thousand operations).
RUNNER = (
    "import gc, runpy, sys, bench; gc.disable(); sys.path.insert(0, sys.argv[1]); "
    "del sys.argv[1]; runpy.run_module('bench._workloads', run_name='__main__')"
)


@attrs.frozen
class Figure:
    """One row: a workload run with n and 2n operations (and the extra
    environment of the counted run), divided by ``per`` operations."""

    name: str
    workload: str
    n: int
    counted_env: dict[str, str] = attrs.field(factory=dict)
    minus: str | None = None  # a workload whose difference is taken off (wake minus create)
    per: int | None = None  # operations per difference (default n)


FIGURES = [
    Figure("ctx.call child", "call", 150),
    Figure("1-step process", "proc", 150),
    Figure("create passivated", "create", 200),
    Figure("wake passivated", "wake", 200, minus="create"),
    Figure("send, taken by a live instance", "send", 1000),
    Figure("send_many, per message taken", "many", 1000),
    # The same tree twice, the second cancelled: the difference per instance.
    Figure("cancel, per instance of a tree", "cascade", 25, {"CANCEL": "1"}, per=25 + 625 + 1),
]


def count(tree: Path, workload: str, n: int, env: dict[str, str]) -> int:
    """Instructions of ``python bench/_workloads.py WORKLOAD N`` against ``tree``."""
    environ = dict(os.environ, PYTHONHASHSEED="0", POLL="0.5", **env)
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            RUNNER,
            str(tree),
            workload,
            str(n),
        ],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode or found is None:
        raise RuntimeError(f"{workload} {n} in {tree} failed:\n{done.stderr[-2000:]}")
    if f"actors from {tree}\n" not in done.stderr:
        raise RuntimeError(f"{workload} {n} did not run {tree}'s actors:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def measure(trees: list[Path], figures: list[Figure]) -> dict[str, dict[str, float]]:
    """Instructions per operation: figure name -> tree -> count."""
    runs: set[tuple[Path, str, int, tuple[tuple[str, str], ...]]] = set()
    for tree in trees:
        for f in figures:
            runs.add((tree, f.workload, f.n, ()))
            runs.add(
                (
                    tree,
                    f.workload,
                    2 * f.n if not f.counted_env else f.n,
                    tuple(sorted(f.counted_env.items())),
                )
            )
            if f.minus is not None:
                runs.add((tree, f.minus, f.n, ()))
                runs.add((tree, f.minus, 2 * f.n, ()))
    ordered = sorted(runs, key=str)
    with ThreadPoolExecutor(2) as pool:
        counts = dict(
            zip(
                ordered,
                pool.map(lambda r: count(r[0], r[1], r[2], dict(r[3])), ordered),
                strict=True,
            )
        )
    out: dict[str, dict[str, float]] = {}
    for f in figures:
        row = out[f.name] = {}
        for tree in trees:
            high_n = 2 * f.n if not f.counted_env else f.n
            diff = counts[(tree, f.workload, high_n, tuple(sorted(f.counted_env.items())))]
            diff -= counts[(tree, f.workload, f.n, ())]
            if f.minus is not None:
                diff -= counts[(tree, f.minus, 2 * f.n, ())] - counts[(tree, f.minus, f.n, ())]
            row[str(tree)] = diff / (f.per or f.n)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        type=Path,
        help="another checkout to measure beside this one (repeatable)",
    )
    parser.add_argument(
        "--only",
        help="comma-separated workloads: " + ", ".join(sorted({f.workload for f in FIGURES})),
    )
    parser.add_argument("--json", type=Path, help="also write the counts as JSON")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench.instructions needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    figures = FIGURES
    if args.only:
        wanted = set(args.only.split(","))
        figures = [f for f in FIGURES if f.workload in wanted]
    trees = [ROOT, *(tree.resolve() for tree in args.tree)]
    found = measure(trees, figures)
    names = [("this" if tree == ROOT else tree.name) for tree in trees]
    print(f"{'instructions per operation':32}" + "".join(f"{name:>16}" for name in names))
    for figure, row in found.items():
        cells = [f"{row[str(tree)] / 1e3:,.0f}k" for tree in trees]
        print(f"{figure:32}" + "".join(f"{cell:>16}" for cell in cells))
    if args.json:
        args.json.write_text(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
