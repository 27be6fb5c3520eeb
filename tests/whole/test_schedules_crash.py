"""A schedule's ticks across SIGKILLs: every tick starts exactly once.

A child program (tests/crash_child_schedule.py) ticks every 0.25 s in real
time and is killed with SIGKILL at a random moment, three times; a last run
ends normally. Each tick's instance writes its tick and its step's
idempotency key (which names the instance's incarnation) to a side file.
After it all: the ticks form one unbroken series (none lost: the downtime's
ticks are caught up) and each tick has one key (none started twice).
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import defaultdict
from datetime import datetime
from itertools import pairwise

import pytest

from tests.crash_kit import ROOT, kill_after_acks


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def lines(side) -> list[tuple[str, str]]:
    if not side.exists():
        return []
    return [tuple(line.split()) for line in side.read_text().split("\n")[:-1]]


@pytest.mark.slow  # real time and child processes: about ten seconds
def test_every_tick_starts_once_across_sigkills(tmp_path):
    journal, side = tmp_path / "journal", tmp_path / "ticks.txt"
    child = str(ROOT / "tests" / "crash_child_schedule.py")
    rng = random.Random()
    for round_ in range(3):
        kill_after_acks(
            [child, str(journal), str(side)],
            stderr_path=tmp_path / f"stderr{round_}.txt",
            acked=lambda: len(lines(side)),
            min_acks=len(lines(side)) + 3,
            start_timeout=30,
            delay=rng.uniform(0, 0.5),
            label="the schedule child",
        )
    done = subprocess.run(
        [sys.executable, child, str(journal), str(side), "1.5"],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    keys: dict[str, set[str]] = defaultdict(set)
    for at, key in lines(side):
        keys[at].add(key)
    assert all(len(found) == 1 for found in keys.values()), {
        at: found for at, found in keys.items() if len(found) > 1
    }
    ticks = sorted(keys, key=epoch)
    assert len(ticks) >= 12
    # One unbroken series, 0.25 s apart: none lost across the kills.
    gaps = {round(epoch(b) - epoch(a), 3) for a, b in pairwise(ticks)}
    assert gaps == {0.25}, gaps
