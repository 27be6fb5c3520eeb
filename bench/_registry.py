"""The suite registry, the `Result` record, and the repeat-and-take-the-median loop.

A suite is a function ``fn(options) -> list[Result]`` registered with
``@suite("name")``. Most suites describe their measurements as `Measurement`
values and hand them to `run_measurements`, which runs each on a fresh
directory, repeats, and reports medians and ratios to the baselines.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

__all__ = ["SUITES", "Measurement", "Options", "Result", "progress", "run_measurements", "suite"]


@attrs.frozen
class Options:
    """How long and where to measure; the same for every suite in one run."""

    quick: bool
    repeats: int  # samples per measurement; the table shows their median
    seconds: float  # length of one sample's measuring window
    workdir: Path  # parent of every fresh directory, so all share one filesystem


@attrs.frozen
class Result:
    """One measurement: the median of its samples, and ratios to its baselines.

    ``ratios`` maps a baseline's name (another result of the same suite) to
    this measurement's ratio to it: the median, over rounds, of the ratio of
    the two samples taken in that round.
    """

    suite: str
    name: str
    value: float
    unit: str
    samples: tuple[float, ...] = ()
    ratios: Mapping[str, float] = attrs.field(factory=dict)


@attrs.frozen
class Measurement:
    """What to measure: ``sample(directory, seconds)`` returns one value in ``unit``.

    ``directory`` is fresh and empty for every sample. ``baselines`` name
    other measurements of the same suite to divide by.
    """

    name: str
    unit: str
    sample: Callable[[Path, float], float]
    baselines: tuple[str, ...] = ()


SuiteFn = Callable[[Options], list[Result]]
SUITES: dict[str, SuiteFn] = {}


def suite(name: str) -> Callable[[SuiteFn], SuiteFn]:
    """Register ``fn`` as the suite ``name`` (``python -m bench name``)."""

    def register(fn: SuiteFn) -> SuiteFn:
        if name in SUITES and SUITES[name] is not fn:
            raise ValueError(f"two benchmark suites are named {name!r}; rename one")
        SUITES[name] = fn
        return fn

    return register


def progress(line: str) -> None:
    """One line of progress on stderr (stdout is kept for the table)."""
    print(line, file=sys.stderr, flush=True)


def run_measurements(
    suite_name: str, measurements: Sequence[Measurement], options: Options
) -> list[Result]:
    """Take ``options.repeats`` samples of each measurement; return medians.

    Repeats are interleaved (round 1 of every measurement, then round 2, ...)
    rather than run back to back, so a noisy neighbour that slows the
    machine for a few seconds hits every measurement alike and the ratios
    stay meaningful.
    """
    samples: dict[str, list[float]] = {m.name: [] for m in measurements}
    for round_ in range(1, options.repeats + 1):
        for m in measurements:
            directory = Path(tempfile.mkdtemp(prefix="bench-", dir=options.workdir))
            try:
                value = m.sample(directory, options.seconds)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            samples[m.name].append(value)
            progress(f"{suite_name}: {m.name} [{round_}/{options.repeats}] {value:,.0f} {m.unit}")
    return [
        Result(
            suite=suite_name,
            name=m.name,
            value=statistics.median(samples[m.name]),
            unit=m.unit,
            samples=tuple(samples[m.name]),
            ratios={b: _paired_ratio(samples[m.name], samples[b]) for b in m.baselines},
        )
        for m in measurements
    ]


def _paired_ratio(values: list[float], baseline: list[float]) -> float:
    # The median of round-by-round ratios: each pair was measured seconds
    # apart, so a slow spell of the machine cancels out of the ratio.
    return statistics.median(v / b if b else float("nan") for v, b in zip(values, baseline))
