"""A verdict the bench must never give: "met" from a noisy run, or from a
ratio physics does not allow; and what every figure of the real suites
declares (a meaning for the reader, a baseline that fits). Nothing here
measures: samples are fixed numbers, and the suites run with a registry
loop that records what they declare instead of timing it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import attrs
import pytest

import bench.asks
import bench.journal
import bench.queues
import bench.runtime
from bench._registry import (
    Measurement,
    Options,
    Result,
    at_least,
    at_most,
    contains,
    run_measurements,
)
from bench._table import format_markdown, format_table, json_document

OPTIONS = Options(full=False, repeats=3, seconds=0.3, workdir=Path("/tmp"))
SENDS_COMMIT = contains("raw-commit", "a durable send waits for one synced commit")


def latency(ratio: float, **kw) -> Result:
    """``send->resumed p50`` at ``ratio`` times raw-commit, with its floor."""
    return Result(
        suite="runtime",
        name="send->resumed p50",
        value=559.0,
        unit="µs",
        samples=kw.pop("samples", (550.0, 559.0, 570.0)),
        ratios={"raw-commit": ratio},
        target=at_most(1.3, "raw-commit"),
        floor=SENDS_COMMIT,
        **kw,
    )


def fixed(*values: float):
    it = iter(values)
    return lambda directory, seconds: next(it)


# -- the verdict ----------------------------------------------------------------------


def test_a_durable_send_faster_than_the_commit_it_contains_is_noisy_not_met() -> None:
    # The run that prompted this: p50 559 µs at 0.41x raw-commit, once "met".
    send = latency(0.41)
    assert send.impossible
    assert "noisy" == send.verdict
    # At or above the commit it contains, the target decides.
    assert (False, "met") == (latency(1.0).impossible, latency(1.0).verdict)
    assert (False, "met") == (latency(1.25).impossible, latency(1.25).verdict)
    assert (False, "missed") == (latency(1.4).impossible, latency(1.4).verdict)


def test_a_rate_above_the_commits_it_contains_is_impossible() -> None:
    one_writer = Result(
        suite="journal",
        name="journal 1 writer",
        value=5_000.0,
        unit="appends/s",
        samples=(4_900.0, 5_000.0, 5_100.0),
        ratios={"raw-commit": 1.2},
        target=at_least(0.9, "raw-commit"),
        floor=contains("raw-commit", "an append waits for a synced commit"),
    )
    assert one_writer.impossible and "noisy" == one_writer.verdict
    fair = attrs.evolve(one_writer, ratios={"raw-commit": 0.95})
    assert (False, "met") == (fair.impossible, fair.verdict)
    # Twice the work (two commits): a rate above half the commits' is impossible.
    double = contains("raw-commit", "two commits", times=2.0)
    assert not double.allows(0.6, lower_is_better=False)
    assert double.allows(0.5, lower_is_better=False)
    assert not double.allows(1.9, lower_is_better=True)


def test_a_nan_ratio_is_missed_not_impossible() -> None:
    send = latency(math.nan)
    assert (False, "missed") == (send.impossible, send.verdict)


def test_a_baseline_whose_samples_spread_more_than_2x_makes_the_verdict_noisy() -> None:
    # The figure's own samples are steady; raw-commit's spread 2.6x.
    send = latency(1.2, baseline_spreads={"raw-commit": 2.6})
    assert (False, True) == (send.noisy, send.noisy_baseline("raw-commit"))
    assert "noisy" == send.verdict
    # A spread of exactly 2x is not noisy.
    assert "met" == latency(1.2, baseline_spreads={"raw-commit": 2.0}).verdict
    # A noisy baseline that the target is not about leaves the verdict alone.
    other = latency(1.2, baseline_spreads={"raw-commit": 1.1, "trio-channel": 9.0})
    assert "met" == other.verdict


def test_a_figure_whose_own_samples_spread_more_than_2x_is_noisy_met_or_not() -> None:
    assert "noisy" == latency(1.0, samples=(300.0, 559.0, 700.0)).verdict
    assert "noisy" == latency(2.0, samples=(300.0, 559.0, 700.0)).verdict
    # A target on the value itself (no baseline) too.
    rss = Result(
        suite="runtime",
        name="RSS",
        value=90.0,
        unit="MB",
        samples=(40.0, 90.0, 95.0),
        target=at_most(100),
    )
    assert "noisy" == rss.verdict


def test_run_measurements_records_baseline_spreads_and_judges_them(tmp_path) -> None:
    options = Options(full=False, repeats=3, seconds=0.0, workdir=tmp_path)
    send, commit = run_measurements(
        "fake",
        [
            Measurement(
                "send p50",
                "µs",
                fixed(500, 559, 540),
                target=at_most(1.3, "raw-commit"),
                floor=SENDS_COMMIT,
                meaning="one send",
            ),
            # A slow spell in the middle round: 3x spread.
            Measurement("raw-commit", "µs", fixed(400, 1_200, 420)),
        ],
        options,
    )
    assert {"raw-commit": pytest.approx(3.0)} == send.baseline_spreads
    assert "raw-commit" in send.ratios  # the floor's baseline is measured as a baseline
    assert ("noisy", "one send") == (send.verdict, send.meaning)
    assert commit.noisy and commit.verdict is None


def test_the_floor_names_a_baseline_that_is_measured_even_if_not_listed(tmp_path) -> None:
    options = Options(full=False, repeats=1, seconds=0.0, workdir=tmp_path)
    (send, _) = run_measurements(
        "fake",
        [
            Measurement("send", "µs", fixed(100), floor=SENDS_COMMIT),
            Measurement("raw-commit", "µs", fixed(250)),
        ],
        options,
    )
    assert ({"raw-commit": 0.4}, True, None) == (dict(send.ratios), send.impossible, send.verdict)


# -- what the reader sees -----------------------------------------------------------


def readers_set() -> list[Result]:
    commit = Result(
        suite="runtime",
        name="raw-commit",
        value=1_360.0,
        unit="µs",
        samples=(190.0, 1_360.0, 1_400.0),
        meaning="one synced commit",
    )
    return [commit, latency(0.41, meaning="one message to a waiting process")]


def test_the_table_says_noisy_rerun_and_why_never_met() -> None:
    lines = format_table(readers_set(), OPTIONS).splitlines()
    row = next(line for line in lines if line.startswith("send->resumed p50"))
    assert ["559", "µs", "0.41x", "raw-commit", "<=1.3x", "noisy:", "rerun"] == row.split()[2:]
    at = lines.index(row)
    assert "    one message to a waiting process" == lines[at + 1]
    assert (
        "    ! impossible: better than the raw-commit it contains "
        "(a durable send waits for one synced commit)"
    ) == lines[at + 2]
    assert "targets met: 0 of 1; too noisy to judge: 1 (noisy: rerun)" in "\n".join(lines)
    assert not any(line.rstrip().endswith(" met") for line in lines)


def test_every_value_in_the_table_carries_its_unit() -> None:
    results = [
        Result(suite="s", name=name, value=value, unit=unit)
        for name, value, unit in [
            ("process", 5_657.0, "processes/s"),
            ("signals", 34_138.0, "signals/s"),
            ("latency", 259.0, "µs"),
            ("memory", 8_081.0, "B"),
            ("cpu", 97.5, "% of a core"),
        ]
    ]
    rows = {line.split("  ")[0]: line for line in format_table(results, OPTIONS).splitlines()}
    assert "5,657 processes/s" in rows["process"]
    assert "34,138 signals/s" in rows["signals"]
    assert "259 µs" in rows["latency"]
    assert "8,081 B" in rows["memory"]
    assert "97.5% of a core" in rows["cpu"]


def test_a_suite_without_targets_has_no_target_column() -> None:
    results = [
        Result(suite="peers", name="DBOS 1-step", value=30.0, unit="workflows/s"),
        Result(
            suite="peers",
            name="ours 1-step",
            value=60.0,
            unit="processes/s",
            ratios={"DBOS 1-step": 2.0},
        ),
    ]
    table = format_table(results, OPTIONS).splitlines()
    header = next(line for line in table if line.startswith("peers"))
    assert ["peers", "value", "x", "baseline"] == header.split()
    assert "no targets in this run" in table[2]


def test_markdown_and_json_carry_the_meaning_and_the_noisy_verdict() -> None:
    markdown = format_markdown(readers_set(), OPTIONS)
    assert (
        "| runtime: send->resumed p50 | 559 µs | raw-commit 1,360 µs | 0.41x "
        "| <= 1.3x: *noisy: rerun* | one message to a waiting process |"
    ) in markdown.splitlines()
    assert "Targets met: 0 of 1 (1 too noisy to judge)" in markdown
    document = json.loads(json.dumps(json_document(readers_set(), OPTIONS)))
    send = document["results"][1]
    assert ("noisy", True, "one message to a waiting process") == (
        send["verdict"],
        send["impossible"],
        send["meaning"],
    )
    assert {"count": 1, "met": 0, "noisy": 1} == document["targets"]


# -- what the real suites declare ----------------------------------------------------


@pytest.fixture
def declared(monkeypatch) -> list[Measurement]:
    """The measurements the real suites declare, recorded instead of run
    (each gets a result of 1.0, so the suites can sort and finish)."""
    seen: list[Measurement] = []

    def record(suite_name: str, measurements, options) -> list[Result]:
        seen.extend(measurements)
        return [Result(suite=suite_name, name=m.name, value=1.0, unit=m.unit) for m in measurements]

    for module in (bench.journal, bench.runtime, bench.asks, bench.queues):
        monkeypatch.setattr(module, "run_measurements", record)
    for fn in (
        bench.journal.journal_suite,
        bench.runtime.runtime_suite,
        bench.asks.ask_suite,
        bench.queues.queues_suite,
    ):
        fn(OPTIONS)
    return seen


def test_every_figure_of_the_suites_says_what_it_means(declared) -> None:
    assert len(declared) > 40
    assert [] == [m.name for m in declared if not m.meaning]


def test_processes_are_read_against_commits_or_each_other_not_batched_records(declared) -> None:
    # "process, 1 sync step ... 0.004x raw-1000/txn" meant nothing: a process
    # is read against one synced commit at a time, or against the async step.
    processes = [m for m in declared if m.unit == "processes/s"]
    assert len(processes) >= 5
    for m in processes:
        assert set(m.all_baselines()) <= {
            "raw-commits/s",
            "process, 1 async step",
            "process, 1 async step, 100 at a time",
        }, m.name


def test_journal_appends_are_read_against_commits_and_their_own_access_pattern(
    declared,
) -> None:
    writers = {m.name: m.all_baselines() for m in declared if m.unit == "appends/s"}
    assert ("raw-commit",) == writers.pop("journal 1 writer")
    assert {("raw-commit", "raw-scattered")} == set(writers.values())


def test_latencies_that_contain_a_commit_declare_it(declared) -> None:
    floors = {m.name: m.floor.baseline for m in declared if m.floor is not None}
    assert "raw-commit" == floors["send->resumed p50"] == floors["send->resumed p99"]
    assert "raw-commit" == floors["lmdb ask round trip p50"] == floors["journal 1 writer"]


# -- the peers suite: DBOS beside ours -------------------------------------------------


def test_peers_without_dbos_says_which_pip_command_installs_it(monkeypatch, capsys) -> None:
    from bench import _registry
    from bench.__main__ import main

    monkeypatch.setitem(sys.modules, "dbos", None)  # import dbos fails

    def must_not_run(options: Options) -> list[Result]:
        raise AssertionError("a suite ran although DBOS is missing")

    monkeypatch.setitem(_registry.SUITES, "peers", must_not_run)
    monkeypatch.setitem(_registry.SUITES, "journal", must_not_run)
    with pytest.raises(SystemExit) as exc:
        main(["journal", "peers"])
    assert 2 == exc.value.code
    out, err = capsys.readouterr()
    assert "" == out
    assert "DBOS is not installed" in err and "pip install -e '.[peers]'" in err


def test_the_default_run_leaves_out_postgres_and_peers(monkeypatch, tmp_path, capsys) -> None:
    from bench import _registry
    from bench.__main__ import main

    ran: list[str] = []
    for name in list(_registry.SUITES):
        monkeypatch.setitem(
            _registry.SUITES, name, lambda options, name=name: ran.append(name) or []
        )
    assert 0 == main(["--dir", str(tmp_path)])
    assert {"journal", "runtime", "ask", "queues", "signals"} == set(ran)


def test_peers_pairs_each_of_our_shapes_with_dbos_and_reads_ours_against_it(
    monkeypatch,
) -> None:
    pytest.importorskip("dbos")
    import bench.peers

    seen: list[Measurement] = []

    def record(suite_name: str, measurements, options) -> list[Result]:
        seen.extend(measurements)
        return []

    monkeypatch.setattr(bench.peers, "run_measurements", record)
    bench.peers.peers_suite(OPTIONS)
    ours = {m.name: m for m in seen if m.name.startswith("ours ")}
    dbos = {m.name for m in seen if m.name.startswith("DBOS ")}
    assert {
        "ours 1-step, sequential",
        "ours 1-step, 100 at once",
        "ours 10-step, sequential",
        "ours 10-step, 100 at once",
        "ours send->resumed p50",
        "ours send->resumed p99",
    } == set(ours)
    for m in ours.values():
        # The ratio is ours/DBOS: each figure of ours is read against DBOS's same shape.
        assert 1 == len(m.baselines) and m.baselines[0] in dbos, m.name
    assert [] == [m.name for m in seen if not m.meaning]
