"""The benchmark tool's own behaviour: targets and verdicts, the table, the
JSON, the CLI. Nothing here measures anything: the suites are fakes whose
samples are fixed numbers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import _registry
from bench.__main__ import _load_suites, main
from bench._registry import (
    Measurement,
    Options,
    Result,
    at_least,
    at_most,
    run_measurements,
)
from bench._table import WIDTH, format_markdown, format_table, json_document

OPTIONS = Options(full=False, repeats=3, seconds=0.3, workdir=Path("/tmp"))

_load_suites()  # the real suites register now, not in the middle of a test that patches one


def result(name: str = "figure", value: float = 10.0, unit: str = "msgs/s", **kw) -> Result:
    return Result(suite=kw.pop("suite", "fake"), name=name, value=value, unit=unit, **kw)


# -- targets and verdicts ---------------------------------------------------------


def test_a_rate_meets_an_at_least_target_at_or_above_the_bound() -> None:
    target = at_least(0.08, "raw")
    assert "met" == result(ratios={"raw": 0.08}, target=target).verdict
    assert "met" == result(ratios={"raw": 0.5}, target=target).verdict
    assert "missed" == result(ratios={"raw": 0.079}, target=target).verdict


def test_a_latency_meets_an_at_most_target_at_or_below_the_bound() -> None:
    target = at_most(1.3, "raw-commit")
    assert "met" == result(unit="µs", ratios={"raw-commit": 1.3}, target=target).verdict
    assert "met" == result(unit="µs", ratios={"raw-commit": 0.9}, target=target).verdict
    assert "missed" == result(unit="µs", ratios={"raw-commit": 1.31}, target=target).verdict


def test_a_target_without_baseline_is_checked_against_the_value() -> None:
    assert "met" == result(value=99.0, unit="MB", target=at_most(100)).verdict
    assert "missed" == result(value=101.0, unit="MB", target=at_most(100)).verdict
    assert "<= 100 MB" == at_most(100).describe("MB")
    assert ">= 0.08x" == at_least(0.08, "raw").describe("signals/s")


def test_a_nan_ratio_misses_and_no_target_has_no_verdict() -> None:
    assert "missed" == result(ratios={"raw": math.nan}, target=at_least(1, "raw")).verdict
    assert result(ratios={"raw": 5.0}).verdict is None
    # The target's baseline was not measured in this run: no verdict, not a false one.
    assert result(target=at_least(1, "raw")).verdict is None


def test_lower_is_better_comes_from_the_target_else_from_the_unit() -> None:
    assert result(unit="µs").lower_is_better
    assert result(unit="B").lower_is_better
    assert result(unit="MB").lower_is_better
    assert not result(unit="signals/s").lower_is_better
    assert not result(unit="µs", target=at_least(2, "x")).lower_is_better
    assert result(unit="things", target=at_most(2, "x")).lower_is_better


def test_samples_spread_more_than_2x_are_noisy() -> None:
    assert result(samples=(10.0, 20.0, 15.0)).spread == 2.0
    assert not result(samples=(10.0, 20.0, 15.0)).noisy
    assert result(samples=(10.0, 21.0, 15.0)).noisy
    assert result(samples=(10.0,)).spread is None
    assert not result(samples=(0.0, 10.0)).noisy


# -- the registry's loop -------------------------------------------------------------


def fixed(*values: float):
    """A sample function that returns ``values`` one after the other."""
    it = iter(values)
    return lambda directory, seconds: next(it)


def test_run_measurements_pairs_ratios_and_measures_the_targets_baseline(tmp_path) -> None:
    options = Options(full=False, repeats=3, seconds=0.0, workdir=tmp_path)
    results = run_measurements(
        "fake",
        [
            Measurement("ours", "msgs/s", fixed(10, 18, 20)),
            Measurement("raw", "msgs/s", fixed(100, 100, 100)),
            # Its target names a baseline it does not list: measured all the same.
            Measurement("theirs", "msgs/s", fixed(5, 6, 7), target=at_least(0.5, "ours")),
        ],
        options,
    )
    ours, _raw, theirs = results
    assert (18, (10, 18, 20)) == (ours.value, ours.samples)
    assert {"ours": 0.35} == pytest.approx(dict(theirs.ratios))
    assert "missed" == theirs.verdict
    assert not list(tmp_path.iterdir())  # every sample's directory is removed


def test_a_target_naming_no_measurement_of_the_suite_is_refused(tmp_path) -> None:
    options = Options(full=False, repeats=1, seconds=0.0, workdir=tmp_path)
    with pytest.raises(ValueError, match=r"'trio ping-pong'.*add it to the suite"):
        run_measurements(
            "fake",
            [Measurement("ask", "trips/s", fixed(1), target=at_least(0.5, "trio ping-pong"))],
            options,
        )


# -- the table and the JSON --------------------------------------------------------


def many_results() -> list[Result]:
    """A result set with the widest cells the suites produce."""
    return [
        result("raw-1000/txn", 650_587.0, "records/s", samples=(600_000.0, 700_000.0)),
        result(
            "lmdb signals -> 1000 instances",
            18_014.0,
            "signals/s",
            samples=(9_000.0, 30_000.0, 18_014.0),
            ratios={"raw-1000/txn": 0.033, "raw-commit": 4.5, "raw-scattered": 0.2},
            target=at_least(0.08, "raw-1000/txn"),
            meaning="durable messages",
        ),
        result(
            "cascade-cancel 2,550 descendants",
            275.0,
            "ms",
            ratios={"nursery-cancel 2,500": 5.7},
            target=at_most(3, "nursery-cancel 2,500"),
        ),
        result("spawn tree of 2,550", 234_567.0, "instances/s", samples=(1.0, 9.0)),
        result("100,000 passivated: RSS", 101.0, "MB", target=at_most(100)),
        result("cpu node A (2 nodes)", 97.5, "% of a core", suite="postgres"),
    ]


def test_the_table_fits_in_120_columns() -> None:
    table = format_table(many_results(), OPTIONS)
    widest = max(table.splitlines(), key=len)
    assert len(widest) <= WIDTH == 120, widest
    assert "…" not in table  # nothing had to be shortened


def test_names_too_long_for_120_columns_are_shortened() -> None:
    long_name = "a figure with a name far longer than any suite uses today, at N=1,000,000"
    long_baseline = "a baseline with a long name as well, and a longer one"
    extreme = [
        *many_results(),
        result(
            long_name,
            1_234_567_890.0,
            "instances/s",
            samples=(1.0, 9.0),
            ratios={long_baseline: 0.5},
            target=at_least(10_000, long_baseline),
        ),
    ]
    lines = format_table(extreme, OPTIONS).splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    row = next(line for line in lines if line.startswith("a figure with"))
    assert "…" in row and row.endswith(">=10000x noisy: rerun")
    # The warning is whole, on the line under the figure.
    assert "    ! noisy: its samples spread 9.0x" == lines[lines.index(row) + 1]


def test_each_figure_row_shows_value_ratio_baseline_target_and_verdict() -> None:
    lines = format_table(many_results(), OPTIONS).splitlines()
    row = next(line for line in lines if line.startswith("lmdb signals -> 1000 instances"))
    cells = ["18,014", "signals/s", "0.033x", "raw-1000/txn", ">=0.08x", "noisy:", "rerun"]
    # Its samples spread 3.3x: the verdict says rerun, not missed (nor met).
    assert cells == row.split()[5:]
    # Further baselines get rows of their own under the figure, then what it
    # means, then why not to trust it.
    at = lines.index(row)
    assert "4.50x raw-commit" in lines[at + 1] and not lines[at + 1].startswith("lmdb")
    assert "0.20x raw-scattered" in lines[at + 2]
    assert ["    durable messages", "    ! noisy: its samples spread 3.3x"] == lines[
        at + 3 : at + 5
    ]
    latency = next(line for line in lines if line.startswith("cascade-cancel"))
    assert "5.70x nursery-cancel 2,500  <=3x MISSED" in latency
    memory = next(line for line in lines if line.startswith("100,000 passivated: RSS"))
    assert "101 MB" in memory and "<=100 MB MISSED" in memory
    spawn = next(line for line in lines if line.startswith("spawn tree"))
    assert "234,567 instances/s" in spawn  # the unit is in the table, not only on stderr


def test_the_heading_carries_the_settings_and_the_count_of_targets_met() -> None:
    table = format_table(many_results(), OPTIONS)
    assert "median of 3 samples of 0.3 s each" in table
    assert "targets met: 0 of 3; too noisy to judge: 1 (noisy: rerun)" in table
    assert "noisy: 2 figure(s)" in table


def test_the_json_carries_targets_verdicts_and_noise() -> None:
    document = json.loads(json.dumps(json_document(many_results(), OPTIONS)))
    assert {"count": 3, "met": 0, "noisy": 1} == document["targets"]
    signals = next(r for r in document["results"] if r["name"].startswith("lmdb signals"))
    assert {"op": ">=", "bound": 0.08, "baseline": "raw-1000/txn", "text": ">= 0.08x"} == (
        signals["target"]
    )
    assert ("noisy", 0.033, True, False) == (
        signals["verdict"],
        signals["measured"],
        signals["noisy"],
        signals["lower_is_better"],
    )
    raw = document["results"][0]
    assert (None, None) == (raw["target"], raw["verdict"])


# -- the command line --------------------------------------------------------------


def test_plot_without_matplotlib_exits_2_before_running_anything(
    monkeypatch, tmp_path, capsys
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails

    def must_not_run(options: Options) -> list[Result]:
        raise AssertionError("a suite ran although --plot cannot draw")

    monkeypatch.setitem(_registry.SUITES, "journal", must_not_run)
    chart = tmp_path / "chart.png"
    with pytest.raises(SystemExit) as exc:
        main(["journal", "--plot", str(chart)])
    assert 2 == exc.value.code
    out, err = capsys.readouterr()
    assert "" == out
    assert "--plot needs matplotlib" in err and "pip install -e '.[plot]'" in err
    assert not chart.exists()


@pytest.fixture
def fake_suite(monkeypatch):
    """A suite named ``fake`` whose figures take no time; the options it got."""
    seen: list[Options] = []

    def fake(options: Options) -> list[Result]:
        seen.append(options)
        return run_measurements(
            "fake",
            [
                Measurement("trio ping-pong", "round trips/s", lambda d, s: 1000.0),
                # A figure declares its target in one line.
                Measurement(
                    "ask",
                    "round trips/s",
                    lambda d, s: 600.0,
                    target=at_least(0.5, "trio ping-pong"),
                ),
                Measurement("p50", "µs", lambda d, s: 900.0, ("raw",), at_most(1.3, "raw")),
                Measurement("raw", "µs", lambda d, s: 600.0),
            ],
            options,
        )

    monkeypatch.setitem(_registry.SUITES, "fake", fake)
    return seen


def test_the_default_run_is_the_short_one_and_full_the_long_one(
    fake_suite, tmp_path, capsys
) -> None:
    assert 0 == main(["fake", "--dir", str(tmp_path)])
    assert 0 == main(["fake", "--quick", "--dir", str(tmp_path)])
    assert 0 == main(["fake", "--full", "--repeats", "2", "--dir", str(tmp_path)])
    default, quick, full = fake_suite
    assert (False, 3, 0.3) == (default.full, default.repeats, default.seconds)
    assert default == quick
    assert (True, 2, 1.0) == (full.full, full.repeats, full.seconds)
    with pytest.raises(SystemExit):
        main(["fake", "--quick", "--full"])


def test_the_cli_prints_verdicts_and_writes_them_to_json(fake_suite, tmp_path, capsys) -> None:
    path = tmp_path / "run.json"
    assert 0 == main(["fake", "--json", str(path), "--dir", str(tmp_path)])
    out, err = capsys.readouterr()
    ask = next(line for line in out.splitlines() if line.startswith("ask "))
    assert ["600", "round", "trips/s", "0.60x", "trio", "ping-pong", ">=0.5x", "met"] == (
        ask.split()[1:]
    )
    p50 = next(line for line in out.splitlines() if line.startswith("p50 "))
    assert ["900", "µs", "1.50x", "raw", "<=1.3x", "MISSED"] == p50.split()[1:]
    assert "targets met: 1 of 2" in out
    # A progress line per figure, with its verdict.
    assert "fake: ask: 600 round trips/s, 0.60x (target >= 0.5x: met)" in err
    document = json.loads(path.read_text())
    assert ["met", "missed"] == [
        r["verdict"] for r in document["results"] if r["verdict"] is not None
    ]


def test_plot_draws_a_png_of_a_result_set(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from bench._plot import plot

    chart = tmp_path / "chart.png"
    plot(chart, many_results(), OPTIONS)
    assert chart.read_bytes().startswith(b"\x89PNG")


def test_markdown_has_a_row_per_figure_but_the_baselines() -> None:
    lines = format_markdown(many_results(), OPTIONS).splitlines()
    assert "median of 3 samples of 0.3 s each" in lines[0]
    assert "Targets met: 0 of 3" in lines[0]
    rows = [line for line in lines if line.startswith("| fake: ")]
    # raw-1000/txn is a baseline: its value is in the baseline column, not in a row.
    assert [
        "| fake: lmdb signals -> 1000 instances | 18,014 signals/s *noisy* | raw-1000/txn "
        "650,587 records/s | 0.033x | >= 0.08x: *noisy: rerun* | durable messages |",
        "| fake: cascade-cancel 2,550 descendants | 275 ms | nursery-cancel 2,500 | 5.70x "
        "| <= 3x: **missed** |  |",
        "| fake: spawn tree of 2,550 | 234,567 instances/s *noisy* |  |  |  |  |",
        "| fake: 100,000 passivated: RSS | 101 MB |  |  | <= 100 MB: **missed** |  |",
    ] == rows


def test_python_m_bench_plot_without_matplotlib_exits_2(tmp_path) -> None:
    # As a user runs it: the module as a program, with matplotlib unimportable.
    code = (
        "import runpy, sys; sys.modules['matplotlib'] = None; "
        "sys.argv = ['bench', '--plot', sys.argv[1]]; "
        "runpy.run_module('bench', run_name='__main__')"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "chart.png")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (2, "") == (done.returncode, done.stdout)
    assert "install it with:\n    pip install -e '.[plot]'" in done.stderr
