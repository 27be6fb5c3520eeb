"""``--plot PATH``: a PNG chart of every figure against its baseline and its target.

One bar per figure that has a baseline or a target, as a ratio to the
baseline (log scale); a figure whose target is a plain value (``<= 100 MB``)
is drawn as a fraction of that value. Colour says better or worse for that
figure (lower is better for latency and memory): green met its target, red
missed it; pale green or pale red for a figure with no target, better or
worse than its baseline. A black tick marks the target. Needs matplotlib
(``pip install -e '.[plot]'``); `bench.__main__` checks for it before running.
"""

from __future__ import annotations

import datetime
import math
import platform
from collections.abc import Sequence
from pathlib import Path

import attrs
import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from ._registry import Options, Result
from ._table import (
    format_ratio,
    format_value,
    format_verdict,
    machine,
    run_settings,
)

__all__ = ["plot"]

MET, MISSED, RERUN = "#2e9d3e", "#d1342f", "#b0b0b0"
BETTER, WORSE = "#a9dcb0", "#f2b0ae"


@attrs.frozen
class _Bar:
    label: str
    x: float  # where the bar ends: a ratio, or a fraction of the target's value
    target: float | None  # where the target's tick goes, on the same scale
    colour: str
    text: str  # the values, beside the bar
    noisy: bool


def plot(path: Path, results: Sequence[Result], options: Options) -> None:
    """Draw the chart to ``path`` (PNG). Figures with neither a baseline nor a
    target are left out (their values are in the table)."""
    several = len({r.suite for r in results}) > 1
    bars = [bar for r in results if (bar := _bar(r, several)) is not None]
    if not bars:
        bars = [_Bar("(no figure has a baseline or a target)", 1.0, None, "white", "", False)]
    figure, axes = plt.subplots(figsize=(13, 0.32 * len(bars) + 2.2))
    ys = range(len(bars))
    # Bars grow from 1x (as much as the baseline) to the ratio: left of 1x is
    # less than the baseline, right of it more; the colour says which is better.
    axes.barh(
        ys,
        [b.x - 1 for b in bars],
        left=1.0,
        color=[b.colour for b in bars],
        edgecolor="#555555",
        linewidth=0.5,
    )
    for y, b in zip(ys, bars, strict=True):
        if b.noisy:
            axes.barh(
                y, b.x - 1, left=1.0, color="none", edgecolor="#555555", hatch="///", linewidth=0
            )
        if b.target is not None:
            axes.plot([b.target], [y], marker="|", markersize=14, markeredgewidth=2, color="black")
        axes.annotate(
            b.text,
            (max(1.0, b.x, b.target or 0), y),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    axes.set_yticks(list(ys), [b.label for b in bars], fontsize=8)
    axes.invert_yaxis()
    axes.set_xscale("log")
    xs = [v for b in bars for v in (b.x, b.target, 1.0) if v is not None and v > 0]
    axes.set_xlim(min(xs) / 2, max(xs) * 40)  # room on the right for the values
    axes.axvline(1.0, color="#777777", linewidth=0.8, linestyle="--")
    axes.set_xlabel(
        "ratio to the figure's baseline, log scale (1x: equal to the baseline; "
        "a target on a value: the value over the target's)"
    )
    axes.grid(axis="x", which="major", color="#dddddd", linewidth=0.5)
    axes.set_axisbelow(True)
    targets = [r for r in results if r.verdict is not None]
    met = sum(r.verdict == "met" for r in targets)
    axes.set_title(
        f"python -m bench: targets met {met} of {len(targets)}\n"
        f"{datetime.date.today().isoformat()}, python {platform.python_version()} on "
        f"{machine()}\n{run_settings(options)}",
        fontsize=10,
    )
    axes.legend(
        handles=[
            Patch(color=MET, label="target met"),
            Patch(color=MISSED, label="target missed"),
            Patch(color=RERUN, label="too noisy to judge: rerun"),
            Patch(color=BETTER, label="no target; better than its baseline"),
            Patch(color=WORSE, label="no target; worse than its baseline"),
            Patch(facecolor="white", edgecolor="#555555", hatch="///", label="noisy (spread > 2x)"),
            plt.Line2D(
                [],
                [],
                color="black",
                marker="|",
                linestyle="none",
                markersize=12,
                markeredgewidth=2,
                label="target",
            ),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.6 / (0.32 * len(bars) + 2.2)),
        ncol=3,
        fontsize=8,
        frameon=False,
    )
    figure.savefig(path, dpi=110, bbox_inches="tight")  # tight: no label is cut off
    plt.close(figure)


def _bar(r: Result, with_suite: bool) -> _Bar | None:
    label = f"{r.suite}: {r.name}" if with_suite else r.name
    if r.lower_is_better:
        label += " (lower is better)"
    baselines = r.baselines()
    value = format_value(r.value, r.unit)
    target = r.target
    tick: float | None  # where the target's tick goes
    if target is not None and target.baseline is None:  # a plain value: drawn against it
        x, tick = r.value / target.bound, 1.0
        text = f"{value} ({format_ratio(x)} the target's), target {target.describe(r.unit)}: "
        text += format_verdict(r.verdict)
    elif baselines:
        x = r.ratios[baselines[0]]
        tick = target.bound if target is not None else None
        text = f"{format_ratio(x)} {baselines[0]} ({value})"
        if target is not None:
            text += f", target {target.describe(r.unit)}: {format_verdict(r.verdict)}"
    else:
        return None
    if not math.isfinite(x) or x <= 0:
        return None
    if r.verdict is not None:
        colour = {"met": MET, "missed": MISSED}.get(str(r.verdict), RERUN)
    else:
        colour = BETTER if (x < 1) == r.lower_is_better else WORSE
    if r.noisy:
        text += f"; noisy, spread {r.spread:.1f}x"
    return _Bar(label, x, tick, colour, text, r.noisy)
