"""The shared output: a plain-text table for people, JSON for machines."""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path

import attrs

from ._registry import Options, Result

__all__ = ["format_table", "machine", "write_json"]


def machine() -> str:
    """Where the numbers were measured, for the table's heading and the JSON."""
    cpu = platform.processor() or platform.machine()
    system = f"{platform.system()} {platform.release()}"
    return f"{platform.node()} ({cpu}, {os.cpu_count()} cpus, {system})"


def format_table(results: Sequence[Result], options: Options) -> str:
    """One table per suite: a row per result, an ``x <baseline>`` column per
    baseline the suite uses.

    ``range`` shows the slowest and fastest sample, so a reader can tell a
    real difference from noise.
    """
    out = [
        f"# {datetime.date.today().isoformat()} on {machine()}; python {platform.python_version()}",
        (
            f"# median of {options.repeats} samples of {options.seconds:g} s each; "
            "ratios are medians of same-round ratios"
        ),
    ]
    suites = list(dict.fromkeys(r.suite for r in results))
    for name in suites:
        out += ["", *_suite_table([r for r in results if r.suite == name])]
    return "\n".join(out)


def _suite_table(results: Sequence[Result]) -> list[str]:
    baselines: list[str] = []
    for r in results:
        baselines += [b for b in r.ratios if b not in baselines]
    header = ["suite", "measurement", "median", "unit", "range (min-max)"]
    header += [f"x {b}" for b in baselines]
    rows = [header]
    for r in results:
        spread = f"{min(r.samples):,.0f}-{max(r.samples):,.0f}" if r.samples else ""
        row = [r.suite, r.name, f"{r.value:,.0f}", r.unit, spread]
        row += [_ratio(r.ratios[b]) if b in r.ratios else "" for b in baselines]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    numeric = {2, 4} | set(range(5, len(header)))

    def line(row: list[str]) -> str:
        cells = (
            c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        )
        return "  ".join(cells).rstrip()

    return [line(rows[0]), line(["-" * w for w in widths])] + [line(row) for row in rows[1:]]


def _ratio(x: float) -> str:
    # Two decimals, except that small ratios keep two significant digits.
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def write_json(path: Path, results: Sequence[Result], options: Options) -> None:
    """Write the results, the options and the machine to ``path``."""
    document = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "python": platform.python_version(),
        "options": {**attrs.asdict(options), "workdir": str(options.workdir)},
        "results": [
            {**attrs.asdict(r), "samples": list(r.samples), "ratios": dict(r.ratios)}
            for r in results
        ],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
