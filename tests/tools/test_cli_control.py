"""The ``actors`` command line beside a running system in another process:
its writes go through the system's control socket, with the output and exit
codes they have on a journal no system holds."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from storage import instance_id
from tests.tools.test_cli import ROOT, read_back, run_cli, run_json

pytestmark = pytest.mark.slow  # a system runs in a second process, on real time

CHILD = ROOT / "tests" / "control_child.py"


@pytest.fixture
def place():
    """A short directory: a unix socket's address holds about 100 bytes."""
    with tempfile.TemporaryDirectory(prefix="cli") as d:
        yield Path(d)


class Child:
    """The system of tests/control_child.py, running until ``stop``."""

    def __init__(self, place: Path, *flags: str) -> None:
        self.journal, self.release = place / "journal", place / "release"
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(self.journal), str(self.release), *flags],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert "ready\n" == line, self.proc.stderr.read()

    def stop(self) -> None:
        self.proc.stdin.close()
        assert 0 == self.proc.wait(timeout=30), self.proc.stderr.read()


def status(journal: Path, address: str) -> str:
    return read_back(journal, lambda r: r.instance(instance_id(address)).status)


def until_status(journal: Path, address: str, wanted: str) -> None:
    deadline = time.monotonic() + 20
    while (now := status(journal, address)) != wanted:
        assert time.monotonic() < deadline, f"{address} is {now}, not {wanted}"
        time.sleep(0.02)


def test_the_cli_sends_cancels_resumes_and_cleans_up_through_the_running_system(place):
    child = Child(place)
    journal = child.journal
    try:
        mode = os.stat(journal / "control.sock").st_mode
        assert (True, 0o600) == (stat.S_ISSOCK(mode), stat.S_IMODE(mode))

        done = run_cli(journal, "send", "approvals/a-1", "approve", '{"by": "ann"}')
        assert (0, "") == (done.returncode, done.stderr)
        assert (
            f"sent 'approve' to approvals/a-1 through the running system (pid {child.proc.pid}); "
            "it was suspended, and the system delivers it now\n"
        ) == done.stdout
        until_status(journal, "approvals/a-1", "completed")
        assert {"by": "ann"} == run_json(journal, "show", "approvals/a-1")["result"]

        # The errors of a direct write, with its exit codes.
        done = run_cli(journal, "send", "approvals/nope", "approve")
        assert 3 == done.returncode and "no instance at 'approvals/nope'" in done.stderr
        done = run_cli(journal, "send", "approvals/a-1", "approve")
        assert 1 == done.returncode
        assert "no live instance at 'approvals/a-1' (it completed" in done.stderr
        doc = run_json(journal, "send", "approvals/a-2", "approve", "[1, 2]")
        assert (True, None, "suspended") == (doc["through_system"], doc["message"], doc["status"])
        until_status(journal, "approvals/a-2", "completed")

        # cancel
        for address in ("approvals/a-1", "approvals/nope"):
            done = run_cli(journal, "cancel", address)
            assert (1 if address.endswith("a-1") else 3) == done.returncode, done.stderr

        # A stuck compensation, resumed once what it needs is back.
        done = run_cli(journal, "resume-compensation", "approvals/a-1")
        assert 1 == done.returncode
        assert "it is not stuck compensating (it completed)" in done.stderr
        child.release.touch()
        done = run_cli(journal, "resume-compensation", "trips/t-1")
        assert 0 == done.returncode, done.stderr
        assert f"resumed trips/t-1 through the running system (pid {child.proc.pid})" in done.stdout
        until_status(journal, "trips/t-1", "failed")
        assert [] == [
            c
            for c in run_json(journal, "show", "trips/t-1")["compensations"]
            if c["state"] != "done"
        ]
        doc = run_json(journal, "abandon-compensation", "trips/t-2")
        assert (True, ["book"]) == (doc["through_system"], doc["never_run"])
        assert "failed" == status(journal, "trips/t-2")

        done = run_cli(journal, "cleanup", "--older-than", "1d")
        assert "removed 0 instances through the running system" in done.stdout, done.stderr
        done = run_cli(journal, "cleanup", "--older-than", "0", "--status", "completed")
        assert 0 == done.returncode, done.stderr
        assert done.stdout.startswith("removed 3 instances through the running system")
        assert ["trips/t-1", "trips/t-2"] == sorted(
            i["address"] for i in run_json(journal, "list")["instances"]
        )
    finally:
        child.stop()
    assert not (journal / "control.sock").exists()


def test_cancel_through_the_running_system_runs_no_compensation_check(place):
    child = Child(place)
    try:
        doc = run_json(child.journal, "cancel", "approvals/a-1")
        assert (["approvals/a-1"], True) == (doc["cancelled"], doc["through_system"])
        assert "cancelled by system.cancel" == doc["reason"]
        assert "cancelled" == status(child.journal, "approvals/a-1")
        done = run_cli(child.journal, "cancel", "approvals/a-1")
        assert 1 == done.returncode
        assert "nothing to cancel at 'approvals/a-1': it was cancelled" in done.stderr
        done = run_cli(child.journal, "cancel", "approvals/a-2", "--reason", "duplicate")
        assert 0 == done.returncode
        assert (
            "actors: --reason is not recorded through a running system: it records "
            "'cancelled by system.cancel'\n"
        ) == done.stderr
    finally:
        child.stop()


def test_a_system_without_control_is_refused_as_before(place):
    child = Child(place, "--no-control")
    try:
        assert not (child.journal / "control.sock").exists()
        for args in (
            ("send", "approvals/a-1", "approve"),
            ("cancel", "approvals/a-1"),
            ("resume-compensation", "trips/t-1"),
            ("cleanup", "--older-than", "0"),
        ):
            done = run_cli(child.journal, *args)
            assert 4 == done.returncode, (args, done.stderr)
            assert f"owned by a running system (pid {child.proc.pid}) that serves no control" in (
                done.stderr
            )
        assert "suspended" == status(child.journal, "approvals/a-1")
    finally:
        child.stop()


def test_a_socket_left_by_a_killed_system(place):
    child = Child(place)
    child.proc.send_signal(signal.SIGKILL)
    child.proc.wait(timeout=30)
    journal = child.journal
    assert stat.S_ISSOCK(os.stat(journal / "control.sock").st_mode)  # left behind

    # No system holds the journal: the CLI writes directly, as ever.
    done = run_cli(journal, "send", "approvals/a-1", "approve", '"late"')
    assert 0 == done.returncode, done.stderr
    assert done.stdout.startswith("sent 'approve' to approvals/a-1 as message #1; it is suspended")
    assert 0 == run_cli(journal, "stats").returncode

    # The next system replaces the stale socket and serves on it.
    child = Child(place)
    try:
        until_status(journal, "approvals/a-1", "completed")
        done = run_cli(journal, "send", "approvals/a-2", "approve")
        assert 0 == done.returncode and "through the running system" in done.stdout, done.stderr
        until_status(journal, "approvals/a-2", "completed")
    finally:
        child.stop()
