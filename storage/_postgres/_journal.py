"""`PostgresJournal`: the journal on a PostgreSQL server, shared by several nodes.

The class ties together the pieces of this package, each with one job:

- `_server`: the DSN, connection settings and error messages;
- `_schema`: the tables, their migrations and every SQL statement;
- `_writer`, `_statements` and `_plan`: the committer thread and group commit;
- `_reader` and `_pool`: reads in one snapshot, on pooled connections;
- `_leases`: a node's lease, heartbeat, claims and takeovers;
- `_pump`: notices of mail from other nodes (LISTEN/NOTIFY).

Reads use pooled connections in REPEATABLE READ, READ ONLY transactions (a
consistent snapshot); ``read(fn)`` runs in a worker thread, limited to the
pool's size. psycopg's async API needs asyncio, so everything here uses its
sync API from threads.

Outages. While the server cannot be reached, reads and commits raise
`JournalUnavailable` (a commit after retrying for about a second; one whose
COMMIT may have been written first asks the server for its outcome for up
to five seconds) and nothing waits for a connection pool to back off: the
first read or commit after the server is back connects again, and the
lease and mail connections reconnect on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import psycopg
import trio

from .._journal import Durability, Journal, LostChains, Reader, Ticket, Txn, wait_for
from ..errors import JournalClosed, JournalLocked
from ._leases import _Lease
from ._migrations import migrate
from ._pool import _ReadPool
from ._pump import _MailPump
from ._reader import _PostgresReader
from ._readonly import open_read_only
from ._schema import _SQL, _writer_key
from ._server import _Server, _Threads
from ._writer import _Writer

__all__ = ["PostgresJournal"]

T = TypeVar("T")


class PostgresJournal(Journal):
    """The durable journal in schema ``schema`` of the PostgreSQL database at ``dsn``.

    Several journals, in this process or on other nodes, may open one schema
    at once: writes from all of them interleave safely (preconditions are
    checked under row locks, sequence numbers are allocated atomically).

    Args:
        dsn: a libpq connection string or URL, e.g.
            ``"postgresql://app@db.internal:5432/app"``.
        schema: the schema holding the journal's tables (created if missing).
        pool_size: connections for reads in worker threads; the journal also
            keeps one for its committer thread.
        durability: ``"sync"`` (an awaited commit returns once the server has
            flushed it) or ``"async"`` (once queued; the journal's
            transactions run with ``synchronous_commit = off``).
        lease_timeout: seconds after which the server ends the lease of a
            node that stopped answering (frozen, partitioned), so that other
            nodes take its instances over.
        readonly: open an existing journal for reading only, as the web
            inspector does: nothing is created, migrated or written (every
            session is read-only, and named ``actors inspector <schema>``
            unless the DSN names it), so a role with USAGE on the schema and
            SELECT on its tables is enough, beside running systems; a write
            raises `JournalClosed`.

    Raises (from ``open``):
        JournalUnavailable: the server cannot be reached; the message names
            the DSN.
        JournalCorrupt: the schema was written by a newer version (with
            ``readonly``: is missing, or is at any other version; the
            message names both).
        JournalLocked: another process runs as this node (see below).

    Nodes. With ``set_node(name)`` before ``open`` (what
    ``actors.open_system(..., node=name)`` does) the journal is one node of
    several sharing the schema, and each instance is owned by one live node:

    - *Lease.* A dedicated connection holds ``pg_try_advisory_lock`` on a
      stable 64-bit hash of (schema, node name), with ``idle_session_timeout``
      (PostgreSQL 14 or later) set to ``lease_timeout``; a heartbeat thread
      runs ``SELECT 1`` on it
      every quarter of that. A process that is frozen (SIGSTOP) or cut off
      stops answering, the server ends its session and the lock is free
      about ``lease_timeout`` later; a killed one frees it at once. (Never a
      blocking ``pg_advisory_lock`` from a thread: one given up on can still
      be granted later, a lock nobody knows it holds.) If the heartbeat
      finds the connection gone, it reconnects and takes the lock again;
      meanwhile other nodes may have claimed its instances, and fencing
      (below) refuses its writes to them. A process whose lease session
      alone is ended (``pg_terminate_backend`` of the ``actors lease
      <node>`` session, a proxy or firewall cutting that one connection)
      is a frozen node to the others, only sooner: its lock is free at
      once, so their next scan ends its committer sessions and takes its
      instances over, while it runs on, its lease believed held, until its
      heartbeat finds the session gone (within a quarter of
      ``lease_timeout``) and takes the lease again under a new term. Then,
      as after a freeze, its writes to what the others took meanwhile are
      refused (fencing) and the runtime lets go of what it claimed in the
      earlier term (see `lease_term`). Nothing tells the two apart, and
      nothing needs to. The committer's connection gets
      ``idle_in_transaction_session_timeout`` too, so a node frozen in the
      middle of a commit does not keep its row locks (which would stall
      every node writing those instances): the first round trip of a batch
      ends with a Sync, or the server would not count the wait for the rest
      as idle. A node frozen while the server waits for the rest of a
      statement (no Sync yet: the session is "active", no timeout applies)
      is ended by the others: each committer session holds a shared
      advisory lock keyed by its node, and the takeover scan (`orphans`)
      terminates the sessions holding the key of any node whose lease
      lapsed, before it claims (this needs every node to run as one
      database role, or ``pg_signal_backend``). So a node holds that key
      only while it holds its lease: ``open`` migrates first, takes the
      lease, and only then has the committer take the key (a node restarted
      under its own name, while the others scan and see its lease free, is
      never ended as it opens); the scan ends a node's sessions while it
      holds that node's lease lock itself, so it never ends those of a node
      that took its lease since the scan saw it free; and ``close`` gives
      the lease back once the committer's session is gone. Claims run with a short
      ``lock_timeout`` and try a busy row again. `lease_term` tells the
      runtime whether the lease holds, and since when (what this node holds
      in memory from an earlier term may be another node's now). The ``nodes`` table lists
      each node's name, lock key, NOTIFY channel and when it took its lease.
    - *Ownership.* A new instance belongs to the node that creates it, at
      epoch 0. `claim` makes this node the owner, with a new epoch (from a
      sequence, so epochs never repeat, even for an instance created again),
      unless another node owns it and that node's lease is held. Claiming an
      instance this node owns bumps the epoch as well: an older process
      running under the same node name is fenced out.
    - *Fencing.* `Txn.fence` is checked in the commit, under the same row
      locks as ``require``: the instance must still be owned by this node at
      that epoch, else that transaction fails with ``Conflict`` (reason
      ``"epoch"``) and the rest of the batch commits. An owner change (a
      claim) needs the row lock too, so a write is either before a takeover
      or refused after it, never half-way.
    - *Mail.* A transaction that appends a message to an instance another
      node owns also sends ``pg_notify`` to that node's channel (instance
      ids only, in hex, up to 200 per notice), so the notice leaves at
      COMMIT and only if it commits. Each node LISTENs on its channel on a
      connection of its own, pumped from the trio loop
      (``trio.lowlevel.wait_readable`` on its socket), and passes each id to
      the `on_mail` callbacks. Notices sent while that connection was down
      are lost, so after a reconnect every owned instance with mail is
      reported.
    - *Takeover.* `orphans` lists live instances whose owner's lease is free.
    - *Timers* need nothing here. Every node may see a due timer, but only
      the instance's owner runs the instance, and firing a timer is a fenced
      write that deletes its row in the transaction that logs the outcome;
      a node that is not the owner cannot claim the instance while the
      owner lives, and an owner that lost it cannot commit the firing. So a
      timer fires exactly once across nodes with no separate claim of the
      timer row (``SELECT ... FOR UPDATE SKIP LOCKED`` would only add a
      second, weaker lock beside the ownership the runtime needs anyway).
      A timer whose owner died fires when another node takes the instance
      over (`orphans`, or its own timer scan's claim).

    Without a node name the journal is a single owner, as LMDB is: `claim`
    gives 0 and fences always hold.
    """

    shared = True

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "actors",
        pool_size: int = 8,
        durability: Durability = "sync",
        lease_timeout: float = 1.0,
        readonly: bool = False,
    ) -> None:
        if not lease_timeout > 0:
            raise ValueError(f"lease_timeout must be positive seconds, not {lease_timeout!r}")
        if durability not in ("sync", "async"):
            raise ValueError(f"durability must be 'sync' or 'async', not {durability!r}")
        if not schema or len(schema.encode()) > 63 or "\x00" in schema:
            raise ValueError(
                f"schema must be a PostgreSQL identifier of 1 to 63 bytes, not {schema!r}"
            )
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, not {pool_size!r}")
        self.dsn = dsn
        self.schema = schema
        self.pool_size = pool_size
        self.durability = durability
        self.lease_timeout = lease_timeout
        self.readonly = readonly
        self.lost_chains = (
            LostChains()
        )  # see storage._txn.LostChains (not yet kept across batches here)
        self._server = _Server(dsn, schema, durability, lease_timeout)
        if readonly:
            self._server.read_only_sessions()
        self._sql = _SQL(schema)
        self._pool: _ReadPool | None = None
        self._threads: _Threads | None = None  # made at open, in the trio thread
        self._writer = _Writer(self._server, self._sql)
        # Nodes (see the class doc); unused without set_node.
        self._lease = _Lease(self._server, self._sql)
        self._mail = _MailPump(self._server, self._sql)

    @property
    def commits(self) -> int:
        """Database transactions the committer has committed (one per batch)."""
        return self._writer.commits

    # -- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None or self._writer.running:
            raise JournalLocked(
                f"{self.describe()} is already open; close it first, or create another "
                "PostgresJournal object (several may share one schema)"
            )
        if self.readonly and self.node is not None:
            raise ValueError(f"{self.describe()} is read-only; a node needs to write")
        self._threads = threads = _Threads(self.pool_size, lambda: self._writer.inflight)
        if self.readonly:  # no migration, no committer (see _readonly)
            with threads.holding():
                self._pool = await trio.to_thread.run_sync(
                    open_read_only, self._server, self.pool_size
                )
            return
        with threads.holding():
            self._pool, conn = await trio.to_thread.run_sync(self._open_sync)
        if self.node is not None:
            await self._open_node(threads, conn)
        self._writer.start(conn, threads)
        if self.node is not None:
            self._lease.start_heartbeat()
            self._mail.start(threads)

    def _open_sync(self) -> tuple[_ReadPool, psycopg.Connection]:
        # The committer's connection migrates, before it holds the writer
        # key (see _open_node_sync): a node may wait here for another one's
        # migration, or for its turn, for as long as that takes.
        conn = self._server.connect(writer_key=False)
        try:
            migrate(conn, self._server)
        except BaseException:
            conn.close()
            raise
        return _ReadPool(self._server, self.pool_size), conn

    async def _open_node(self, threads: _Threads, conn: psycopg.Connection) -> None:
        try:
            with threads.holding():
                await trio.to_thread.run_sync(self._open_node_sync, conn)
        except BaseException:
            conn.close()
            with trio.CancelScope(shield=True):
                await self.close()
            raise

    def _open_node_sync(self, conn: psycopg.Connection) -> None:
        # Invariant: a session holding this node's writer key while its lease
        # is free belongs to a process that lost the lease, and any node's
        # takeover scan may end it at any moment (_Lease.orphans_sync). So
        # the lease comes first, then the committer takes the key: a node
        # that opens (restarted under its own name, say, while the others
        # scan and see its lease free) never holds the key before its lease.
        self._lease.take_sync()
        self._server.take_writer_key(conn)
        self._mail.listen_sync()

    async def close(self) -> None:
        if self._pool is None:
            return
        await self._mail.stop()
        if self._writer.running:  # not with readonly
            await self._writer.stop()
        pool, self._pool = self._pool, None
        await trio.to_thread.run_sync(pool.close)
        # Last, once every write has drained: other nodes may take over now.
        await self._lease.release()
        self._mail.forget()
        if self._threads is not None:
            self._threads.close()

    def describe(self) -> str:
        return self._server.describe()

    def size_bytes(self) -> int | None:
        if self._pool is None:
            return None
        with self.reader() as r:
            assert isinstance(r, _PostgresReader)  # what reader() makes
            return r.size_bytes(self.schema)

    def _check_open(self) -> tuple[_ReadPool, _Threads]:
        pool = self._pool
        if pool is None or self._writer.closing:
            raise JournalClosed(
                f"{self.describe()} is not open; use it inside 'async with "
                "actors.open_system(...)' or 'async with journal:'"
            )
        assert self._threads is not None
        return pool, self._threads

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise JournalClosed(
                f"{self.describe()} is open read-only; open it without readonly=True to write"
            )

    # -- nodes (see the class doc) ---------------------------------------------

    def set_node(self, node: str) -> None:
        if not isinstance(node, str) or not node or "\x00" in node:
            raise ValueError(f"a node name is a non-empty string without NUL, not {node!r}")
        if self._pool is not None:
            raise ValueError(f"{self.describe()} is open; name its node before opening it")
        super().set_node(node)
        self._server.node = node
        self._server.writer_key = _writer_key(self.schema, node)

    async def claim(self, iid: bytes) -> int | None:
        _, threads = self._check_open()
        if self.node is None:
            return 0
        return await self._lease.claim(iid, threads)

    async def orphans(self, limit: int = 1000) -> list[bytes]:
        _, threads = self._check_open()
        if self.node is None or limit <= 0:
            return []
        return await threads.run(self._lease.orphans_sync, limit)

    def lease_term(self) -> int | None:
        if self.node is None:
            return 0
        return self._lease.current_term()

    async def clock(self) -> float | None:
        """The server's clock (``clock_timestamp()``), for a node; None
        without one (a single owner keeps its own wall clock)."""
        _, threads = self._check_open()
        if self.node is None:
            return None
        return await threads.run(self._clock_sync)

    def _clock_sync(self) -> float:
        with self.reader() as r:
            assert isinstance(r, _PostgresReader)  # what reader() makes
            return r.clock()

    def on_mail(self, callback: Callable[[bytes], None]) -> None:
        self._mail.on_mail(callback)

    # -- writing (see storage._postgres._writer) ---------------------------------

    def submit(self, txn: Txn) -> Ticket:
        self._check_writable()
        return self._writer.submit(txn, durable=False)

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        self._check_writable()
        # Waited for whatever the durability: a durable commit of an "async"
        # journal, and a fenced one (a precondition, like require).
        if (durable and self.durability == "async") or (txn.fences and self.node is not None):
            self._check_open()
            await trio.lowlevel.checkpoint_if_cancelled()  # cancelled: write nothing
            return await wait_for(self._writer.submit(txn, durable=bool(durable)), txn)
        return await super().commit(txn, durable=durable)

    async def flush(self) -> None:
        self._check_writable()
        await self._writer.submit(Txn(), durable=True).wait()

    # -- reading -----------------------------------------------------------

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        pool, _ = self._check_open()
        with self._server.mapped():
            reader = _PostgresReader(pool, self._sql, self.check_shapes)
            try:
                yield reader
            finally:
                reader.release()

    async def read(self, fn: Callable[[Reader], T]) -> T:
        _, threads = self._check_open()
        return await threads.run(self._read_sync, fn)

    def _read_sync(self, fn: Callable[[Reader], T]) -> T:
        with self.reader() as r:
            return fn(r)
