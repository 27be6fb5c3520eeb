"""A throwaway PostgreSQL 15 server of our own, for fault tests that must
stop, crash or restart "the database".

The shared test server (tests/pg.py) is used by other tests at the same
time and is never restarted; a test that needs a real server restart makes
a `PgCluster` instead: ``initdb`` into a temporary directory as the
``postgres`` OS user (the server refuses to run as root), listening on a
free port on 127.0.0.1 only, trust authentication, ``fsync`` on (a crash,
``stop("immediate")``, is then recovered as on a real machine). Every wait
is bounded; `cleanup` stops it and removes the directory.

    with PgCluster() as server:
        dsn = server.dsn()
        server.restart("immediate")  # a crash and recovery, about a second

Binaries come from ``ACTORS_TEST_PG_BIN`` or /usr/lib/postgresql/15/bin.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

PG_BIN = Path(os.environ.get("ACTORS_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
OS_USER = "postgres"  # initdb and the server refuse to run as root
MODES = ("smart", "fast", "immediate")

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "on",
    "synchronous_commit": "on",
    "max_connections": "200",
    "shared_buffers": "32MB",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] '",
    "max_wal_size": "256MB",
}


class ClusterError(RuntimeError):
    """The private server could not be made, started or stopped; the message
    holds the command's output and the end of the server's log."""


def available() -> str | None:
    """Why a private cluster cannot be made here, or None if it can."""
    if not (PG_BIN / "initdb").exists():
        return f"no PostgreSQL binaries in {PG_BIN} (set ACTORS_TEST_PG_BIN)"
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        return f"no {OS_USER!r} OS user to run the server as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != OS_USER:
        return f"run as root or as {OS_USER!r} to start a private server"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgCluster:
    """One private server: its data directory, port and log."""

    def __init__(self, *, port: int | None = None, root: str | Path | None = None) -> None:
        why = available()
        if why is not None:
            raise ClusterError(why)
        self.root = Path(tempfile.mkdtemp(prefix="actors-pg-", dir=root))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = port or free_port()
        self.restarts = 0  # stops followed by a start, over this cluster's life
        self._stopped_once = False
        account = pwd.getpwnam(OS_USER)
        os.chown(self.root, account.pw_uid, account.pw_gid)
        os.chmod(self.root, 0o700)
        try:
            self._run(
                [
                    str(PG_BIN / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-instructions",
                ],
                timeout=120,
            )
            ours = {**SETTINGS, "port": str(self.port), "unix_socket_directories": f"'{self.root}'"}
            with open(self.data / "postgresql.conf", "a") as conf:
                conf.write("\n# tests/pg_cluster.py\n")
                conf.writelines(f"{name} = {value}\n" for name, value in ours.items())
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    # -- commands ---------------------------------------------------------------

    def _run(self, argv: list[str], timeout: float) -> str:
        if os.geteuid() == 0:
            argv = ["runuser", "-u", OS_USER, "--", *argv]
        try:
            done = subprocess.run(
                argv, cwd=self.root, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{argv[-1]}... took over {timeout} s{self._log_tail()}") from exc
        if done.returncode != 0:
            raise ClusterError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stdout}{done.stderr}"
                f"{self._log_tail()}"
            )
        return done.stdout

    def _pg_ctl(self, *args: str, timeout: float) -> str:
        wait = str(max(1, int(timeout)))
        return self._run(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                wait,
                *args,
            ],
            timeout=timeout + 10,
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return "\nserver log:\n" + "\n".join(text)

    def dsn(self, database: str = "postgres") -> str:
        """The URL of ``database`` on this server, as user ``postgres``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def running(self) -> bool:
        """Whether the postmaster runs (its pid file names a live process)."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def pid(self) -> int | None:
        """The postmaster's pid, from its pid file, or None."""
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and return once it accepts connections."""
        self._pg_ctl("start", timeout=timeout)
        if self._stopped_once:
            self.restarts += 1
        self._wait_ready(timeout)

    def stop(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """Stop it: ``"fast"`` (sessions ended, a clean shutdown),
        ``"immediate"`` (every process killed: a crash, recovered at the
        next start) or ``"smart"`` (waits for the sessions to end)."""
        if mode not in MODES:
            raise ValueError(f"mode is one of {MODES}, not {mode!r}")
        self._pg_ctl("stop", "-m", mode, timeout=timeout)
        self._stopped_once = True

    def restart(self, mode: str = "fast", down: float = 0.0, timeout: float = 30.0) -> None:
        """Stop (in ``mode``), stay down ``down`` seconds, start again."""
        self.stop(mode, timeout)
        if down > 0:
            time.sleep(down)
        self.start(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    pass
                out = subprocess.run(
                    [
                        str(PG_BIN / "pg_isready"),
                        "-h",
                        "127.0.0.1",
                        "-p",
                        str(self.port),
                        "-U",
                        "postgres",
                        "-t",
                        "2",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    check=False,
                )
                if out.returncode == 0:
                    return
            except (OSError, subprocess.TimeoutExpired):
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"the server on port {self.port} is not ready{self._log_tail()}")
            time.sleep(0.05)

    def cleanup(self) -> None:
        """Stop the server if it runs (immediate: nothing is kept) and remove it all."""
        try:
            if self.running():
                self.stop("immediate", timeout=30)
        except ClusterError:
            pid = self.pid()  # our own postmaster: end it by its id
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


def node_sessions(dsn: str, pid: int, port: int) -> list[tuple[int, str]]:
    """``(backend pid, application_name)`` of each session that OS process
    ``pid`` holds on the server at ``dsn`` (listening on ``port``): its
    sockets (/proc/PID/fd) matched to the sessions' client ports."""
    import psycopg

    ports = client_ports(pid, port)
    if not ports:
        return []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT pid, coalesce(application_name, '') FROM pg_stat_activity "
            "WHERE client_port = ANY(%s) AND client_addr = '127.0.0.1'",
            [sorted(ports)],
        ).fetchall()
    return [(int(p), str(name)) for p, name in rows]


def client_ports(pid: int, server_port: int) -> set[int]:
    """The local ports of process ``pid``'s TCP connections to ``server_port``."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    try:
        with open(f"/proc/{pid}/net/tcp") as table:
            next(table)
            for row in table:
                fields = row.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and int(remote.split(":")[1], 16) == server_port:
                    ports.add(int(local.split(":")[1], 16))
    except OSError:
        return set()
    return ports
