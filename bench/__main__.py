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
_SUITE_MODULES = ("bench.journal", "bench.runtime", "bench.postgres")


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
    for name in args.suites or list(SUITES):
        results += SUITES[name](options)
    print(format_table(results, options))
    if args.json is not None:
        write_json(args.json, results, options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
