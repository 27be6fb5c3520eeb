"""A node's lease on the schema, and the claims and takeovers made under it.

*Lease.* A dedicated connection holds ``pg_try_advisory_lock`` on a stable
64-bit hash of (schema, node name) (`_node_key`), with
``idle_session_timeout`` (PostgreSQL 14 or later) set to ``lease_timeout``;
a heartbeat thread runs ``SELECT 1`` on it every quarter of that. A process
that is frozen (SIGSTOP) or cut off stops answering, the server ends its
session and the lock is free about ``lease_timeout`` later; a killed one
frees it at once. (Never a blocking ``pg_advisory_lock`` from a thread: one
given up on can still be granted later, a lock nobody knows it holds.) If
the heartbeat finds the connection gone, it reconnects and takes the lock
again; meanwhile other nodes may have claimed its instances, and fencing
(see `storage._postgres._plan._check_fences`) refuses its writes to them.

*Claims.* `claim` makes this node an instance's owner with a new epoch
(from a sequence, so epochs never repeat), unless another node owns it and
that node's lease is held. Claims that arrive while one is in flight go
together in the next round trip. *Takeover.* `orphans` lists live
instances whose owner's lease is free. Both run on the lease connection.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
import psycopg.errors
import trio

from ..errors import JournalLocked
from ._schema import _SQL, _channel, _node_key, _writer_key
from ._server import _Server, _Threads

T = TypeVar("T")

_PRUNE_EVERY = 10.0  # seconds between sweeps of the nodes table for gone nodes
_NO_LEASE = object()  # another process holds this node's lease
_BUSY = -1  # a claim's answer when a writer holds the row (epochs are positive)
_BUSY_TRIES = 12  # claims of a busy row, a quarter lease_timeout apart, before giving up

log = logging.getLogger("storage.postgres")


class _Claim:
    """One caller's `_Lease.claim`, answered with its batch."""

    __slots__ = ("done", "epoch", "error", "iid")

    def __init__(self, iid: bytes) -> None:
        self.iid = iid
        self.epoch: int | None = None
        self.error: Exception | None = None
        self.done = trio.Event()


class _Lease:
    """This node's lease connection, its heartbeat, and what runs on it."""

    def __init__(self, server: _Server, sql: _SQL) -> None:
        self._server = server
        self._sql = sql
        self._mutex = threading.Lock()
        self.conn: psycopg.Connection | None = None  # guarded by _mutex
        self._leasing = False  # between open and close; guarded by _mutex
        self._taken_elsewhere = False  # (warned that) another process holds it
        self.heartbeat_thread: threading.Thread | None = None
        self.heartbeat_stop = threading.Event()
        self._claims: list[_Claim] = []  # waiting for the next claim batch
        self._claiming = False  # a task is running claim batches
        self.pruned_at = 0.0
        # The lease's term grows each time it is taken again after a loss;
        # confirmed_at is when a statement last ran on its session (a
        # session that answered still held the lock then).
        self.term = 0
        self.confirmed_at = 0.0  # time.monotonic()
        self._cannot_end = False  # (warned that) this role may not end others' sessions

    @property
    def _node(self) -> str:
        node = self._server.node
        assert node is not None
        return node

    def _take(self, wait: float = 0.0) -> psycopg.Connection | None:
        """A new lease connection holding this node's lock (trying for up to
        ``wait`` seconds), or None if another session holds it. The caller
        holds ``_mutex``."""
        key = _node_key(self._server.schema, self._node)
        conn = self._server.node_connect("lease")
        with self._server.setting_up(conn):
            conn.execute(f"SET idle_session_timeout = {self._server.lease_ms}")
            # A claim waiting on a row lock would hold up the heartbeat and the
            # scan that ends a lapsed node's sessions (both run here): give up
            # soon instead, and claim again later.
            conn.execute(f"SET lock_timeout = {max(50, self._server.lease_ms // 4)}")
            deadline = time.monotonic() + wait
            while True:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
                got = bool(row and row[0])
                if got or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)  # a holder that just died: its backend is still ending
            if not got:
                conn.close()
                return None
            channel = _channel(self._server.schema, self._node)
            conn.execute(self._sql.register_node, [self._node, key, channel])
        return conn

    def _on_lease(self, fn: Callable[[psycopg.Connection], T]) -> T | object:
        """Run ``fn`` on the lease connection, taking the lease again first if
        the connection was lost. Returns `_NO_LEASE` if the journal is closing
        or another process holds this node's lease; raises `JournalUnavailable`
        if the server cannot be reached."""
        with self._mutex:
            for attempt in range(2):
                if not self._leasing:
                    return _NO_LEASE
                conn = self.conn
                if conn is None or conn.closed or conn.broken:
                    self._drop()
                    conn = self._take()
                    if conn is None:
                        if not self._taken_elsewhere:
                            self._taken_elsewhere = True
                            log.warning(
                                "node %r lost its lease on %s and another process holds it "
                                "now; this one claims no instances until it gets it back",
                                self._node,
                                self._server.describe(),
                            )
                        return _NO_LEASE
                    self._taken_elsewhere = False
                    self.conn = conn
                    self.term += 1
                    self.confirmed_at = time.monotonic()
                    log.warning(
                        "node %r took its lease on %s again after losing it; instances "
                        "other nodes took over meanwhile refuse its writes (fencing)",
                        self._node,
                        self._server.describe(),
                    )
                try:
                    result = fn(conn)
                    self.confirmed_at = time.monotonic()
                    return result
                except psycopg.OperationalError as exc:
                    if not (conn.broken or conn.closed):
                        raise
                    self._drop()
                    if attempt:
                        raise self._server.unreachable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop(self) -> None:
        """Close the lease connection (ending the session frees its lock)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    def _heartbeat(self) -> None:
        """Keep the lease session busy, so only a stuck process loses it."""
        interval = self._server.lease_timeout / 4
        failing = False
        while not self.heartbeat_stop.wait(interval):
            try:
                self._on_lease(lambda conn: conn.execute("SELECT 1"))
            except Exception as exc:  # noqa: BLE001 - keep beating; the next try reconnects
                if not failing:
                    log.warning("node %r: lease heartbeat failed: %s", self._node, exc)
                failing = True
            else:
                failing = False

    def take_sync(self) -> None:
        """Take the lease at open, waiting up to ``lease_timeout`` for a
        holder that just died (in a worker thread)."""
        with self._mutex:
            conn = self._take(wait=self._server.lease_timeout)
            if conn is None:
                raise JournalLocked(
                    f"node {self._node!r} is already running on {self._server.describe()} "
                    "(another process holds its lease); stop that process, or give this "
                    "one another node name"
                )
            self.conn, self._leasing = conn, True
            self.confirmed_at = time.monotonic()

    def current_term(self) -> int | None:
        """The lease's term if the lease is known to be held now, else None.

        Held means confirmed within three quarters of ``lease_timeout``: the
        server ends a silent session ``lease_timeout`` after its last
        statement, so past that this process may have been frozen while
        another node took its instances (the heartbeat confirms it four times
        a timeout)."""
        # No _mutex: a claim or a reconnect can hold it for seconds, and this
        # is asked from the trio thread. A new lease sets the term before
        # confirmed_at, and this reads them the other way round: a fresh
        # confirmation is never paired with the term before it.
        confirmed_at = self.confirmed_at
        term = self.term
        if not self._leasing or self.conn is None:
            return None
        if time.monotonic() - confirmed_at > 0.75 * self._server.lease_timeout:
            return None
        return term

    def start_heartbeat(self) -> None:
        self.heartbeat_stop.clear()
        self.heartbeat_thread = threading.Thread(
            target=self._heartbeat, name=f"journal-lease {self._node}", daemon=True
        )
        self.heartbeat_thread.start()

    async def release(self) -> None:
        """Stop the heartbeat and give the lease back (other nodes may take
        this one's instances over from now on)."""
        self.heartbeat_stop.set()
        thread, self.heartbeat_thread = self.heartbeat_thread, None
        if thread is not None:
            await trio.to_thread.run_sync(thread.join)

        def release() -> None:
            with self._mutex:
                self._leasing = False
                conn = self.conn
                node = self._server.node
                if conn is not None and not (conn.closed or conn.broken) and node is not None:
                    key = _node_key(self._server.schema, node)
                    writers = _writer_key(self._server.schema, node)
                    # Invariant: no session holds a node's writer key while
                    # its lease is free but one of a process that lost the
                    # lease (see _end_sessions). The committer has closed
                    # its connection, but its backend may hold the key a
                    # moment longer: wait for that (up to this session's
                    # lock_timeout) before giving the lease back, or a scan
                    # would end it and report this node lapsed. A psycopg.Error
                    # is lock_timeout (an older process's session: scans end
                    # it), or the connection lost (the lease goes with it).
                    with contextlib.suppress(psycopg.Error):
                        conn.execute(
                            "SELECT pg_advisory_lock(%s), pg_advisory_unlock(%s)",
                            [writers, writers],
                        )
                    # At once, rather than when the server notices the session end.
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("SELECT pg_advisory_unlock(%s)", [key])
                self._drop()

        await trio.to_thread.run_sync(release)

    async def claim(self, iid: bytes, threads: _Threads) -> int | None:
        """This node's new epoch of ``iid``, or None if another live node owns it."""
        for _ in range(_BUSY_TRIES):
            epoch = await self._claim_once(iid, threads)
            if epoch != _BUSY:
                return epoch
            # A writer holds its row (one frozen mid-batch, say, until a scan
            # ends its session once its lease lapses): try again soon.
            await trio.sleep(self._server.lease_timeout / 4)
        return None

    async def _claim_once(self, iid: bytes, threads: _Threads) -> int | None:
        # Claims that arrive while a batch is in flight go in the next one:
        # one round trip (one statement per instance, pipelined) serves many.
        request = _Claim(iid)
        self._claims.append(request)
        if not self._claiming:
            self._claiming = True
            try:
                with trio.CancelScope(shield=True), threads.holding():
                    while self._claims:
                        batch, self._claims = self._claims, []
                        try:
                            # (through `threads.run`, so the handoff counts it)
                            epochs = await threads.run(self._claim_sync, [r.iid for r in batch])
                        except Exception as exc:  # noqa: BLE001 - every claimant learns of it
                            for r in batch:
                                r.error = exc
                        else:
                            for r in batch:
                                r.epoch = epochs.get(r.iid)
                        for r in batch:
                            r.done.set()
            finally:
                self._claiming = False
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.epoch

    def _claim_sync(self, iids: list[bytes]) -> dict[bytes, int]:
        unique = list(dict.fromkeys(iids))
        claim, me = self._sql.claim, self._node

        def one(conn: psycopg.Connection, iid: bytes) -> int | None:
            try:
                row = conn.execute(claim, {"me": me, "iid": iid}).fetchone()
            except psycopg.errors.LockNotAvailable:  # past the lease connection's lock_timeout
                return _BUSY
            return None if row is None else row[0]

        def run(conn: psycopg.Connection) -> dict[bytes, int]:
            # One statement, one transaction per instance (a Sync after each):
            # a claim holds one row lock at a time, so it never deadlocks.
            found = {}
            if len(unique) > 1:
                try:
                    with conn.pipeline() as pipeline:
                        cursors = []
                        for iid in unique:
                            cursors.append(conn.execute(claim, {"me": me, "iid": iid}))
                            pipeline.sync()
                    for iid, cur in zip(unique, cursors, strict=True):
                        row = cur.fetchone()
                        if row is not None:
                            found[iid] = row[0]
                    return found
                except psycopg.errors.LockNotAvailable:
                    pass  # one waits on a row lock: learn which, one at a time
            for iid in unique:
                epoch = one(conn, iid)
                if epoch is not None:
                    found[iid] = epoch
            return found

        with self._server.mapped():
            result = self._on_lease(run)
        return {} if result is _NO_LEASE else result  # type: ignore[return-value]

    def _end_sessions(self, conn: psycopg.Connection, lapsed: list[str]) -> None:
        """End the committer sessions of those ``lapsed`` nodes whose lease is
        still free (on the lease connection, autocommit)."""
        # Invariant: the sessions of node n are ended only while this session
        # holds n's lease lock itself. A node takes its writer key only once
        # it holds its lease (PostgresJournal._open_node_sync), so n cannot
        # be opening meanwhile: what holds n's key now is left from a
        # process of n's that lost the lease (frozen, cut off), never the
        # committer of an n that took its lease since `lapsed` was read
        # (that one's lease lock is not free, and it is left alone).
        schema = self._server.schema
        by_key = {_node_key(schema, name): name for name in lapsed}
        held = [
            key
            for (key,) in conn.execute(
                "SELECT k FROM unnest(%s::bigint[]) AS u(k) WHERE pg_try_advisory_lock(k)",
                [list(by_key)],
            ).fetchall()
        ]
        if not held:
            return
        try:
            self._end_sessions_held(conn, [by_key[key] for key in held])
        finally:
            # (A lost connection gave them back already.)
            if not (conn.closed or conn.broken):
                conn.execute(
                    "SELECT pg_advisory_unlock(k) FROM unnest(%s::bigint[]) AS u(k)", [held]
                )

    def _end_sessions_held(self, conn: psycopg.Connection, lapsed: list[str]) -> None:
        """End the committer sessions of the ``lapsed`` nodes, whose lease
        locks this session holds."""
        keys = [_writer_key(self._server.schema, name) for name in lapsed]
        try:
            (ended,) = conn.execute(self._sql.end_sessions, [keys]).fetchone()  # type: ignore[misc]
        except psycopg.errors.InsufficientPrivilege as exc:
            if not self._cannot_end:
                self._cannot_end = True
                log.warning(
                    "node %r may not end the sessions of nodes whose lease lapsed (%s); "
                    "a node frozen in the middle of a commit then holds its row locks "
                    "until it wakes: run every node as one database role, or grant "
                    "pg_signal_backend",
                    self._node,
                    str(exc).strip(),
                )
            return
        if ended:
            log.warning(
                "node %r ended %d session(s) of node(s) %s, whose lease lapsed",
                self._node,
                ended,
                ", ".join(map(repr, lapsed)),
            )

    def orphans_sync(self, limit: int) -> list[bytes]:
        """Live instances whose owner's lease is free (in a worker thread);
        now and then, forget nodes that are gone and own nothing live."""

        def run(conn: psycopg.Connection) -> list[bytes]:
            params = {"me": self._node, "limit": limit}
            # No node may hold, past its lease, a lock another needs: end the
            # committer sessions of nodes whose lease lapsed (one frozen in
            # the middle of a batch keeps its row locks, and claims and
            # commits on every node would wait on them) before claiming.
            lapsed = [name for (name,) in conn.execute(self._sql.lapsed, params).fetchall()]
            if lapsed:
                self._end_sessions(conn, lapsed)
            rows = conn.execute(self._sql.orphans, params).fetchall()
            if time.monotonic() - self.pruned_at > _PRUNE_EVERY:
                self.pruned_at = time.monotonic()
                conn.execute(self._sql.prune_nodes, params)
            return [bytes(iid) for (iid,) in rows]

        with self._server.mapped():
            result = self._on_lease(run)
        return [] if result is _NO_LEASE else result  # type: ignore[return-value]
