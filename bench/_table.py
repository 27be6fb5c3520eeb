"""The shared output: a plain-text table for people, JSON for machines.

The table has one row per figure (and a row under it per further baseline):
its value, its ratio to its baseline, its target, whether the target is met,
and a warning beside it when its samples spread more than 2x. It fits in
`WIDTH` columns: the figure and baseline names are shortened if it would not.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from ._registry import NOISY_SPREAD, Options, Result, format_ratio, format_value

__all__ = [
    "WIDTH",
    "format_markdown",
    "format_ratio",
    "format_table",
    "format_value",
    "json_document",
    "machine",
    "run_settings",
    "suite_table",
    "write_json",
]

WIDTH = 100
_GAP = "  "


def machine() -> str:
    """Where the numbers were measured, for the table's heading and the JSON."""
    cpu = platform.processor() or platform.machine()
    system = f"{platform.system()} {platform.release()}"
    return f"{platform.node()} ({cpu}, {os.cpu_count()} cpus, {system})"


def run_settings(options: Options) -> str:
    """What kind of run this was: ``default run, median of 3 samples of 0.3 s each``."""
    kind = "--full run" if options.full else "default run"
    return f"{kind}, median of {options.repeats} samples of {options.seconds:g} s each"


def format_table(results: Sequence[Result], options: Options) -> str:
    """The heading (date, machine, Python, settings, targets met), then a
    table per suite; every line at most `WIDTH` characters."""
    targets = [r for r in results if r.verdict is not None]
    met = sum(r.verdict == "met" for r in targets)
    noisy = sum(r.noisy for r in results)
    out = [
        _fit(f"# {datetime.date.today().isoformat()}, python {platform.python_version()}, "
             f"on {machine()}"),
        _fit(f"# {run_settings(options)}" + ("" if options.full else " (--full: the long run)")),
        f"# ratios are medians of same-round ratios; targets met: {met} of {len(targets)}",
    ]  # fmt: skip
    if noisy:
        out.append(
            f"# noisy: {noisy} figure(s) whose samples spread more than {NOISY_SPREAD:g}x "
            "(a busy machine): read them as ranges"
        )
    for name in dict.fromkeys(r.suite for r in results):
        out += ["", *suite_table(name, [r for r in results if r.suite == name])]
    return "\n".join(out)


def _fit(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def suite_table(suite: str, results: Sequence[Result]) -> list[str]:
    """One suite's rows: figure, value, ratio to a baseline, target and
    verdict, and a note when the figure's samples are noisy."""
    header = [suite, "value", "x baseline", "target", "note"]
    rows: list[list[str]] = []
    for r in results:
        baselines = r.baselines()
        target = ""
        if r.target is not None:
            verdict = {"met": "met", "missed": "MISSED", None: "(no baseline)"}[r.verdict]
            op, bound = r.target.describe(r.unit).split(" ", 1)
            target = f"{op}{bound} {verdict}"  # ">=0.08x MISSED": narrow, and plain enough
        rows.append([
            r.name,
            format_value(r.value, r.unit),
            _versus(r, baselines[0]) if baselines else "",
            target,
            f"noisy {r.spread:.1f}x" if r.noisy else "",
        ])  # fmt: skip
        rows += [["", "", _versus(r, b), "", ""] for b in baselines[1:]]
    widths = _widths(header, rows)
    if _excess(widths) > 0:  # first drop the spread from the notes (the JSON has it)
        rows = [[*row[:4], "noisy" if row[4] else ""] for row in rows]
        widths = _widths(header, rows)
    # Still too wide: shorten the wider of the figure and baseline columns,
    # a character at a time, down to 24 and 16 (the JSON has the names whole).
    while _excess(widths) > 0 and (widths[0] > 24 or widths[2] > 16):
        widths[0 if widths[0] - 24 >= widths[2] - 16 else 2] -= 1
    right = {1}

    def line(row: list[str]) -> str:
        cells = []
        for i, (cell, width) in enumerate(zip(row, widths)):
            if len(cell) > width:
                cell = cell[: width - 1] + "…"
            cells.append(cell.rjust(width) if i in right else cell.ljust(width))
        return _fit(_GAP.join(cells).rstrip())

    return [line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)]


def _widths(header: list[str], rows: list[list[str]]) -> list[int]:
    return [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]


def _excess(widths: list[int]) -> int:
    return len(_GAP) * (len(widths) - 1) + sum(widths) - WIDTH


def _versus(r: Result, baseline: str) -> str:
    return f"{format_ratio(r.ratios[baseline])} {baseline}"


def format_markdown(results: Sequence[Result], options: Options) -> str:
    """README's table: a line saying how the run was made, then a row per
    figure; a baseline appears with its value in the baseline column of the
    figures measured against it, not in a row of its own."""
    targets = [r for r in results if r.verdict is not None]
    met = sum(r.verdict == "met" for r in targets)
    noisy = sum(r.noisy for r in results)
    out = [
        f"Measured {datetime.date.today().isoformat()} on {machine()}, Python "
        f"{platform.python_version()}; {run_settings(options)}. Targets met: {met} of "
        f"{len(targets)}. Samples of {noisy} of {len(results)} figures spread more than "
        f"{NOISY_SPREAD:g}x (marked *noisy*).",
        "",
        "| figure | value | baseline | ratio | target |",
        "|---|---|---|---|---|",
    ]
    values = {(r.suite, r.name): r for r in results}
    used = {(r.suite, b) for r in results for b in r.ratios}
    for r in results:
        baselines = r.baselines()
        if not baselines and r.target is None and (r.suite, r.name) in used:
            continue
        value = format_value(r.value, r.unit) + (" *noisy*" if r.noisy else "")
        baseline = ratio = ""
        if baselines:
            b = values.get((r.suite, baselines[0]))
            baseline = f"{b.name} {format_value(b.value, b.unit)}" if b else baselines[0]
            ratio = format_ratio(r.ratios[baselines[0]])
        target = ""
        if r.target is not None:
            target = f"{r.target.describe(r.unit)}: " + (
                "met" if r.verdict == "met" else "**missed**"
            )
        out.append(f"| {r.suite}: {r.name} | {value} | {baseline} | {ratio} | {target} |")
    return "\n".join(out)


def write_json(path: Path, results: Sequence[Result], options: Options) -> None:
    """Write the results (with targets and verdicts), the options and the machine to ``path``."""
    path.write_text(json.dumps(json_document(results, options), indent=2) + "\n")


def json_document(results: Sequence[Result], options: Options) -> dict[str, Any]:
    """The JSON form of a run: what `write_json` writes."""
    targets = [r for r in results if r.verdict is not None]
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "python": platform.python_version(),
        "options": {**attrs.asdict(options), "workdir": str(options.workdir)},
        "targets": {"count": len(targets), "met": sum(r.verdict == "met" for r in targets)},
        "results": [_json_result(r) for r in results],
    }


def _json_result(r: Result) -> dict[str, Any]:
    target = None
    if r.target is not None:
        target = {**attrs.asdict(r.target), "text": r.target.describe(r.unit)}
    return {
        "suite": r.suite,
        "name": r.name,
        "value": r.value,
        "unit": r.unit,
        "lower_is_better": r.lower_is_better,
        "samples": list(r.samples),
        "spread": r.spread,
        "noisy": r.noisy,
        "ratios": dict(r.ratios),
        "target": target,
        "measured": r.measured,  # what the target is checked against: a ratio, or the value
        "verdict": r.verdict,
    }
