"""Where the CPU of the runtime suite's throughput shapes goes, per operation.

``python -m bench.shapes [SHAPE ...] [--seconds S]``

`bench.walk` follows one operation at a time, and on LMDB its profile is
mostly the commit's sync. The throughput figures of ``python -m bench
runtime`` are another shape: many operations share each commit, and the
Python around each one is what limits them. This runs a shape of that
suite (``signals``: 1000 senders to 1000 live instances; ``many``:
``send_many`` of 1000; ``step1``, ``step10``: processes of 1 and 10 steps,
100 in flight) under cProfile for ``--seconds`` (4 by default) and prints,
per operation (a message taken, a process ended): the Python calls made,
the microseconds by room (`bench.walk.ROOMS`) and the functions that take
the most. cProfile slows each call by about as much as it costs, so read
the shares and the calls, not the microseconds, against the suite's rates.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import runtime
from ._kit import _probe
from .walk import fold

__all__ = ["SHAPES", "main", "profile"]

# name -> (what one operation is, the suite's measurement of it)
SHAPES: dict[str, tuple[str, Callable[[Path, float], float]]] = {
    "signals": (
        "a message taken, 1000 senders -> 1000 instances",
        lambda d, s: runtime.signal_rate(d, s, memory=False, instances=1000),
    ),
    "many": ("a message taken, send_many of 1000", lambda d, s: runtime.send_many_rate(d, s)),
    "step1": ("a 1-step process ended", lambda d, s: runtime.process_rate(d, s, steps=1)),
    "step10": ("a 10-step process ended", lambda d, s: runtime.process_rate(d, s, steps=10)),
}
_STEPS = {"step1": 1, "step10": 10}


def profile(shape: str, seconds: float) -> list[str]:
    """The profile of ``shape`` run for ``seconds``, as printed lines."""
    what, measure = SHAPES[shape]
    profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory() as directory:
        _probe.reset()
        profiler.enable()
        try:
            rate = measure(Path(directory), seconds)
        finally:
            profiler.disable()
    # Operations done in the whole run (the warm-up too, which the rate
    # leaves out): messages the instances took, or processes ended.
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    if shape in ("signals", "many"):
        operations = _probe.count
    else:  # each step calls the step function once (the process's own
        # coroutine counts a call at each resumption)
        steps = sum(
            calls
            for (filename, _, name), (_, calls, *_) in stats.items()
            if name == "_noop" and filename.endswith("_kit.py")
        )
        operations = steps // _STEPS[shape]
    calls = sum(called for (_, called, *_) in stats.values())
    folded = fold(profiler, max(operations, 1))
    return [
        f"{shape}: {what}; {operations:,} in the run ({rate:,.0f}/s profiled)",
        f"  {calls / max(operations, 1):.0f} Python calls an operation",
        *folded.lines(),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shapes", description=__doc__)
    parser.add_argument("shapes", nargs="*", help=f"of {', '.join(SHAPES)} (default: all)")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.shapes) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    for shape in args.shapes or SHAPES:
        print("\n".join(profile(shape, args.seconds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
