"""How the journal reaches its PostgreSQL server, and what it says when it cannot.

`_Server` holds the DSN and the settings every connection of one journal
shares, and opens the three kinds it uses: the committer's (autocommit; it
sends BEGIN and COMMIT itself), and a node's own lease and mail connections
(autocommit, with TCP keepalives so a dead server is noticed within
seconds). Every message that names the server goes through `_safe_dsn`, so
a password in the DSN never reaches a log or an exception.

`_Threads` is the trio side of the blocking calls: psycopg's async API needs
asyncio, so the journal runs psycopg's sync API in worker threads, at most
the pool's size at once, and holds an autojump clock still while they run.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict

from .._clock import AutojumpHold
from .._handoff import Handoff
from .._journal import Durability
from ..errors import JournalCorrupt, JournalUnavailable

T = TypeVar("T")


def _safe_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***``, for messages."""
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return "<a DSN that does not parse>"
        if parts.password is not None:
            host = parts.netloc.rpartition("@")[2]
            user = parts.username or ""
            parts = parts._replace(netloc=f"{user}:***@{host}")
        dsn = urlunsplit(parts)
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", r"\1***", dsn)


def _rollback(conn: psycopg.Connection) -> None:
    with contextlib.suppress(psycopg.Error):  # a broken connection is replaced by its owner
        conn.rollback()


class _Server:
    """The DSN, schema and session settings of one journal's connections."""

    __slots__ = (
        "connect_kwargs",
        "dsn",
        "durability",
        "lease_timeout",
        "node",
        "schema",
        "writer_key",
    )

    def __init__(self, dsn: str, schema: str, durability: Durability, lease_timeout: float) -> None:
        self.dsn = dsn
        self.schema = schema
        self.durability = durability
        self.lease_timeout = lease_timeout
        self.node: str | None = None  # set by PostgresJournal.set_node, before open
        self.writer_key: int | None = None  # likewise (see _schema._writer_key)
        self.connect_kwargs: dict[str, Any] = {}
        try:
            given = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"{_safe_dsn(dsn)!r} is not a valid PostgreSQL DSN: {exc}") from None
        if "connect_timeout" not in given:
            self.connect_kwargs["connect_timeout"] = 10
        if "application_name" not in given:  # so pg_stat_activity says whose it is
            self.connect_kwargs["application_name"] = f"actors journal {schema}"[:63]

    def describe(self) -> str:
        return f"PostgresJournal({_safe_dsn(self.dsn)!r}, schema={self.schema!r})"

    def read_only_sessions(self) -> None:
        """Start every session opened from now on read-only
        (``default_transaction_read_only``), so the server refuses any write,
        and name them ``actors inspector <schema>`` (unless the DSN names
        them): pg_stat_activity tells them from the nodes' sessions, and
        whatever ends a journal's sessions by name leaves them alone."""
        given = conninfo_to_dict(self.dsn).get("options") or os.environ.get("PGOPTIONS", "")
        self.connect_kwargs["options"] = f"{given} -c default_transaction_read_only=on".strip()
        if "application_name" in self.connect_kwargs:  # the DSN did not name one
            self.connect_kwargs["application_name"] = f"actors inspector {self.schema}"[:63]

    @property
    def lease_ms(self) -> int:
        return max(1, round(self.lease_timeout * 1000))

    def unreachable(self, exc: BaseException) -> JournalUnavailable:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return JournalUnavailable(
            f"cannot connect to PostgreSQL at {_safe_dsn(self.dsn)!r} ({reason}); start the server, "
            "or point the journal at a running one with "
            "PostgresJournal('postgresql://USER@HOST:PORT/DATABASE')"
        )

    def connect(self, *, writer_key: bool = True) -> psycopg.Connection:
        """A committer's connection; a node's holds its writer key, unless
        ``writer_key`` is false (then `take_writer_key` does, later)."""
        try:
            # Autocommit: the committer sends BEGIN and COMMIT itself, inside the
            # pipeline, which costs no round trip of its own.
            conn = psycopg.Connection.connect(self.dsn, autocommit=True, **self.connect_kwargs)
        except psycopg.Error as exc:
            raise self.unreachable(exc) from exc
        try:
            with self.setting_up(conn):  # closes it if this fails
                if self.durability == "async":
                    conn.execute("SET synchronous_commit = off")
                if self.node is not None:
                    # New instances this connection writes belong to this node
                    # (see _SQL.write); and a node frozen mid-commit must not
                    # keep its row locks past its lease.
                    conn.execute("SELECT set_config('actors.node', %s, false)", [self.node])
                    conn.execute(f"SET idle_in_transaction_session_timeout = {self.lease_ms}")
        except psycopg.Error as exc:
            raise self.unreachable(exc) from exc
        if writer_key and self.node is not None:
            self.take_writer_key(conn)
        return conn

    def take_writer_key(self, conn: psycopg.Connection) -> None:
        """Have the committer's ``conn`` hold this node's writer key.

        A node frozen in the middle of a batch's statement (no Sync yet: the
        server waits "active", no timeout ends it) is found by this lock and
        ended by the node that sees its lease lapse (`_Lease.orphans_sync`):
        a session that holds it while the node's lease is free may be ended
        at any moment, so a node opening takes it only once its lease is
        held (see `PostgresJournal.open`). Raises `JournalUnavailable` (and
        closes ``conn``) if that fails."""
        try:
            with self.setting_up(conn):  # closes it if this fails
                conn.execute("SELECT pg_advisory_lock_shared(%s)", [self.writer_key])
        except psycopg.Error as exc:
            raise self.unreachable(exc) from exc

    def node_connect(self, role: str) -> psycopg.Connection:
        """A connection of this node's own (lease or mail), autocommit, that
        notices a dead server within seconds rather than TCP's hours."""
        kwargs = dict(self.connect_kwargs)
        if "application_name" in kwargs:  # the DSN did not name one
            kwargs["application_name"] = f"actors {role} {self.node}"[:63]
        return self.watched_connect(kwargs)

    def watched_connect(
        self, kwargs: dict[str, Any] | None = None, *, autocommit: bool = True
    ) -> psycopg.Connection:
        """A connection with TCP keepalives (the DSN's own win),
        so that a dead server is noticed within seconds. Raises
        `JournalUnavailable` if the server cannot be reached."""
        kwargs = dict(self.connect_kwargs if kwargs is None else kwargs)
        given = conninfo_to_dict(self.dsn)
        defaults = {
            "keepalives": 1,
            "keepalives_idle": 2,
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": max(2000, 4 * self.lease_ms),
        }
        kwargs.update({k: v for k, v in defaults.items() if k not in given})
        try:
            return psycopg.Connection.connect(self.dsn, autocommit=autocommit, **kwargs)
        except psycopg.Error as exc:
            raise self.unreachable(exc) from exc

    @contextmanager
    def setting_up(self, conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
        """Close ``conn`` if the block fails; a lost server becomes `JournalUnavailable`."""
        try:
            yield conn
        except psycopg.OperationalError as exc:
            conn.close()
            raise self.unreachable(exc) from exc
        except BaseException:
            conn.close()
            raise

    @contextmanager
    def mapped(self) -> Iterator[None]:
        """Turn psycopg's errors into the journal's own."""
        try:
            yield
        except psycopg.OperationalError as exc:
            raise self.unreachable(exc) from exc
        except psycopg.Error as exc:
            raise JournalCorrupt(
                f"reading {self.describe()} failed: {exc}", database="", key=b""
            ) from exc


class _Threads:
    """Worker threads for the journal's blocking calls, made in the trio
    thread at open: the loop's token, the pool-sized limiter, the autojump
    clock's hold (virtual time stands still while a thread runs), and the
    handoff that lends the GIL to these threads and the committer when a
    busy trio thread starves them of it (see storage._handoff)."""

    __slots__ = ("handoff", "hold", "limiter", "running", "token")

    def __init__(self, size: int, writes: Callable[[], int] = lambda: 0) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.hold = AutojumpHold.current()
        self.limiter = trio.CapacityLimiter(size)
        self.running = 0  # calls of `run` in worker threads (trio thread)
        # In flight: a call in a worker thread, or a batch of the committer's
        # (``writes`` counts those).
        self.handoff = Handoff(lambda: self.running > 0 or writes() > 0)
        if self.hold is None:  # under a MockClock its looks would move virtual time
            self.handoff.start()

    def close(self) -> None:
        """Stop the handoff's looks (in the trio thread, as the journal closes)."""
        self.handoff.stop()

    @contextmanager
    def holding(self) -> Iterator[None]:
        if self.hold is None:
            yield
            return
        self.hold.acquire()
        try:
            yield
        finally:
            self.hold.release()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread, at most the pool's size at once."""
        with self.holding():
            self.running += 1
            if self.running == 1:
                self.handoff.wake()
            try:
                return await trio.to_thread.run_sync(
                    self._on_the_server, fn, args, limiter=self.limiter
                )
            finally:
                self.running -= 1

    def _on_the_server(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        # In the worker thread. A call is a round trip or two to the server:
        # the handoff counts it as one step there, as it counts a commit
        # of the committer's, and lets the GIL go to a call that took none.
        self.handoff.committing()
        try:
            return fn(*args)
        finally:
            self.handoff.handed_back()
