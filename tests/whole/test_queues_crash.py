"""A queue's limit across SIGKILLs: never more than its concurrency at once.

A child program (tests/crash_child_queue.py) runs 60 jobs through a queue
of concurrency 3 and is killed with SIGKILL at a random moment, twice; a
last run finishes them. Each job's step writes when it begins and ends; a
step cut off by a kill ends at the kill. Over every run and the restarts
between them, at most 3 steps ever overlap, and every job completes.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from tests.crash_kit import ROOT, kill_after_acks


def events(side) -> list[tuple[str, str, float]]:
    if not side.exists():
        return []
    return [
        (kind, name, float(at))
        for kind, name, at in (line.split() for line in side.read_text().split("\n")[:-1])
    ]


@pytest.mark.slow  # real time and child processes: about ten seconds
def test_a_queue_never_exceeds_its_concurrency_across_sigkills(tmp_path):
    journal, side = tmp_path / "journal", tmp_path / "steps.txt"
    child = str(ROOT / "tests" / "crash_child_queue.py")
    rng = random.Random()
    kills: list[float] = []
    for round_ in range(2):
        kill_after_acks(
            [child, str(journal), str(side)],
            stderr_path=tmp_path / f"stderr{round_}.txt",
            acked=lambda: sum(kind == "E" for kind, _, _ in events(side)),
            min_acks=sum(kind == "E" for kind, _, _ in events(side)) + 6,
            start_timeout=30,
            delay=rng.uniform(0, 0.3),
            label="the queue child",
        )
        kills.append(time.time())
    done = subprocess.run(
        [sys.executable, child, str(journal), str(side)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    # Each step's interval: from its S to its E, or to the kill that cut it off.
    open_steps: dict[str, float] = {}
    intervals: list[tuple[float, float]] = []
    for kind, name, at in sorted(events(side), key=lambda e: e[2]):
        for kill in kills:  # steps still open at a kill ended with it
            if open_steps and at > kill >= max(open_steps.values()):
                intervals += [(start, kill) for start in open_steps.values()]
                open_steps.clear()
        if kind == "S":
            open_steps[name] = at
        else:
            intervals.append((open_steps.pop(name), at))
    assert not open_steps
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    assert most <= 3
    assert most >= 2  # the slots were used: the bound is not met by running one at a time
    finished = {name for kind, name, _ in events(side) if kind == "E"}
    assert finished == {f"j{i}" for i in range(60)}
