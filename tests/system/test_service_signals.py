"""Stopping a service: `actors.run_until_signalled` in a child process
(tests/crash_child_service.py) with a step in flight.

SIGTERM or SIGINT closes the system: the child exits 0, the journal opens
at once in another process (this one), and the step's attempt was not
spent: it runs again, and completes, under the same idempotency key. A
second signal while the close hangs exits at once, non-zero, and the
journal is then as after a crash (the step runs again all the same: a crash
is not a step failure).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import actors
from storage import LMDBJournal, instance_id
from tests import crash_child_service as child
from tests.crash_kit import ROOT

CHILD = ROOT / "tests" / "crash_child_service.py"
KEY = "job/x/1/0/work/1"


def _spawn(tmp_path: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    args = [str(tmp_path / "journal"), str(tmp_path / "side"), str(tmp_path / "out"), *extra]
    with open(tmp_path / "stderr", "wb") as stderr:
        return subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _wait_for(proc: subprocess.Popen[bytes], path: Path, text: str, tmp_path: Path) -> None:
    deadline = time.monotonic() + 60
    while not (path.exists() and text in path.read_text()):
        if proc.poll() is not None:
            raise AssertionError(
                f"the child exited with {proc.returncode} before {text!r} appeared:\n"
                + (tmp_path / "stderr").read_text()
            )
        assert time.monotonic() < deadline, f"{text!r} did not appear in time"
        time.sleep(0.01)


def _side(tmp_path: Path) -> list[str]:
    return (tmp_path / "side").read_text().splitlines()


async def _reopen_and_finish(tmp_path: Path) -> dict[str, object]:
    """Open the journal here, at once, with the step let through: its
    result, and its log entry as stored."""
    child.SIDE = str(tmp_path / "side")
    with open(tmp_path / "side", "a") as f:
        f.write("release\n")
    async with actors.open_system(LMDBJournal(tmp_path / "journal"), [child.job]) as system:
        assert KEY == await system.get("job/x").result()
        with system.journal.reader() as r:
            [entry] = r.log(instance_id("job/x"), 0).values()
    return entry


@pytest.mark.slow  # a child interpreter per case
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_closes_the_service_and_the_step_in_flight_is_not_spent(tmp_path, signum):
    proc = _spawn(tmp_path)
    try:
        _wait_for(proc, tmp_path / "side", f"start {KEY} 1", tmp_path)
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert 0 == code, (tmp_path / "stderr").read_text()
    assert str(int(signum)) == (tmp_path / "out").read_text()
    entry = await _reopen_and_finish(tmp_path)
    # Attempt 1 was cut short by the close (c: 1), so attempt 2 is the one
    # attempt a step without retry= has; it ran under the same key.
    assert (2, 1, KEY) == (entry["a"], entry["c"], entry["key"])
    assert [f"start {KEY} 1", "release", f"start {KEY} 2", f"done {KEY} 2"] == _side(tmp_path)


@pytest.mark.slow  # a child interpreter
async def test_a_second_signal_exits_at_once_without_closing(tmp_path):
    proc = _spawn(tmp_path, "stubborn")
    try:
        _wait_for(proc, tmp_path / "side", f"start {KEY} 1", tmp_path)
        proc.send_signal(signal.SIGTERM)
        _wait_for(proc, tmp_path / "stderr", "closing the system", tmp_path)
        time.sleep(0.2)  # the close hangs: main ignores its cancellation
        assert proc.poll() is None, (tmp_path / "stderr").read_text()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert 128 + signal.SIGTERM == code, (tmp_path / "stderr").read_text()
    assert "exiting at once" in (tmp_path / "stderr").read_text()
    assert not (tmp_path / "out").exists()
    entry = await _reopen_and_finish(tmp_path)
    # No close was recorded (c: 0): attempt 1 counts as cut short by a
    # crash, which runs it again under its key all the same.
    assert (2, 0, KEY) == (entry["a"], entry.get("c", 0), entry["key"])
    assert [f"start {KEY} 1", "release", f"start {KEY} 2", f"done {KEY} 2"] == _side(tmp_path)


async def test_main_s_error_is_raised_once_the_system_closed(tmp_path):
    async def main(system: actors.ActorSystem) -> None:
        raise LookupError("no such customer")

    with pytest.raises(LookupError, match="no such customer"):
        await actors.run_until_signalled(LMDBJournal(tmp_path / "journal"), [], main=main)
    # Closed: the journal opens again at once.
    async with actors.open_system(LMDBJournal(tmp_path / "journal")):
        pass
