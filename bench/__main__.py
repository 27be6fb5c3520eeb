"""``python -m bench [SUITE ...] [--quick] [--json PATH]``: run benchmark suites."""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

from ._registry import SUITES, Options, Result, progress
from ._table import format_table, write_json

# Suites register themselves on import. The journal suite always exists; the
# others arrive with the runtime and the PostgreSQL journal.
_SUITE_MODULES = (
    "bench.journal", "bench.runtime", "bench.asks", "bench.queues", "bench.postgres",
)


def _load_suites() -> None:
    for module in _SUITE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the suite exists but needs something missing
                progress(f"bench: skipping {module}: {exc}")
        except ImportError as exc:
            progress(f"bench: skipping {module}: {exc}")


def main(argv: list[str] | None = None) -> int:
    _load_suites()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "suites",
        nargs="*",
        metavar="SUITE",
        help=f"suites to run (default: all of {', '.join(SUITES)})",
    )
    parser.add_argument(
        "--backend",
        choices=["postgres"],
        help="run the suite for this journal backend (postgres: the postgres suite)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    parser.add_argument("--repeats", type=int, help="samples per measurement (default 5, quick 3)")
    parser.add_argument("--seconds", type=float, help="length of one sample (default 1, quick 0.3)")
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the fresh directories go (default: the temp dir); all on one filesystem",
    )
    parser.add_argument("--plot", type=Path, metavar="PATH", help="also draw a PNG chart")
    args = parser.parse_args(argv)
    if args.backend is not None and args.backend not in args.suites:
        args.suites.append(args.backend)
    unknown = [name for name in args.suites if name not in SUITES]
    if unknown:
        parser.error(f"unknown suite {', '.join(unknown)}; available: {', '.join(SUITES)}")
    options = Options(
        quick=args.quick,
        repeats=args.repeats or (3 if args.quick else 5),
        seconds=args.seconds or (0.3 if args.quick else 1.0),
        workdir=args.dir,
    )
    results: list[Result] = []
    # The main job is the embedded LMDB default: the PostgreSQL suite runs
    # when asked for (a suite name or --backend postgres).
    for name in args.suites or [s for s in SUITES if s != "postgres"]:
        results += SUITES[name](options)
    print(format_table(results, options))
    if args.json is not None:
        write_json(args.json, results, options)
    if args.plot is not None:
        plot(args.plot, results)
    return 0


def plot(path: Path, results: list[Result]) -> None:
    """A PNG chart: each figure as a ratio to its first baseline (log scale)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        progress("bench: --plot needs matplotlib: pip install -e '.[plot]'")
        return
    rows = [(r.name, next(iter(r.ratios.items()))) for r in results if r.ratios]
    if not rows:
        progress("bench: nothing to plot (no figure has a baseline)")
        return
    names = [name for name, _ in rows]
    values = [ratio for _, (_, ratio) in rows]
    figure, axes = plt.subplots(figsize=(10, 0.35 * len(rows) + 1.5))
    axes.barh(names, values, color=["tab:green" if v >= 1 else "tab:blue" for v in values])
    axes.set_xscale("log")
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.invert_yaxis()
    axes.set_xlabel("ratio to its baseline (log scale)")
    for i, (name, (baseline, ratio)) in enumerate(rows):
        axes.annotate(f"{ratio:.3g}x {baseline}", (ratio, i), xytext=(4, 0),
                      textcoords="offset points", va="center", fontsize=7)  # fmt: skip
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    progress(f"bench: wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
