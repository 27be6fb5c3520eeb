"""The shared output: a plain-text table for people, JSON for machines.

The table has one row per figure (and a row under it per further baseline):
its value with its unit, its ratio to its baseline, its target, the verdict
(met, MISSED, or "noisy: rerun"). Under the figure, an indented line says
what it is for a user, and a line starting ``!`` says why not to trust it
when its samples or its baseline's spread more than 2x or its ratio is one
physics does not allow. It fits in `WIDTH` columns: the figure and baseline
names are shortened if it would not.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from ._registry import (
    NOISY_SPREAD,
    Options,
    Result,
    Verdict,
    format_number,
    format_ratio,
    format_value,
)

__all__ = [
    "WIDTH",
    "format_markdown",
    "format_ratio",
    "format_table",
    "format_value",
    "format_verdict",
    "json_document",
    "machine",
    "run_settings",
    "suite_table",
    "write_json",
]

WIDTH = 120
_GAP = "  "
_MEANING = "    "  # the indent of the line under a figure that says what it means

_VERDICTS: dict[Verdict | None, str] = {
    "met": "met",
    "missed": "MISSED",
    "noisy": "noisy: rerun",
    None: "(no baseline)",
}


def format_verdict(verdict: Verdict | None) -> str:
    """``met``, ``MISSED``, ``noisy: rerun``, or ``(no baseline)`` when the
    target's baseline was not measured."""
    return _VERDICTS[verdict]


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
    rerun = sum(r.verdict == "noisy" for r in targets)
    noisy = sum(r.noisy for r in results)
    out = [
        _fit(
            f"# {datetime.date.today().isoformat()}, python {platform.python_version()}, "
            f"on {machine()}"
        ),
        _fit(f"# {run_settings(options)}" + ("" if options.full else " (--full: the long run)")),
        (f"# targets met: {met} of {len(targets)}" if targets else "# no targets in this run")
        + (f"; too noisy to judge: {rerun} (noisy: rerun)" if rerun else ""),
        "# a row: the figure, its value, its ratio to the baseline named beside it (a median of",
        "# same-round ratios), its target and verdict; the indented line says what it is for you",
    ]
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
    """One suite's rows: figure, value with its unit, ratio to a baseline,
    target and verdict; under each figure, an indented line saying what it
    is, and a line starting ``!`` when its figures are not to be trusted."""
    header = [suite, "value", "x baseline", "target"]
    numbers = [format_number(r.value) for r in results]
    digits = max((len(n) for n in numbers), default=0)
    rows: list[list[str]] = []
    under: dict[int, list[str]] = {}  # lines that go under a row: meaning, warnings
    for r, number in zip(results, numbers, strict=True):
        baselines = r.baselines()
        target = ""
        if r.target is not None:
            op, bound = r.target.describe(r.unit).split(" ", 1)
            # ">=0.08x MISSED": narrow, and plain enough
            target = f"{op}{bound} {format_verdict(r.verdict)}"
        # Numbers right-aligned, each followed by its unit.
        value = number.rjust(digits) + ("" if r.unit.startswith("%") else " ") + r.unit
        rows.append([r.name, value, _versus(r, baselines[0]) if baselines else "", target])
        rows += [["", "", _versus(r, b), ""] for b in baselines[1:]]
        # Wrapped, never cut: these lines are what a reader needs whole.
        lines = _wrap(r.meaning, _MEANING, _MEANING + "  ") if r.meaning else []
        for warning in _warnings(r):
            lines += _wrap(warning, _MEANING + "! ", _MEANING + "  ")
        under[len(rows) - 1] = lines
    if not any(row[3] for row in rows):  # no figure has a target: no empty column
        header, rows = header[:3], [row[:3] for row in rows]
    widths = _widths(header, rows)
    # Too wide: shorten the wider of the figure and baseline columns, a
    # character at a time, down to 24 and 16 (the JSON has the names whole).
    while _excess(widths) > 0 and (widths[0] > 24 or widths[2] > 16):
        widths[0 if widths[0] - 24 >= widths[2] - 16 else 2] -= 1

    def line(row: list[str]) -> str:
        cells = []
        for cell, width in zip(row, widths, strict=False):
            if len(cell) > width:
                cell = cell[: width - 1] + "…"
            cells.append(cell.ljust(width))
        return _fit(_GAP.join(cells).rstrip())

    out = [line(header), line(["-" * w for w in widths])]
    for i, row in enumerate(rows):
        out.append(line(row))
        out += under.get(i, [])
    return out


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest)


def _warnings(r: Result) -> list[str]:
    """Why a figure is not to be trusted, if it is not: its samples spread,
    a baseline's did, or its ratio is one physics does not allow."""
    out = []
    if r.noisy:
        out.append(f"noisy: its samples spread {r.spread:.1f}x")
    out += [
        f"{b}'s samples spread {r.baseline_spreads[b]:.1f}x"
        for b in r.baselines()
        if r.noisy_baseline(b)
    ]
    if r.impossible and r.floor is not None:
        out.append(f"impossible: better than the {r.floor.baseline} it contains ({r.floor.why})")
    return out


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
    rerun = sum(r.verdict == "noisy" for r in targets)
    noisy = sum(r.noisy for r in results)
    out = [
        f"Measured {datetime.date.today().isoformat()} on {machine()}, Python "
        f"{platform.python_version()}; {run_settings(options)}. Targets met: {met} of "
        f"{len(targets)}" + (f" ({rerun} too noisy to judge)" if rerun else "") + ". "
        f"Samples of {noisy} of {len(results)} figures spread more than "
        f"{NOISY_SPREAD:g}x (marked *noisy*).",
        "",
        "| figure | value | baseline | ratio | target | what it is |",
        "|---|---|---|---|---|---|",
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
            verdict = {"met": "met", "noisy": "*noisy: rerun*"}.get(str(r.verdict), "**missed**")
            target = f"{r.target.describe(r.unit)}: {verdict}"
        out.append(
            f"| {r.suite}: {r.name} | {value} | {baseline} | {ratio} | {target} | {r.meaning} |"
        )
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
        "targets": {
            "count": len(targets),
            "met": sum(r.verdict == "met" for r in targets),
            "noisy": sum(r.verdict == "noisy" for r in targets),
        },
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
        "baseline_spreads": dict(r.baseline_spreads),
        "impossible": r.impossible,
        "meaning": r.meaning,
        "target": target,
        "measured": r.measured,  # what the target is checked against: a ratio, or the value
        "verdict": r.verdict,
    }
