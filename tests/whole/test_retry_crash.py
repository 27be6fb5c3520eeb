"""The retry budget across real crashes, for a step made with
``at_most_once=True`` (a crash spends an attempt, as before crashes had a
budget of their own; the default is tests/features/test_step_crashes.py): a step
that SIGKILLs its own process on every attempt runs exactly ``attempts``
times across restarts,
then fails with `StepFailed` saying its attempts were spent by crashes, and
its compensation runs (the step may have applied before the process died).

The child program is tests/crash_child_retry.py; the test runs it again
after each kill, as a supervisor (systemd, Kubernetes) restarts a crashed
service.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.crash_kit import ROOT

CHILD = ROOT / "tests" / "crash_child_retry.py"


def _run(tmp_path, attempts: int) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    args = [
        str(tmp_path / "journal"),
        str(tmp_path / "side"),
        str(tmp_path / "out"),
        str(attempts),
    ]
    with open(tmp_path / "stderr", "ab") as stderr:
        done = subprocess.run(
            [sys.executable, str(CHILD), *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            timeout=60,
        )
    return done.returncode


@pytest.mark.slow  # one interpreter per crash: about a second each
@pytest.mark.parametrize("attempts", [1, 3])
def test_sigkill_in_a_step_spends_its_attempts(tmp_path, attempts):
    kills = 0
    for _ in range(attempts + 3):
        code = _run(tmp_path, attempts)
        if code == 0:
            break
        assert -signal.SIGKILL == code, (tmp_path / "stderr").read_text()
        kills += 1
    else:
        raise AssertionError(f"still crashing after {kills} restarts")
    assert attempts == kills
    key = "crashy/x/1/0/charge/1"
    side = (tmp_path / "side").read_text().splitlines()
    expected = [f"{key} {n}" for n in range(1, attempts + 1)]
    expected.append(f"undo {key}/compensate None")
    assert expected == side
    out = (tmp_path / "out").read_text()
    assert out.startswith("failed ")
    assert f"attempt {attempts} of {attempts} was interrupted by a crash" in out
    assert f"{attempts} of the {attempts} attempt(s) spent did not finish" in out
