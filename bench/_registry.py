"""The suite registry, the `Result` record, targets, and the repeat-and-take-the-median loop.

A suite is a function ``fn(options) -> list[Result]`` registered with
``@suite("name")``. Most suites describe their figures as `Measurement`
values and hand them to `run_measurements`, which runs each on a fresh
directory, repeats, and reports medians, ratios to the baselines, and
whether each figure meets its `Target`.
"""

from __future__ import annotations

import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import attrs

__all__ = [
    "NOISY_SPREAD",
    "SUITES",
    "Floor",
    "Measurement",
    "Options",
    "Result",
    "Target",
    "at_least",
    "at_most",
    "contains",
    "format_number",
    "format_ratio",
    "format_value",
    "lower_is_better",
    "progress",
    "run_measurements",
    "spread_of",
    "suite",
]

# Samples of one figure whose largest is more than this many times their
# smallest were taken on a noisy machine: the table says so beside the figure.
NOISY_SPREAD = 2.0

# Units where less is better (latency, memory, CPU); every other unit is a
# rate, where more is better.
_LOWER_IS_BETTER_UNITS = frozenset({"ns", "µs", "us", "ms", "s", "B", "KB", "MB", "% of a core"})

_STARTED = time.monotonic()


@attrs.frozen
class Options:
    """How long and where to measure; the same for every suite in one run."""

    full: bool  # the long run (--full): more and longer samples, the largest N
    repeats: int  # samples per measurement; the table shows their median
    seconds: float  # length of one sample's measuring window
    workdir: Path  # parent of every fresh directory, so all share one filesystem

    @property
    def quick(self) -> bool:
        """The default, short run (suites written before --full read this)."""
        return not self.full


def lower_is_better(unit: str) -> bool:
    """Whether a smaller value is the better one for a figure in ``unit``."""
    return unit in _LOWER_IS_BETTER_UNITS


@attrs.frozen
class Target:
    """What a figure should reach: its ratio to ``baseline``, or with no
    baseline its value in its own unit, ``>=`` or ``<=`` ``bound``.

    Declare one with `at_least` or `at_most`. The direction also says which
    way is better for the figure (charts colour by it).
    """

    op: Literal[">=", "<="]
    bound: float
    baseline: str | None = None

    @property
    def lower_is_better(self) -> bool:
        return self.op == "<="

    def met(self, measured: float) -> bool:
        """Whether ``measured`` (a ratio, or a value for a target with no
        baseline) meets the target; a NaN never does."""
        if math.isnan(measured):
            return False
        return measured >= self.bound if self.op == ">=" else measured <= self.bound

    def describe(self, unit: str = "") -> str:
        """``>= 0.08x`` for a ratio, ``<= 100 MB`` for a value."""
        if self.baseline is not None:
            return f"{self.op} {self.bound:g}x"
        return f"{self.op} {self.bound:,g} {unit}".rstrip()


def at_least(bound: float, baseline: str | None = None) -> Target:
    """The figure's ratio to ``baseline`` (its value, with no baseline) must
    be ``>= bound``: for rates, where more is better."""
    return Target(">=", bound, baseline)


def at_most(bound: float, baseline: str | None = None) -> Target:
    """The figure's ratio to ``baseline`` (its value, with no baseline) must
    be ``<= bound``: for latency and memory, where less is better."""
    return Target("<=", bound, baseline)


@attrs.frozen
class Floor:
    """What physics allows a figure against a baseline whose work it contains.

    A durable send contains a synced commit: its latency is at least ``times``
    the commit's (its rate at most ``1 / times`` the commits'). A ratio on the
    wrong side of that was not measured on a steady machine (the baseline had
    a slow spell), so its verdict is "noisy", never "met". Declare one with
    `contains`.
    """

    baseline: str
    times: float
    why: str

    def allows(self, ratio: float, lower_is_better: bool) -> bool:
        """Whether ``ratio`` (the figure over the baseline) is physically possible."""
        if math.isnan(ratio):
            return True  # no ratio, nothing to refuse: the verdict says missed
        return ratio >= self.times if lower_is_better else ratio <= 1 / self.times


def contains(baseline: str, why: str, times: float = 1.0) -> Floor:
    """The figure does at least ``times`` the work of ``baseline`` (another
    measurement of the suite): a ratio better than that is impossible."""
    return Floor(baseline, times, why)


Verdict = Literal["met", "missed", "noisy"]


@attrs.frozen
class Result:
    """One figure: the median of its samples, its ratios to its baselines,
    and its target if it has one.

    ``ratios`` maps a baseline's name (another result of the same suite) to
    this measurement's ratio to it: the median, over rounds, of the ratio of
    the two samples taken in that round; ``baseline_spreads`` maps it to the
    spread of that baseline's samples. ``meaning`` says in one line what the
    figure is for a user.
    """

    suite: str
    name: str
    value: float
    unit: str
    samples: tuple[float, ...] = ()
    ratios: Mapping[str, float] = attrs.field(factory=dict)
    target: Target | None = None
    meaning: str = ""
    baseline_spreads: Mapping[str, float] = attrs.field(factory=dict)
    floor: Floor | None = None

    @property
    def lower_is_better(self) -> bool:
        """From the target's direction, else from the unit."""
        if self.target is not None:
            return self.target.lower_is_better
        return lower_is_better(self.unit)

    @property
    def measured(self) -> float | None:
        """What the target is checked against: the ratio to the target's
        baseline, or the value; None with no target or a missing baseline."""
        if self.target is None:
            return None
        if self.target.baseline is None:
            return self.value
        return self.ratios.get(self.target.baseline)

    @property
    def verdict(self) -> Verdict | None:
        """``met``, ``missed``, or ``noisy`` (rerun) when the figure's samples,
        or those of its target's baseline, spread more than `NOISY_SPREAD`
        times, or its ratio is one physics does not allow (`impossible`);
        None for a figure with no target (or whose target's baseline was not
        measured in this run).

        A noisy run never says ``met``: a busy spell in the baseline's samples
        makes a figure look better than it is as easily as worse.
        """
        measured = self.measured
        if measured is None or self.target is None:
            return None
        if self.noisy or self.noisy_baseline(self.target.baseline) or self.impossible:
            return "noisy"
        return "met" if self.target.met(measured) else "missed"

    def noisy_baseline(self, baseline: str | None) -> bool:
        """Whether ``baseline``'s samples spread more than `NOISY_SPREAD` times."""
        if baseline is None:
            return False
        spread = self.baseline_spreads.get(baseline)
        return spread is not None and spread > NOISY_SPREAD

    @property
    def impossible(self) -> bool:
        """The ratio to the `Floor`'s baseline is better than the work the
        figure contains allows (a durable send faster than its commit)."""
        if self.floor is None or self.floor.baseline not in self.ratios:
            return False
        return not self.floor.allows(self.ratios[self.floor.baseline], self.lower_is_better)

    @property
    def spread(self) -> float | None:
        """Largest sample over smallest; None with fewer than two samples
        or a sample that is not positive."""
        return spread_of(self.samples)

    @property
    def noisy(self) -> bool:
        """The samples spread more than `NOISY_SPREAD` times: a noisy machine."""
        spread = self.spread
        return spread is not None and spread > NOISY_SPREAD

    def baselines(self) -> list[str]:
        """Baseline names, the target's first."""
        target = self.target.baseline if self.target is not None else None
        first = [target] if target is not None and target in self.ratios else []
        return first + [b for b in self.ratios if b not in first]


@attrs.frozen
class Measurement:
    """What to measure: ``sample(directory, seconds)`` returns one value in ``unit``.

    ``directory`` is fresh and empty for every sample. ``baselines`` name
    other measurements of the same suite to divide by; ``target`` is what
    the figure should reach (its baseline is measured as one of the
    baselines, whether listed there or not). ``meaning`` is the line under
    the figure in the table: what it is for a user ("a durable 1-step
    process, start to result, 100 in flight"). ``floor`` names a baseline
    whose work the figure contains (`contains`): a better ratio is noise.
    """

    name: str
    unit: str
    sample: Callable[[Path, float], float]
    baselines: tuple[str, ...] = ()
    target: Target | None = None
    meaning: str = ""
    floor: Floor | None = None

    def all_baselines(self) -> tuple[str, ...]:
        extra = [
            b.baseline
            for b in (self.target, self.floor)
            if b is not None and b.baseline is not None
        ]
        return tuple(dict.fromkeys((*self.baselines, *extra)))


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
    stay meaningful. Progress: a line as each round starts, and a line per
    figure as its last sample is in.
    """
    names = {m.name for m in measurements}
    for m in measurements:
        missing = [b for b in m.all_baselines() if b not in names]
        if missing:
            raise ValueError(
                f"{suite_name}: figure {m.name!r} names baseline {missing[0]!r}, which is not "
                "a measurement of the same suite; add it to the suite or fix the name"
            )
    samples: dict[str, list[float]] = {m.name: [] for m in measurements}
    for round_ in range(1, options.repeats + 1):
        if options.repeats > 1:
            progress(
                f"{_elapsed()} {suite_name}: round {round_}/{options.repeats} "
                f"of {len(measurements)} figures"
            )
        for m in measurements:
            directory = Path(tempfile.mkdtemp(prefix="bench-", dir=options.workdir))
            try:
                value = m.sample(directory, options.seconds)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            samples[m.name].append(value)
            if round_ == options.repeats:
                progress(f"{_elapsed()} {suite_name}: {_summary(_result(suite_name, m, samples))}")
    return [_result(suite_name, m, samples) for m in measurements]


def _result(suite_name: str, m: Measurement, samples: Mapping[str, list[float]]) -> Result:
    ratios = {
        b: _paired_ratio(samples[m.name], samples[b])
        for b in m.all_baselines()
        # A baseline later in the round has a sample fewer until the round ends.
        if len(samples[b]) == len(samples[m.name])
    }
    return Result(
        suite=suite_name,
        name=m.name,
        value=statistics.median(samples[m.name]),
        unit=m.unit,
        samples=tuple(samples[m.name]),
        ratios=ratios,
        target=m.target,
        meaning=m.meaning,
        baseline_spreads={b: s for b in ratios if (s := spread_of(samples[b])) is not None},
        floor=m.floor,
    )


def spread_of(samples: Sequence[float]) -> float | None:
    """Largest sample over smallest; None with fewer than two samples or a
    sample that is not positive."""
    if len(samples) < 2 or min(samples) <= 0:
        return None
    return max(samples) / min(samples)


def _summary(result: Result) -> str:
    line = f"{result.name}: {format_number(result.value)} {result.unit}"
    if result.target is not None:
        measured = result.measured
        if measured is None:  # its baseline comes later in the round
            line += f" (target {result.target.describe(result.unit)})"
        else:
            if result.target.baseline is not None:
                line += f", {format_ratio(measured)}"
            verdict = "noisy: rerun" if result.verdict == "noisy" else result.verdict
            line += f" (target {result.target.describe(result.unit)}: {verdict})"
    if result.noisy:
        line += f"; noisy: samples spread {result.spread:.1f}x"
    return line


def format_number(value: float) -> str:
    """``12,345`` from 100 up, three significant digits below (``0.52``)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_value(value: float, unit: str) -> str:
    """The value with its unit: ``12,345 signals/s``, ``415 µs``, ``8,949 B``,
    ``97% of a core``."""
    number = format_number(value)
    if unit.startswith("%"):
        return f"{number}{unit}"
    return f"{number} {unit}"


def format_ratio(x: float) -> str:
    """Two decimals, except that small ratios keep two significant digits."""
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def _elapsed() -> str:
    return f"[{time.monotonic() - _STARTED:4.0f} s]"


def _paired_ratio(values: list[float], baseline: list[float]) -> float:
    # The median of round-by-round ratios: each pair was measured seconds
    # apart, so a slow spell of the machine cancels out of the ratio.
    return statistics.median(
        v / b if b else float("nan") for v, b in zip(values, baseline, strict=True)
    )
