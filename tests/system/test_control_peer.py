"""The command line checks whom it talks to on the control socket: a
listener of another user on the socket's path (SO_PEERCRED), or a journal
directory other users may write (where such a listener could be put), is
refused before a byte of the request is sent, with the path and the fix;
no "sent ... through the running system"."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import aclosing
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

pytestmark = pytest.mark.slow  # the command line and the fake listener run in processes

as_root = pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0 or not sys.platform.startswith("linux"),
    reason="needs root on Linux, to run a listener as another user (nobody)",
)

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
approve = Signal("approve")

# Binds the socket's path as root (the directory is root's only), then
# becomes nobody and listens: a listener of another user on that path.
# It answers {"ok": null} to whatever request arrives, as a thief would.
FAKE = (
    f"NOBODY = {NOBODY}\n"
    + r"""
import json, os, socket, struct, sys
path = sys.argv[1]
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
os.chmod(path, 0o777)
os.setgid(NOBODY)
os.setuid(NOBODY)
server.listen(8)
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
        if len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
            break
    print(f"received {len(data)} bytes", flush=True)
    if data:
        body = json.dumps({"ok": None}).encode()
        conn.sendall(struct.pack(">I", len(body)) + body)
    conn.close()
"""
)


@process("approvals/:id")
async def approval(ctx: Context, id: str) -> object:
    return await ctx.wait(approve)


@pytest.fixture
def place():
    """A short directory: a unix socket's address holds about 100 bytes."""
    with tempfile.TemporaryDirectory(prefix="peer") as d:
        yield Path(d)


def run_cli(journal: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "actors", "--journal", str(journal), *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TZ="UTC", COLUMNS="160"),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def cli(journal: Path, *args: str) -> subprocess.CompletedProcess:
    return await trio.to_thread.run_sync(lambda: run_cli(journal, *args))


async def suspended(system: actors.ActorSystem) -> None:
    handle = await system.start(approval, "a-1")
    async with aclosing(handle.status_changes()) as changes:
        async for status in changes:
            if status == "suspended":
                return


@as_root
async def test_a_listener_of_another_user_on_the_socket_is_refused(place):
    journal = place / "journal"
    async with actors.open_system(LMDBJournal(journal), [approval], control=False) as system:
        await suspended(system)
        assert 0o700 == os.stat(journal).st_mode & 0o777  # no other user may write there
        fake = subprocess.Popen(
            [sys.executable, "-c", FAKE, str(journal / "control.sock")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert "ready\n" == fake.stdout.readline(), fake.stderr.read()
            sent = await cli(journal, "send", "approvals/a-1", "approve", '{"card": "4111"}')
            cancelled = await cli(journal, "cancel", "approvals/a-1", "--force")
        finally:
            fake.kill()
            heard, _ = fake.communicate(timeout=30)
        assert "suspended" == system.get("approvals/a-1").status
        assert [] == await system.mail("approvals/a-1")
    # Connected (to read who it is), then left before sending anything.
    assert ["received 0 bytes", "received 0 bytes"] == heard.splitlines()
    for done in (sent, cancelled):
        assert 0 != done.returncode
        assert "through the running system" not in done.stdout
        assert (
            f"refusing the control socket {journal / 'control.sock'}: it is served by uid "
            f"{NOBODY}, not by the journal's owner (uid 0, who owns {journal})"
        ) in done.stderr
        assert f"chmod 700 {journal}" in done.stderr


async def test_a_journal_directory_other_users_may_write_is_refused(place):
    journal = place / "journal"
    async with actors.open_system(LMDBJournal(journal), [approval]) as system:
        await suspended(system)
        os.chmod(journal, 0o777)
        try:
            sent = await cli(journal, "send", "approvals/a-1", "approve", '{"card": "4111"}')
        finally:
            os.chmod(journal, 0o700)
        assert "suspended" == system.get("approvals/a-1").status
        assert [] == await system.mail("approvals/a-1")
    assert 0 != sent.returncode
    assert "through the running system" not in sent.stdout
    assert (
        f"refusing the control socket {journal / 'control.sock'}: the journal directory "
        f"{journal} is writable by other users (mode 777)"
    ) in sent.stderr
    assert f"chmod go-w {journal}" in sent.stderr
