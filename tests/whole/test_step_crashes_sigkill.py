"""A crash is not a step failure, with real SIGKILLs: the step of
tests/crash_child_step_crash.py kills its own process; the test runs the
program again after each kill, as a supervisor (systemd, Kubernetes)
restarts a crashed service.

- Killed in its first attempt, a step without ``retry=`` runs again after
  the restart, under the same idempotency key, and the process completes.
- Killing its host on every attempt, it runs ``crashes + 1`` times (the
  default budget, 3), then the instance is parked stuck: a restart no
  longer runs it (the program does not crash-loop), and ``system.retry``,
  once the step is fixed, resumes it under the same key.

An ``at_most_once=True`` step keeps failing at a crash:
tests/whole/test_retry_crash.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.crash_kit import ROOT

CHILD = ROOT / "tests" / "crash_child_step_crash.py"
KEY = "crashy/x/1/0/charge/1"


def _run(tmp_path: Path, mode: str, *extra: str) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    args = [str(tmp_path / "journal"), str(tmp_path / "side"), str(tmp_path / "out"), mode]
    with open(tmp_path / "stderr", "ab") as stderr:
        done = subprocess.run(
            [sys.executable, str(CHILD), *args, *extra],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            timeout=60,
        )
    return done.returncode


def _until_it_exits(tmp_path: Path, mode: str, most: int) -> int:
    """Run the program again after each kill until it exits by itself; the kills."""
    for kills in range(most + 1):
        code = _run(tmp_path, mode)
        if code == 0:
            return kills
        assert -signal.SIGKILL == code, (tmp_path / "stderr").read_text()
    raise AssertionError(f"still crashing after {most} restarts")


def _side(tmp_path: Path) -> list[str]:
    return (tmp_path / "side").read_text().splitlines()


@pytest.mark.slow  # one interpreter per crash: about a second each
def test_a_sigkill_in_a_step_without_retry_runs_it_again_and_the_process_completes(tmp_path):
    assert 1 == _until_it_exits(tmp_path, "once", 3)
    assert [f"{KEY} 1", f"{KEY} 2"] == _side(tmp_path)  # twice, under one key
    assert f"completed {KEY}" == (tmp_path / "out").read_text()


@pytest.mark.slow  # one interpreter per crash: about a second each
def test_a_step_that_kills_its_host_every_time_parks_it_and_retry_resumes_it(tmp_path):
    assert 4 == _until_it_exits(tmp_path, "always", 8)  # the default crash budget: 3
    assert [f"{KEY} {n}" for n in range(1, 5)] == _side(tmp_path)
    out = (tmp_path / "out").read_text()
    assert out.startswith("stuck crash budget spent by step 'charge'\n"), out
    assert "cut short by a crash 4 time(s), past its crash budget of 3" in out
    # The WARNING (printed by logging's last resort: the program sets no handler).
    warning = "instance 'crashy/x' is stuck (crash budget spent by step 'charge')"
    assert warning in (tmp_path / "stderr").read_text()
    # A restart keeps it parked: nothing runs, nothing crashes.
    assert 0 == _run(tmp_path, "always")
    assert 4 == len(_side(tmp_path))
    # Fixed, and resumed by the operator: the step runs again under its key.
    with open(tmp_path / "side", "a") as f:
        f.write("fixed\n")
    assert 0 == _run(tmp_path, "always", "retry"), (tmp_path / "stderr").read_text()
    assert f"completed {KEY}" == (tmp_path / "out").read_text()
    assert f"{KEY} 5" == _side(tmp_path)[-1]
