"""``python -m bench soak --plot PATH``: the soak's samples over time, a PNG.

Four panels sharing the time axis: resident and anonymous memory (and the objects the
collector tracks, on a second axis), open file descriptors, the journal's
size on disk, and the p50/p99 send-to-resumed latency of each interval.
The warm-up (the first quarter, not judged) is shaded; the title carries
the verdict. Needs matplotlib (``pip install -e '.[plot]'``);
`bench.soak.main` checks for it before the load runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from .soak import Sample, Verdict, describe

__all__ = ["plot"]


def plot(path: Path, samples: Sequence[Sample], verdict: Verdict) -> None:
    """Draw ``samples`` to ``path`` (PNG), the verdict as the title."""
    figure, (memory, fds, journal, latency) = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    times = [s.at for s in samples]
    memory.plot(times, [s.rss_mb for s in samples], color="#1f77b4", label="RSS")
    memory.plot(times, [s.anon_mb for s in samples], color="#17becf", label="anonymous")
    memory.set_ylabel("memory (MB)")
    memory.legend(loc="upper left", fontsize=8)
    objects = memory.twinx()
    objects.plot(times, [s.objects for s in samples], color="#ff7f0e", linestyle="--")
    objects.set_ylabel("objects tracked by gc (dashed)")
    fds.plot(times, [s.fds for s in samples], color="#2ca02c", drawstyle="steps-post")
    fds.set_ylabel("open fds")
    journal.plot(times, [s.journal_mb for s in samples], color="#9467bd")
    journal.set_ylabel("journal on disk (MB)")
    latency.plot(times, [s.p50_ms for s in samples], label="p50")
    latency.plot(times, [s.p99_ms for s in samples], label="p99")
    latency.set_ylabel("send to resumed (ms, log)")
    latency.set_yscale("log")
    latency.set_xlabel("seconds since the load began")
    latency.legend(loc="upper left", fontsize=8)
    if len(samples) >= 4:
        warm = samples[len(samples) // 4 - 1].at
        for axes in (memory, fds, journal, latency):
            axes.axvspan(0, warm, color="#eeeeee", zorder=0)
            axes.grid(color="#dddddd", linewidth=0.5)
    figure.suptitle(
        "python -m bench soak (shaded: warm-up)\n" + "\n".join(describe(verdict)), fontsize=9
    )
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
