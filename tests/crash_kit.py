"""Shared by the SIGKILL tests: run a child program, let it acknowledge some
work, kill it at a random moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def kill_after_acks(
    args: list[str],
    *,
    stderr_path: Path,
    acked: Callable[[], int],
    min_acks: int,
    start_timeout: float,
    delay: float,
    label: str,
) -> None:
    """Run ``python CHILD *args`` from the repository root; once ``acked()``
    reaches ``min_acks``, wait ``delay`` seconds and SIGKILL it.

    Raises AssertionError if the child exits on its own or acknowledges too
    little in time, with its stderr in the message."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + start_timeout
            while acked() < min_acks:
                if proc.poll() is not None:
                    raise AssertionError(
                        f"{label} exited with {proc.returncode} before acknowledging "
                        f"{min_acks}:\n{stderr_path.read_text()}"
                    )
                if time.monotonic() > deadline:
                    raise AssertionError(f"{label} acknowledged too little in time")
                time.sleep(0.01)
            time.sleep(delay)
            if proc.poll() is not None:
                raise AssertionError(
                    f"{label} exited by itself with {proc.returncode}:\n{stderr_path.read_text()}"
                )
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, stderr_path.read_text()


def acked_ids(acks: Path) -> set[int]:
    """Ids in an acks file's complete ``S <id>`` lines (the child writes one
    line per acknowledged send with a single write())."""
    if not acks.exists():
        return set()
    return {
        int(line.split()[1])
        for line in acks.read_text().split("\n")[:-1]  # complete lines only
        if line.startswith("S ")
    }


def append_line(path: str, text: str) -> None:
    """Append ``text`` and a newline to the side file ``path`` with one
    write, synced: a child program's record of a side effect, which a
    SIGKILL right after cannot lose or cut in half."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (text + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
