"""``python -m bench [SUITE ...] [--full] [--json PATH] [--plot PATH]``: run benchmark suites.

``python -m bench soak --minutes N`` is the soak (`bench.soak`), with its own options;
``python -m bench walk`` counts the calls of the hot flows (`bench.walk`).

The default run takes about a minute: 3 samples of 0.3 s per figure, and the
smaller N for the figures that build many instances. ``--full`` is the long
run (5 samples of 1 s, the largest N; several minutes). ``python -m bench
peers`` runs our runtime beside DBOS Transact (the ``peers`` extra);
``python -m bench postgres`` the PostgreSQL journal.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import tempfile
from pathlib import Path

from . import soak, walk
from ._registry import SUITES, Options, Result, progress
from ._table import format_markdown, format_table, write_json
from .peers import missing as missing_peer

# Suites register themselves on import. The journal suite always exists; the
# others arrive with the runtime and the PostgreSQL journal.
_SUITE_MODULES = (
    "bench.journal",
    "bench.runtime",
    "bench.asks",
    "bench.queues",
    "bench.signals",
    "bench.postgres",
    "bench.peers",
    "bench.inspector",
)
# Suites that run only when named: they need a server (postgres), another
# library (peers: DBOS), or build a big journal (inspector).
OPT_IN = ("postgres", "peers", "inspector")

# (samples per figure, seconds per sample) of the default run and of --full.
DEFAULT_RUN = (3, 0.3)
FULL_RUN = (5, 1.0)

PLOT_INSTALL = "pip install -e '.[plot]'"


def _load_suites() -> None:
    for module in _SUITE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the suite exists but needs something missing
                progress(f"bench: skipping {module}: {exc}")
        except ImportError as exc:
            progress(f"bench: skipping {module}: {exc}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "suites",
        nargs="*",
        metavar="SUITE",
        help=(
            f"suites to run (default: {', '.join(s for s in SUITES if s not in OPT_IN)}; "
            f"{', '.join(OPT_IN)} only when named; peers: ours beside DBOS)"
        ),
    )
    parser.add_argument(
        "--backend",
        choices=["postgres"],
        help="run the suite for this journal backend (postgres: the postgres suite)",
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument(
        "--full",
        action="store_true",
        help=f"the long run: {FULL_RUN[0]} samples of {FULL_RUN[1]:g} s, the largest N",
    )
    length.add_argument(
        "--quick",
        action="store_true",
        help="the default run (the flag is kept so older command lines work)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="PATH",
        help="also write README's table (figures with a baseline or a target) as Markdown",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        help=f"samples per figure (default {DEFAULT_RUN[0]}, --full {FULL_RUN[0]})",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        help=f"length of one sample (default {DEFAULT_RUN[1]:g}, --full {FULL_RUN[1]:g})",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the fresh directories go (default: the temp dir); all on one filesystem",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="PATH",
        help=f"also draw a PNG chart (needs matplotlib: {PLOT_INSTALL})",
    )
    return parser


def _quiet_expected_crashes() -> None:
    """The saga figure's processes fail on purpose, a dozen times a run: the
    runtime's crash warnings for them (with tracebacks) would bury the
    progress lines. Whatever else the runtime logs still reaches stderr."""
    handler = logging.StreamHandler()
    handler.addFilter(
        lambda record: not str(getattr(record, "actors_address", "")).startswith("saga/")
    )
    logging.getLogger("actors").addHandler(handler)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["soak"]:  # a run of its own, not a suite of figures
        return soak.main(argv[1:])
    if argv[:1] == ["walk"]:  # the calls of the hot flows, not a figure of speed
        return walk.main(argv[1:])
    _load_suites()
    parser = _parser()
    args = parser.parse_args(argv)
    # Checked before anything runs: a minute of measuring must not end in
    # "matplotlib is missing".
    if args.plot is not None and not _has_matplotlib():
        parser.exit(
            2,
            f"python -m bench: --plot needs matplotlib, which is not installed; "
            f"install it with:\n    {PLOT_INSTALL}\n",
        )
    if "peers" in args.suites and (problem := missing_peer()) is not None:
        parser.exit(2, f"python -m bench peers: {problem}\n")
    if args.backend is not None and args.backend not in args.suites:
        args.suites.append(args.backend)
    unknown = [name for name in args.suites if name not in SUITES]
    if unknown:
        parser.error(f"unknown suite {', '.join(unknown)}; available: {', '.join(SUITES)}")
    repeats, seconds = FULL_RUN if args.full else DEFAULT_RUN
    options = Options(
        full=args.full,
        repeats=args.repeats or repeats,
        seconds=args.seconds or seconds,
        workdir=args.dir,
    )
    results: list[Result] = []
    # The main job is the embedded LMDB default: the PostgreSQL and peers
    # suites run when asked for (a suite name, or --backend postgres).
    for name in args.suites or [s for s in SUITES if s not in OPT_IN]:
        results += SUITES[name](options)
    print(format_table(results, options))
    if args.json is not None:
        write_json(args.json, results, options)
    if args.markdown is not None:
        args.markdown.write_text(format_markdown(results, options) + "\n")
    if args.plot is not None:
        from ._plot import plot  # matplotlib is optional: imported only when asked for

        plot(args.plot, results, options)
        progress(f"bench: wrote {args.plot}")
    return 0


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    _quiet_expected_crashes()
    sys.exit(main())
