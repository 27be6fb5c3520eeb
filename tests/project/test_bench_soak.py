"""``python -m bench soak``: the soak runs, samples and judges (a short run
with a tiny interval, so that the command cannot rot), and its verdict
says what it should of made-up samples."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path

import pytest
import trio

from bench import soak
from bench.__main__ import main as bench_main
from bench.soak import Sample, judge


def _sample(at: float, anon: float = 100.0, fds: int = 20, p99: float = 2.0) -> Sample:
    return Sample(at, anon + 20, anon, fds, 1.0, 1000, 10, 1, 1, 0, 10, 1.0, p99)


def test_a_short_soak_samples_every_interval_and_judges(tmp_path, capsys):
    out = tmp_path / "soak.json"
    status = bench_main(
        ["soak", "--seconds", "2", "--interval", "0.25", "--json", str(out), "--dir", str(tmp_path)]
    )
    assert 0 == status
    document = json.loads(out.read_text())
    samples = [Sample(**s) for s in document["samples"]]
    assert 8 == len(samples)
    # One sample per interval, in order, none before its time (how late one
    # is depends on the machine, not on the soak: no bound on that).
    times = [s.at for s in samples]
    assert times == sorted(times)
    assert all(at >= 0.25 * (n + 1) - 1e-3 for n, at in enumerate(times)), times
    for s in samples:
        assert s.rss_mb > s.anon_mb > 10 and s.fds > 3 and s.journal_mb > 0 and s.objects > 1000
    # Every kind of operation ran: sends, asks, awaited results.
    assert sum(s.sends for s in samples) > 0
    assert sum(s.asks for s in samples) > 0
    assert sum(s.results for s in samples) > 0
    measured = [s for s in samples if s.latencies]
    assert measured and all(0 < s.p50_ms <= s.p99_ms for s in measured)
    verdict = document["verdict"]
    assert set(verdict) == {
        "memory_growth",
        "memory_flat",
        "p99_ratio",
        "p99_steady",
        "fd_growth",
        "fds_flat",
    }
    assert verdict["memory_flat"] in (True, False) and verdict["fds_flat"] in (True, False)
    assert all(entry["count"] > 0 for entry in document["grown"])
    printed = capsys.readouterr().out
    assert "memory flat after warm-up:" in printed and "p99 steady:" in printed
    assert "objects that grew after warm-up:" in printed
    assert not list(tmp_path.glob("bench-soak-*")), "the journal's directory is removed"
    # What the verdict read of the latencies is pooled, not kept one by one.
    run = trio.run(soak.soak, soak.SoakOptions(seconds=1, interval=0.25, workdir=tmp_path))
    pooled = run.latencies
    assert isinstance(pooled, soak.Quarters)
    assert sum(run.samples[i].latencies for i in pooled.second_samples) == pooled.second.total
    assert sum(run.samples[i].latencies for i in pooled.last_samples) == pooled.last.total


def test_flat_samples_pass_every_judgement():
    samples = [_sample(t) for t in range(8)]
    verdict = judge(samples, [[0.001, 0.002]] * 8)
    assert (0.0, True, 1.0, True, 0, True) == (
        verdict.memory_growth,
        verdict.memory_flat,
        verdict.p99_ratio,
        verdict.p99_steady,
        verdict.fd_growth,
        verdict.fds_flat,
    )


def test_growth_after_warm_up_fails_its_judgement():
    # 100 MB anonymous at the end of warm-up (the first quarter), 110 at the end.
    anon = [90, 100, 102, 104, 105, 106, 108, 110]
    samples = [_sample(t, anon=r, fds=20 + (t >= 6)) for t, r in enumerate(anon)]
    latencies = [[0.001]] * 6 + [[0.001, 0.003]] * 2  # the last quarter's p99 is 3x
    verdict = judge(samples, latencies)
    assert verdict.memory_growth == pytest.approx(0.10)
    assert (False, False, False) == (verdict.memory_flat, verdict.p99_steady, verdict.fds_flat)
    assert verdict.p99_ratio == pytest.approx(3.0)
    assert 1 == verdict.fd_growth


def test_growth_during_warm_up_is_not_judged():
    anon = [50, 100, 101, 101, 102, 102, 103, 104]
    verdict = judge([_sample(t, anon=r) for t, r in enumerate(anon)], [[0.001]] * 8)
    assert verdict.memory_flat is True


def test_too_few_samples_say_so():
    verdict = judge([_sample(t) for t in range(3)], [[0.001]] * 3)
    assert verdict.memory_flat is None and verdict.p99_steady is None
    assert "too few samples" in soak.describe(verdict)[0]


def test_the_percentile_is_the_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (50.0, 99.0, 100.0) == tuple(soak.percentile(values, f) for f in (0.5, 0.99, 1.0))
    assert math.isnan(soak.percentile([], 0.99))


def test_a_tally_gives_the_nearest_rank_percentile_within_one_percent():
    rng = random.Random(5)
    values = [rng.lognormvariate(-5, 1.5) for _ in range(20_000)] + [0.0, 20_000.0]
    tally = soak.Tally()
    tally.add(values)
    for fraction in (0.01, 0.5, 0.9, 0.99, 0.999):
        exact = soak.percentile(values, fraction)
        assert tally.percentile(fraction) == pytest.approx(exact, rel=0.01)
    assert 20_000.0 == tally.percentile(1.0)  # past the last bucket: still the largest
    assert math.isnan(soak.Tally().percentile(0.99))


def test_a_tally_stays_the_same_size_however_many_it_counts():
    # A soak's memory verdict reads the bench's own process: what it keeps
    # of the latencies must not grow with the run (a list of all of them
    # grew ~0.5 MB a minute, read as a leak).
    tally = soak.Tally()
    size = tally.counts.buffer_info(), tally.largest.buffer_info()
    for _ in range(20):
        tally.add([0.001 * n for n in range(1, 5_000)])
    assert size == (tally.counts.buffer_info(), tally.largest.buffer_info())
    assert 20 * 4_999 == tally.total


def test_quarters_pool_the_second_and_last_quarters_only():
    quarters = soak.Quarters.of([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]])
    assert (2, 2) == (quarters.second.total, quarters.last.total)
    assert (4.0, 8.0) == (quarters.second.percentile(1.0), quarters.last.percentile(1.0))


def test_the_census_names_the_types_that_grew_most():
    before = Counter({"a.Kept": 5, "a.Grew": 1, "a.Shrank": 9})
    after = Counter({"a.Kept": 5, "a.Grew": 4, "a.Shrank": 2, "a.New": 2})
    assert [("a.Grew", 3), ("a.New", 2)] == soak.grown(before, after)
    # A census counts live objects by type: what this test holds is there.
    held = [_Marker() for _ in range(50)]
    assert soak.census()[f"{__name__}._Marker"] == len(held)


class _Marker:
    pass


def test_plot_without_matplotlib_says_how_to_install_before_running(monkeypatch, capsys):
    monkeypatch.setattr(soak.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as exited:
        soak.main(["--seconds", "60", "--plot", "soak.png"])
    assert 2 == exited.value.code
    assert "pip install -e '.[plot]'" in capsys.readouterr().err


def test_the_plot_draws_the_samples(tmp_path: Path):
    pytest.importorskip("matplotlib")
    from bench import _soak_plot

    samples = [_sample(t, anon=100 + t) for t in range(8)]
    path = tmp_path / "soak.png"
    _soak_plot.plot(path, samples, judge(samples, [[0.001]] * 8))
    assert path.read_bytes().startswith(b"\x89PNG")
