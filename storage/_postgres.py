"""`PostgresJournal`: the journal on a PostgreSQL server, shared by several nodes.

Layout, in a schema of the user's choosing (created and migrated on open,
its version kept in ``schema_version``):

=============  ====================================  ==========================
table          key                                   other columns
=============  ====================================  ==========================
instances      iid                                   address, process, status,
                                                     record, owner, epoch
log            iid, run, seq                         entry
mail           iid, seq                              message
timers         iid, run, seq (and an index on due)   due_us
stream         iid, idx                              value
cursors        iid, consumer                         position
counters       iid, kind (1 mail, 2 stream)          next
nodes          name                                  lock_key, channel,
                                                     started_at
=============  ====================================  ==========================

Ids and values are ``bytea`` (values are already encoded by `Txn`).
``counters.next`` is how many numbers the kind has handed out: the next
stream index, or the last mail sequence number (mail starts at 1).
``instances.owner`` and ``epoch`` (drawn from the sequence ``epochs``) and
the ``nodes`` table serve nodes sharing the schema (see `PostgresJournal`).

Group commit: one committer thread owns one connection. Transactions
submitted while a commit is in flight wait in the next batch; a batch is one
database transaction and one COMMIT, sent in pipeline mode, and then every
caller in it is woken by one `trio.Event` set through the trio token. A batch
costs at most two round trips, however many transactions it holds:

1. one statement locks the rows of the instances named by ``require``
   (sorted, so nodes take them in one order) and takes mail sequence numbers
   and stream indexes for the whole batch with one upsert on ``counters``
   (sorted too; the row locks it holds until COMMIT are what keep writers on
   any number of nodes from handing out one number twice). Then the
   preconditions of every transaction are checked in turn against the
   statuses the earlier ones leave behind; a transaction whose check fails
   is left out (its numbers are given back) and the rest go on;
2. every operation is written with a few statements over arrays (see
   `_Plan`) that keep each instance's operations in order, then COMMIT.

A batch with no preconditions and no appends skips the first round trip.
If a statement fails anyway (say a number out of ``bigint`` range), the
batch is retried with one SAVEPOINT per transaction, so only the failing
transaction fails. Savepoints are kept off the common path: each one that
writes takes a subtransaction id, and past 64 of them in one transaction
every snapshot on the server gets slower.

Reads use pooled connections in REPEATABLE READ, READ ONLY transactions (a
consistent snapshot); ``read(fn)`` runs in a worker thread, limited to the
pool's size. psycopg's async API needs asyncio, so everything here uses its
sync API from threads.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg.errors
import trio
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from . import _journal as j
from ._clock import AutojumpHold
from ._journal import InstanceRow, Journal, Reader, Ticket, TimerRow, Txn
from .errors import (
    Conflict,
    EncodeError,
    JournalClosed,
    JournalCorrupt,
    JournalFull,
    JournalLocked,
    JournalUnavailable,
)

__all__ = ["PostgresJournal"]

T = TypeVar("T")

_MAIL = 1
_STREAM = 2
_SET_COUNTER = -1  # a planner-made op: (op, iid, kind, next)
_ATTEMPTS = 6  # tries of one batch on a lost connection, deadlock or serialization failure
_PAGE = 1000  # rows per query when a reader iterates instances
_NOTICE_IDS = 200  # instance ids per NOTIFY payload: 33 bytes each, under the 8000-byte limit
_PRUNE_EVERY = 10.0  # seconds between sweeps of the nodes table for gone nodes
_NO_LEASE = object()  # another process holds this node's lease

log = logging.getLogger("storage.postgres")


# Invariant: a migration, once released, never changes; new ones are appended.
# "{s}" stands for the quoted schema name.
_MIGRATIONS: list[tuple[str, ...]] = [
    (  # 1: the initial layout
        """CREATE TABLE {s}.instances (
            iid bytea PRIMARY KEY, address text NOT NULL, process text NOT NULL,
            status smallint NOT NULL, record bytea NOT NULL,
            owner text NULL, epoch bigint NOT NULL DEFAULT 0)""",
        "CREATE INDEX instances_status ON {s}.instances (status, iid)",
        """CREATE TABLE {s}.log (iid bytea, run bigint, seq bigint, entry bytea NOT NULL,
            PRIMARY KEY (iid, run, seq))""",
        """CREATE TABLE {s}.mail (iid bytea, seq bigint, message bytea NOT NULL,
            PRIMARY KEY (iid, seq))""",
        """CREATE TABLE {s}.timers (iid bytea, run bigint, seq bigint, due_us bigint NOT NULL,
            PRIMARY KEY (iid, run, seq))""",
        "CREATE INDEX timers_due ON {s}.timers (due_us, iid, run, seq)",
        """CREATE TABLE {s}.stream (iid bytea, idx bigint, value bytea NOT NULL,
            PRIMARY KEY (iid, idx))""",
        """CREATE TABLE {s}.cursors (iid bytea, consumer text, position bigint NOT NULL,
            PRIMARY KEY (iid, consumer))""",
        """CREATE TABLE {s}.counters (iid bytea, kind smallint, next bigint NOT NULL,
            PRIMARY KEY (iid, kind))""",
    ),
    (  # 2: nodes sharing the schema (see "Nodes" in PostgresJournal's doc)
        """CREATE TABLE {s}.nodes (name text PRIMARY KEY, lock_key bigint NOT NULL,
            channel text NOT NULL, started_at timestamptz NOT NULL DEFAULT now())""",
        "CREATE SEQUENCE {s}.epochs",
        "CREATE INDEX instances_owner ON {s}.instances (owner) WHERE status IN (1, 2)",
    ),
]
SCHEMA_VERSION = len(_MIGRATIONS)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _SQL:
    """Every statement, with the schema filled in once."""

    def __init__(self, schema: str) -> None:
        s = _quote(schema)
        self.schema = s
        self.lock_instances = (
            f"SELECT iid, status, owner, epoch FROM {s}.instances WHERE iid = ANY(%b::bytea[]) "
            "ORDER BY iid FOR UPDATE"
        )
        self.allocate = (
            f"INSERT INTO {s}.counters AS c (iid, kind, next) "
            "SELECT * FROM unnest(%b::bytea[], %b::smallint[], %b::bigint[]) ORDER BY 1, 2 "
            "ON CONFLICT (iid, kind) DO UPDATE SET next = c.next + excluded.next "
            "RETURNING iid, kind, next"
        )
        self.lock_and_allocate = (
            f"WITH locked AS ({self.lock_instances}), taken AS ({self.allocate}) "
            "SELECT pg_current_xact_id()::text, "  # the select list runs left to right
            "coalesce((SELECT array_agg(iid ORDER BY iid) FROM locked), '{}'), "
            "coalesce((SELECT array_agg(status ORDER BY iid) FROM locked), '{}'), "
            "coalesce((SELECT array_agg(iid ORDER BY iid, kind) FROM taken), '{}'), "
            "coalesce((SELECT array_agg(kind ORDER BY iid, kind) FROM taken), '{}'), "
            "coalesce((SELECT array_agg(next ORDER BY iid, kind) FROM taken), '{}'), "
            "coalesce((SELECT array_agg(owner ORDER BY iid) FROM locked), '{}'), "
            "coalesce((SELECT array_agg(epoch ORDER BY iid) FROM locked), '{}')"
        )
        self.durable_commit = "SET LOCAL synchronous_commit = on"
        # A transaction id lets a commit whose connection broke be looked up, and
        # makes even an empty durable commit wait for the WAL.
        self.take_xid = "SELECT pg_current_xact_id()::text"

        # One statement per op code for any number of ops: each parameter is
        # an array, one item per op (see _params and _columns).
        def rows(*types: str) -> str:
            return "unnest(" + ", ".join(f"%b::{t}[]" for t in types) + ")"

        def upsert(table: str, cols: str, types: tuple[str, ...], key: str, sets: str) -> str:
            return (
                f"INSERT INTO {s}.{table} ({cols}) SELECT * FROM {rows(*types)} "
                f"ON CONFLICT ({key}) DO UPDATE SET {sets}"
            )

        def delete(table: str, cols: str, types: tuple[str, ...]) -> str:
            match = " AND ".join(f"d.{c} = u.{c}" for c in cols.split(", "))
            return f"DELETE FROM {s}.{table} d USING {rows(*types)} AS u({cols}) WHERE {match}"

        self.write: dict[int, str] = {
            j.PUT_INSTANCE: upsert(
                "instances", "iid, status, process, address, record",
                ("bytea", "smallint", "text", "text", "bytea"), "iid",
                "status = excluded.status, process = excluded.process, "
                "address = excluded.address, record = excluded.record",
            ),
            j.SET_STATUS: (
                f"UPDATE {s}.instances d SET status = u.status FROM {rows('bytea', 'smallint')} "
                "AS u(iid, status) WHERE d.iid = u.iid"
            ),
            j.DELETE_INSTANCE: (
                f"WITH u AS (SELECT * FROM {rows('bytea')} AS u(iid)), "
                + "".join(
                    f"{t}_ AS (DELETE FROM {s}.{t} WHERE iid IN (SELECT iid FROM u)), "
                    for t in ("log", "mail", "timers", "stream", "cursors", "counters")
                )
                + f"i_ AS (DELETE FROM {s}.instances WHERE iid IN (SELECT iid FROM u)) "
                "SELECT 1"
            ),
            j.PUT_LOG: upsert(
                "log", "iid, run, seq, entry", ("bytea", "bigint", "bigint", "bytea"),
                "iid, run, seq", "entry = excluded.entry",
            ),
            j.DROP_LOG: delete("log", "iid, run", ("bytea", "bigint")),
            j.APPEND_MESSAGE: (
                f"INSERT INTO {s}.mail (iid, seq, message) "
                f"SELECT * FROM {rows('bytea', 'bigint', 'bytea')}"
            ),
            j.TAKE_MESSAGE: delete("mail", "iid, seq", ("bytea", "bigint")),
            j.ADD_TIMER: upsert(
                "timers", "iid, run, seq, due_us", ("bytea", "bigint", "bigint", "bigint"),
                "iid, run, seq", "due_us = excluded.due_us",
            ),
            j.CANCEL_TIMER: delete("timers", "iid, run, seq", ("bytea", "bigint", "bigint")),
            j.APPEND_STREAM: (
                f"INSERT INTO {s}.stream (iid, idx, value) "
                f"SELECT * FROM {rows('bytea', 'bigint', 'bytea')}"
            ),
            j.SET_CURSOR: upsert(
                "cursors", "iid, consumer, position", ("bytea", "text", "bigint"),
                "iid, consumer", "position = excluded.position",
            ),
            _SET_COUNTER: upsert(
                "counters", "iid, kind, next", ("bytea", "smallint", "bigint"),
                "iid, kind", "next = excluded.next",
            ),
        }  # fmt: skip
        # A new instance belongs to the node that creates it (the committer's
        # session names it; see PostgresJournal._connect). An existing one
        # keeps its owner and epoch: only claim changes them.
        self.write[j.PUT_INSTANCE] = (
            f"INSERT INTO {s}.instances (iid, status, process, address, record, owner) "
            "SELECT u.*, nullif(current_setting('actors.node', true), '') FROM "
            f"{rows('bytea', 'smallint', 'text', 'text', 'bytea')} AS u "
            "ON CONFLICT (iid) DO UPDATE SET status = excluded.status, "
            "process = excluded.process, address = excluded.address, record = excluded.record"
        )
        # Reads.
        cols = f"SELECT iid, address, process, status, record FROM {s}.instances"
        self.instance = f"{cols} WHERE iid = %s"
        self.instances_page = {
            (False, False): f"{cols} WHERE (status, iid) > (%s, %s) ORDER BY status, iid LIMIT %s",
            (True, False): f"{cols} WHERE status = %s AND iid > %s ORDER BY iid LIMIT %s",
            (False, True): (
                f"{cols} WHERE (status, iid) > (%s, %s) AND process = %s "
                "ORDER BY status, iid LIMIT %s"
            ),
            (True, True): (
                f"{cols} WHERE status = %s AND iid > %s AND process = %s ORDER BY iid LIMIT %s"
            ),
        }
        self.count_by_status = f"SELECT status, count(*) FROM {s}.instances GROUP BY status"
        self.log = f"SELECT seq, entry FROM {s}.log WHERE iid = %s AND run = %s ORDER BY seq"
        self.log_runs = f"SELECT DISTINCT run FROM {s}.log WHERE iid = %s ORDER BY run"
        self.mailbox = f"SELECT seq, message FROM {s}.mail WHERE iid = %s ORDER BY seq"
        # A loose index scan: one probe per instance, not one row per message.
        self.instances_with_mail = (
            f"WITH RECURSIVE t(iid) AS ((SELECT iid FROM {s}.mail ORDER BY iid LIMIT 1) "
            f"UNION ALL SELECT (SELECT m.iid FROM {s}.mail m WHERE m.iid > t.iid "
            "ORDER BY m.iid LIMIT 1) FROM t WHERE t.iid IS NOT NULL) "
            "SELECT iid FROM t WHERE iid IS NOT NULL"
        )
        self.timers = (
            f"SELECT due_us, iid, run, seq FROM {s}.timers WHERE iid = %s ORDER BY due_us, run, seq"
        )
        self.due_timers = (
            f"SELECT due_us, iid, run, seq FROM {s}.timers WHERE due_us > %s AND due_us <= %s "
            "ORDER BY due_us, iid, run, seq LIMIT %s"
        )
        self.next_due = f"SELECT min(due_us) FROM {s}.timers WHERE due_us > %s"
        self.stream = (
            f"SELECT idx, value FROM {s}.stream WHERE iid = %s AND idx >= %s AND idx < %s "
            "ORDER BY idx"
        )
        self.stream_length = f"SELECT next FROM {s}.counters WHERE iid = %s AND kind = {_STREAM}"
        self.last_message_seq = f"SELECT next FROM {s}.counters WHERE iid = %s AND kind = {_MAIL}"
        self.cursors = f"SELECT consumer, position FROM {s}.cursors WHERE iid = %s"
        self.has_records = "SELECT " + " OR ".join(
            f"EXISTS (SELECT 1 FROM {s}.{table} WHERE iid = %(i)s)"
            for table in ("instances", "log", "mail", "timers", "stream", "cursors")
        )
        self.size = (
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'"
        )
        # Nodes (run on the node's lease connection, autocommit).
        # Whether node n's lease is free: try its lock, and give it straight
        # back. CASE fixes the order, so the lock is never left held (and a
        # node never tries its own key: that would succeed, locks nest).
        free = "CASE WHEN pg_try_advisory_lock({k}) THEN pg_advisory_unlock({k}) ELSE false END"
        self.register_node = (
            f"INSERT INTO {s}.nodes (name, lock_key, channel) VALUES (%s, %s, %s) "
            "ON CONFLICT (name) DO UPDATE SET lock_key = excluded.lock_key, "
            "channel = excluded.channel, started_at = now()"
        )
        epochs = "'" + f"{s}.epochs".replace("'", "''") + "'"
        self.claim = (
            f"UPDATE {s}.instances i SET owner = %(me)s, epoch = nextval({epochs}) "
            "WHERE i.iid = %(iid)s AND CASE WHEN i.owner IS NULL OR i.owner = %(me)s THEN true "
            "ELSE coalesce(("
            f"SELECT {free.format(k='n.lock_key')} FROM {s}.nodes n WHERE n.name = i.owner"
            "), true) END RETURNING i.epoch"
        )
        self.orphans = (
            f"WITH dead AS MATERIALIZED (SELECT name FROM {s}.nodes "
            f"WHERE name <> %(me)s AND {free.format(k='lock_key')}) "
            f"SELECT iid FROM {s}.instances WHERE status IN (1, 2) "
            "AND (owner IS NULL OR owner IN (SELECT name FROM dead)) LIMIT %(limit)s"
        )
        # Forget nodes that are gone and own nothing live (node names may be
        # generated, say one per container), so orphans() stays cheap.
        self.prune_nodes = (
            f"DELETE FROM {s}.nodes n WHERE n.name <> %(me)s AND NOT EXISTS ("
            f"SELECT 1 FROM {s}.instances i WHERE i.owner = n.name AND i.status IN (1, 2)) "
            f"AND {free.format(k='n.lock_key')}"
        )
        self.owned_with_mail = (
            f"SELECT i.iid FROM {s}.instances i WHERE i.owner = %s AND i.status IN (1, 2) "
            f"AND EXISTS (SELECT 1 FROM {s}.mail m WHERE m.iid = i.iid)"
        )
        self.notify = "SELECT pg_notify(c, p) FROM unnest(%s::text[], %s::text[]) AS u(c, p)"


def _params(op: tuple[Any, ...]) -> list[Any]:
    """One op's row of parameters; an append's number is filled in later."""
    if op[0] in (j.APPEND_MESSAGE, j.APPEND_STREAM):
        return [op[1], None, op[2]]
    return list(op[1:])


# The tables whose rows (of its instance) each op touches.
_ALL_TABLES = ("instances", "log", "mail", "timers", "stream", "cursors", "counters")
_TABLES: dict[int, tuple[str, ...]] = {
    j.PUT_INSTANCE: ("instances",), j.SET_STATUS: ("instances",), j.DELETE_INSTANCE: _ALL_TABLES,
    j.PUT_LOG: ("log",), j.DROP_LOG: ("log",),
    j.APPEND_MESSAGE: ("mail",), j.TAKE_MESSAGE: ("mail",),  # numbers are taken up front
    j.ADD_TIMER: ("timers",), j.CANCEL_TIMER: ("timers",),
    j.APPEND_STREAM: ("stream",), j.SET_CURSOR: ("cursors",), _SET_COUNTER: ("counters",),
}  # fmt: skip

# How many leading parameters make the key of an upsert's row: in one
# statement, a later op on a key replaces an earlier one.
_KEY_SIZE = {
    j.PUT_INSTANCE: 1, j.SET_STATUS: 1, j.PUT_LOG: 3, j.ADD_TIMER: 3, j.SET_CURSOR: 2,
    _SET_COUNTER: 2,
}  # fmt: skip


def _columns(code: int, rows: list[list[Any]]) -> list[list[Any]]:
    """The array parameters of op ``code``'s statement for ``rows``, in order."""
    size = _KEY_SIZE.get(code)
    if size is not None and len(rows) > 1:
        # Sorted by key, so nodes writing the same rows lock them in one order.
        rows = [row for _, row in sorted({tuple(r[:size]): r for r in rows}.items())]
    return [list(column) for column in zip(*rows)]


def _number(kind: int, count: int) -> int:
    """The ``count``-th number (from 1) a counter hands out: mail from 1, stream from 0."""
    return count if kind == _MAIL else count - 1


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


class _Batch:
    """Transactions that commit together, and the one event that wakes them."""

    __slots__ = ("durable", "event", "outcomes", "txns")

    def __init__(self) -> None:
        self.txns: list[Txn] = []
        self.outcomes: list[Any] = []  # per txn: list of results, or an exception
        self.event = trio.Event()
        self.durable = False  # wait for the WAL flush even on an "async" journal


class _Attempt:
    """One try at committing a batch: its outcomes once known, and whether the
    COMMIT was sent (so a lost connection leaves the outcome in doubt)."""

    __slots__ = ("committing", "outcomes", "xid")

    def __init__(self) -> None:
        self.outcomes: list[Any] | None = None
        self.committing = False
        self.xid: int | None = None  # the transaction's id, once the server has told it


class _Ticket(Ticket):
    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    @property
    def done(self) -> bool:
        return self._batch.event.is_set()

    async def wait(self) -> list[int]:
        await self._batch.event.wait()
        outcome = self._batch.outcomes[self._index]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class _Claim:
    """One caller's `PostgresJournal.claim`, answered with its batch."""

    __slots__ = ("done", "epoch", "error", "iid")

    def __init__(self, iid: bytes) -> None:
        self.iid = iid
        self.epoch: int | None = None
        self.error: Exception | None = None
        self.done = trio.Event()


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

    Raises (from ``open``):
        JournalUnavailable: the server cannot be reached; the message names
            the DSN.
        JournalCorrupt: the schema was written by a newer version.
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
      (below) refuses its writes to them. The committer's connection gets
      ``idle_in_transaction_session_timeout`` too, so a node frozen in the
      middle of a commit does not keep its row locks (which would stall
      every node writing those instances): the first round trip of a batch
      ends with a Sync, or the server would not count the wait for the rest
      as idle. The ``nodes`` table lists
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
        durability: str = "sync",
        lease_timeout: float = 1.0,
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
        self._sql = _SQL(schema)
        self._connect_kwargs: dict[str, Any] = {}
        try:
            given = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"{_safe_dsn(dsn)!r} is not a valid PostgreSQL DSN: {exc}") from None
        if "connect_timeout" not in given:
            self._connect_kwargs["connect_timeout"] = 10
        if "application_name" not in given:  # so pg_stat_activity says whose it is
            self._connect_kwargs["application_name"] = f"actors journal {schema}"[:63]
        self._pool: ConnectionPool | None = None
        self._limiter: trio.CapacityLimiter | None = None
        self._conn: psycopg.Connection | None = None  # the committer's; its thread's only
        self._cond = threading.Condition()
        self._pending: _Batch | None = None  # guarded by _cond
        self._closing = False  # guarded by _cond
        self._writer: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._inflight = 0  # batches submitted and not yet finished (trio thread)
        self._hold: AutojumpHold | None = None
        self._force_savepoints = False  # tests: take the per-transaction SAVEPOINT path
        self.commits = 0
        """Database transactions the committer has committed (one per batch)."""
        # Nodes (see the class doc); all unused without set_node.
        self.lease_timeout = lease_timeout
        self._lease_mutex = threading.Lock()
        self._lease_conn: psycopg.Connection | None = None  # guarded by _lease_mutex
        self._leasing = False  # between open and close; guarded by _lease_mutex
        self._lease_taken_elsewhere = False  # (warned that) another process holds it
        self._heartbeat_thread: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()
        self._listen_conn: psycopg.Connection | None = None  # the pump's
        self._listen_notices: list[str] = []  # its notices, gathered while psycopg reads
        self._pump_scope: trio.CancelScope | None = None
        self._pump_done: trio.Event | None = None
        self._mail_callbacks: list[Callable[[bytes], None]] = []
        self._mail_backlog: dict[bytes, None] = {}  # noticed before any callback
        self._claims: list[_Claim] = []  # waiting for the next claim batch
        self._claiming = False  # a task is running claim batches
        self._pruned_at = 0.0

    # -- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None or self._writer is not None:
            raise JournalLocked(
                f"{self.describe()} is already open; close it first, or create another "
                "PostgresJournal object (several may share one schema)"
            )
        self._token = trio.lowlevel.current_trio_token()
        self._hold = AutojumpHold.current()
        self._limiter = trio.CapacityLimiter(self.pool_size)
        with self._holding():
            self._pool = await trio.to_thread.run_sync(self._open_sync)
        self._closing = False
        self._writer = threading.Thread(
            target=self._write_loop, name=f"journal-writer {self.schema}", daemon=True
        )
        self._writer.start()
        if self.node is not None:
            await self._open_node()

    def _open_sync(self) -> ConnectionPool:
        conn = self._connect()
        try:
            self._migrate(conn)
            pool = ConnectionPool(
                self.dsn,
                min_size=1,
                max_size=self.pool_size,
                kwargs=self._connect_kwargs,
                configure=_configure_reader,
                open=False,
                name=f"journal {self.schema}",
            )
            try:
                pool.open(wait=True, timeout=30)
            except PoolTimeout as exc:
                pool.close()
                raise self._unreachable(exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return pool

    def _connect(self) -> psycopg.Connection:
        try:
            # Autocommit: the committer sends BEGIN and COMMIT itself, inside the
            # pipeline, which costs no round trip of its own.
            conn = psycopg.Connection.connect(self.dsn, autocommit=True, **self._connect_kwargs)
            if self.durability == "async":
                conn.execute("SET synchronous_commit = off")
            if self.node is not None:
                # New instances this connection writes belong to this node
                # (see _SQL.write); and a node frozen mid-commit must not
                # keep its row locks past its lease.
                conn.execute("SELECT set_config('actors.node', %s, false)", [self.node])
                conn.execute(f"SET idle_in_transaction_session_timeout = {self._lease_ms}")
        except psycopg.Error as exc:
            raise self._unreachable(exc) from exc
        return conn

    def _unreachable(self, exc: BaseException) -> JournalUnavailable:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return JournalUnavailable(
            f"cannot connect to PostgreSQL at {_safe_dsn(self.dsn)!r} ({reason}); start the server, "
            "or point the journal at a running one with "
            "PostgresJournal('postgresql://USER@HOST:PORT/DATABASE')"
        )

    def _migrate(self, conn: psycopg.Connection) -> None:
        """Bring the schema to `SCHEMA_VERSION`; safe to run from several nodes at once."""
        s = self._sql.schema
        key = int.from_bytes(
            hashlib.blake2b(f"actors journal {self.schema}".encode(), digest_size=8).digest(),
            "big",
            signed=True,
        )
        try:
            with conn.transaction(), conn.cursor() as cur:
                # Nodes opening one schema together migrate it one after the other.
                cur.execute("SELECT pg_advisory_xact_lock(%s)", [key])
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())"
                )
                cur.execute(f"SELECT coalesce(max(version), 0) FROM {s}.schema_version")
                (current,) = cur.fetchone()  # type: ignore[misc]
                if current > SCHEMA_VERSION:
                    raise JournalCorrupt(
                        f"schema {self.schema!r} at {_safe_dsn(self.dsn)!r} is at version "
                        f"{current}, and this version of the library knows up to "
                        f"{SCHEMA_VERSION}; upgrade the library, or use another schema",
                        database="schema_version",
                        key=str(current),
                    )
                for version in range(current + 1, SCHEMA_VERSION + 1):
                    for statement in _MIGRATIONS[version - 1]:
                        cur.execute(statement.format(s=s))
                    cur.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", [version])
        except psycopg.OperationalError as exc:
            raise self._unreachable(exc) from exc
        except psycopg.Error as exc:
            raise JournalCorrupt(
                f"cannot create or migrate schema {self.schema!r} at {_safe_dsn(self.dsn)!r}: {exc}",
                database="schema_version",
            ) from exc

    async def close(self) -> None:
        if self._pool is None:
            return
        await self._stop_pump()
        writer = self._writer
        with self._cond:
            self._closing = True
            self._cond.notify()
        if writer is not None:
            # The writer drains every pending batch before it exits.
            await trio.to_thread.run_sync(writer.join)
        # Let the finish callbacks the writer queued run first.
        while self._inflight:
            await trio.lowlevel.checkpoint()
        self._writer = None
        pool, self._pool = self._pool, None
        await trio.to_thread.run_sync(pool.close)
        # Last, once every write has drained: other nodes may take over now.
        await self._release_lease()

    def describe(self) -> str:
        return f"PostgresJournal({_safe_dsn(self.dsn)!r}, schema={self.schema!r})"

    def size_bytes(self) -> int | None:
        if self._pool is None:
            return None
        with self.reader() as r:
            return r._one(self._sql.size, [self.schema])  # type: ignore[attr-defined]

    def _check_open(self) -> ConnectionPool:
        pool = self._pool
        if pool is None or self._closing:
            raise JournalClosed(
                f"{self.describe()} is not open; use it inside 'async with "
                "actors.open_system(...)' or 'async with journal:'"
            )
        return pool

    @contextmanager
    def _holding(self) -> Iterator[None]:
        if self._hold is None:
            yield
            return
        self._hold.acquire()
        try:
            yield
        finally:
            self._hold.release()

    # -- nodes (see the class doc) ---------------------------------------------

    def set_node(self, node: str) -> None:
        if not isinstance(node, str) or not node or "\x00" in node:
            raise ValueError(f"a node name is a non-empty string without NUL, not {node!r}")
        if self._pool is not None:
            raise ValueError(f"{self.describe()} is open; name its node before opening it")
        super().set_node(node)

    @property
    def _lease_ms(self) -> int:
        return max(1, round(self.lease_timeout * 1000))

    def _node_connect(self, role: str) -> psycopg.Connection:
        """A connection of this node's own (lease or mail), autocommit, that
        notices a dead server within seconds rather than TCP's hours."""
        kwargs = dict(self._connect_kwargs)
        if "application_name" in kwargs:  # the DSN did not name one
            kwargs["application_name"] = f"actors {role} {self.node}"[:63]
        given = conninfo_to_dict(self.dsn)
        defaults = {
            "keepalives": 1, "keepalives_idle": 2, "keepalives_interval": 1,
            "keepalives_count": 3, "tcp_user_timeout": max(2000, 4 * self._lease_ms),
        }  # fmt: skip
        kwargs.update({k: v for k, v in defaults.items() if k not in given})
        try:
            return psycopg.Connection.connect(self.dsn, autocommit=True, **kwargs)
        except psycopg.Error as exc:
            raise self._unreachable(exc) from exc

    def _take_lease(self, wait: float = 0.0) -> psycopg.Connection | None:
        """A new lease connection holding this node's lock (trying for up to
        ``wait`` seconds), or None if another session holds it. The caller
        holds ``_lease_mutex``."""
        assert self.node is not None
        key = _node_key(self.schema, self.node)
        conn = self._node_connect("lease")
        try:
            conn.execute(f"SET idle_session_timeout = {self._lease_ms}")
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
            channel = _channel(self.schema, self.node)
            conn.execute(self._sql.register_node, [self.node, key, channel])
        except psycopg.OperationalError as exc:
            conn.close()
            raise self._unreachable(exc) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _on_lease(self, fn: Callable[[psycopg.Connection], T]) -> T | object:
        """Run ``fn`` on the lease connection, taking the lease again first if
        the connection was lost. Returns `_NO_LEASE` if the journal is closing
        or another process holds this node's lease; raises `JournalUnavailable`
        if the server cannot be reached."""
        with self._lease_mutex:
            for attempt in range(2):
                if not self._leasing:
                    return _NO_LEASE
                conn = self._lease_conn
                if conn is None or conn.closed or conn.broken:
                    self._drop_lease()
                    conn = self._take_lease()
                    if conn is None:
                        if not self._lease_taken_elsewhere:
                            self._lease_taken_elsewhere = True
                            log.warning(
                                "node %r lost its lease on %s and another process holds it "
                                "now; this one claims no instances until it gets it back",
                                self.node, self.describe(),
                            )  # fmt: skip
                        return _NO_LEASE
                    self._lease_taken_elsewhere = False
                    self._lease_conn = conn
                    log.warning(
                        "node %r took its lease on %s again after losing it; instances "
                        "other nodes took over meanwhile refuse its writes (fencing)",
                        self.node, self.describe(),
                    )  # fmt: skip
                try:
                    return fn(conn)
                except psycopg.OperationalError as exc:
                    if not (conn.broken or conn.closed):
                        raise
                    self._drop_lease()
                    if attempt:
                        raise self._unreachable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop_lease(self) -> None:
        """Close the lease connection (ending the session frees its lock)."""
        conn, self._lease_conn = self._lease_conn, None
        if conn is not None:
            conn.close()

    def _heartbeat(self) -> None:
        """Keep the lease session busy, so only a stuck process loses it."""
        interval = self.lease_timeout / 4
        failing = False
        while not self._heartbeat_stop.wait(interval):
            try:
                self._on_lease(lambda conn: conn.execute("SELECT 1"))
            except Exception as exc:  # noqa: BLE001 - keep beating; the next try reconnects
                if not failing:
                    log.warning("node %r: lease heartbeat failed: %s", self.node, exc)
                failing = True
            else:
                failing = False

    async def _open_node(self) -> None:
        try:
            with self._holding():
                await trio.to_thread.run_sync(self._open_node_sync)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.close()
            raise
        self._heartbeat_stop.clear()
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat, name=f"journal-lease {self.node}", daemon=True
        )
        self._heartbeat_thread.start()
        self._pump_scope = scope = trio.CancelScope()
        self._pump_done = done = trio.Event()
        trio.lowlevel.spawn_system_task(self._pump, scope, done, name=f"journal mail {self.node}")

    def _open_node_sync(self) -> None:
        with self._lease_mutex:
            conn = self._take_lease(wait=self.lease_timeout)
            if conn is None:
                raise JournalLocked(
                    f"node {self.node!r} is already running on {self.describe()} (another "
                    "process holds its lease); stop that process, or give this one "
                    "another node name"
                )
            self._lease_conn, self._leasing = conn, True
        self._listen_conn, self._listen_notices, _ = self._listen_sync(rescan=False)

    async def _release_lease(self) -> None:
        self._heartbeat_stop.set()
        thread, self._heartbeat_thread = self._heartbeat_thread, None
        if thread is not None:
            await trio.to_thread.run_sync(thread.join)

        def release() -> None:
            with self._lease_mutex:
                self._leasing = False
                conn = self._lease_conn
                if conn is not None and not (conn.closed or conn.broken) and self.node is not None:
                    key = _node_key(self.schema, self.node)
                    try:  # at once, rather than when the server notices the session end
                        conn.execute("SELECT pg_advisory_unlock(%s)", [key])
                    except psycopg.Error:
                        pass
                self._drop_lease()

        await trio.to_thread.run_sync(release)
        self._mail_callbacks.clear()
        self._mail_backlog.clear()

    async def claim(self, iid: bytes) -> int | None:
        self._check_open()
        if self.node is None:
            return 0
        # Claims that arrive while a batch is in flight go in the next one:
        # one round trip (one statement per instance, pipelined) serves many.
        request = _Claim(iid)
        self._claims.append(request)
        if not self._claiming:
            self._claiming = True
            try:
                with trio.CancelScope(shield=True), self._holding():
                    while self._claims:
                        batch, self._claims = self._claims, []
                        try:
                            epochs = await trio.to_thread.run_sync(
                                self._claim_sync, [r.iid for r in batch], limiter=self._limiter
                            )
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

        def run(conn: psycopg.Connection) -> dict[bytes, int]:
            # One statement, one transaction per instance (a Sync after each):
            # a claim holds one row lock at a time, so it never deadlocks.
            if len(unique) == 1:
                row = conn.execute(self._sql.claim, {"me": self.node, "iid": unique[0]}).fetchone()
                return {} if row is None else {unique[0]: row[0]}
            with conn.pipeline() as pipeline:
                cursors = []
                for iid in unique:
                    cursors.append(conn.execute(self._sql.claim, {"me": self.node, "iid": iid}))
                    pipeline.sync()
            found = {}
            for iid, cur in zip(unique, cursors):
                row = cur.fetchone()
                if row is not None:
                    found[iid] = row[0]
            return found

        with _mapped(self):
            result = self._on_lease(run)
        return {} if result is _NO_LEASE else result  # type: ignore[return-value]

    async def orphans(self, limit: int = 1000) -> list[bytes]:
        self._check_open()
        if self.node is None or limit <= 0:
            return []
        with self._holding():
            return await trio.to_thread.run_sync(self._orphans_sync, limit, limiter=self._limiter)

    def _orphans_sync(self, limit: int) -> list[bytes]:
        def run(conn: psycopg.Connection) -> list[bytes]:
            params = {"me": self.node, "limit": limit}
            rows = conn.execute(self._sql.orphans, params).fetchall()
            if time.monotonic() - self._pruned_at > _PRUNE_EVERY:
                self._pruned_at = time.monotonic()
                conn.execute(self._sql.prune_nodes, params)
            return [bytes(iid) for (iid,) in rows]

        with _mapped(self):
            result = self._on_lease(run)
        return [] if result is _NO_LEASE else result  # type: ignore[return-value]

    def on_mail(self, callback: Callable[[bytes], None]) -> None:
        self._mail_callbacks.append(callback)
        if self._mail_backlog:
            backlog = list(self._mail_backlog)
            self._mail_backlog.clear()
            self._deliver_mail(backlog)

    def _deliver_mail(self, iids: list[bytes]) -> None:
        """Hand noticed instance ids to the callbacks (in the trio thread)."""
        if not self._mail_callbacks:
            self._mail_backlog.update(dict.fromkeys(iids))
            return
        for iid in dict.fromkeys(iids):
            for callback in list(self._mail_callbacks):
                try:
                    callback(iid)
                except Exception:  # noqa: BLE001 - one bad callback does not stop the pump
                    log.exception("on_mail callback failed for instance %s", iid.hex())

    def _listen_sync(self, *, rescan: bool) -> tuple[psycopg.Connection, list[str], list[bytes]]:
        """A new LISTEN connection on this node's channel, the list its
        notices are gathered in while psycopg runs a query on it, and (with
        ``rescan``) every live instance this node owns that has mail."""
        assert self.node is not None
        conn = self._node_connect("mail")
        notices: list[str] = []
        try:
            conn.add_notify_handler(lambda n: notices.append(n.payload))
            conn.execute(f'LISTEN "{_channel(self.schema, self.node)}"')
            owned = []
            if rescan:  # after LISTEN: nothing falls between the two
                rows = conn.execute(self._sql.owned_with_mail, [self.node]).fetchall()
                owned = [bytes(iid) for (iid,) in rows]
        except psycopg.OperationalError as exc:
            conn.close()
            raise self._unreachable(exc) from exc
        except BaseException:
            conn.close()
            raise
        return conn, notices, owned

    async def _pump(self, scope: trio.CancelScope, done: trio.Event) -> None:
        """The LISTEN pump: a system task in the trio loop, until `close`."""
        delay = 0.05
        try:
            with scope:
                while True:
                    conn, notices = self._listen_conn, self._listen_notices
                    if conn is None:
                        try:
                            with self._holding():
                                conn, notices, owned = await trio.to_thread.run_sync(
                                    lambda: self._listen_sync(rescan=True), limiter=self._limiter
                                )
                        except Exception as exc:  # noqa: BLE001 - retry until close
                            log.warning("node %r: mail connection: %s", self.node, exc)
                            await trio.sleep(delay)
                            delay = min(2 * delay, 1.0)
                            continue
                        delay = 0.05
                        self._listen_conn, self._listen_notices = conn, notices
                        self._deliver_mail(owned)
                    try:
                        pgconn = conn.pgconn
                        while (n := pgconn.notifies()) is not None:  # already buffered
                            notices.append(n.extra.decode())
                        if not notices:
                            await trio.lowlevel.wait_readable(conn.fileno())
                            pgconn.consume_input()  # raises once the connection is gone
                            while (n := pgconn.notifies()) is not None:
                                notices.append(n.extra.decode())
                    except (psycopg.Error, OSError) as exc:
                        log.warning(
                            "node %r lost its mail connection (%s); reconnecting",
                            self.node, str(exc).strip(),
                        )  # fmt: skip
                        self._listen_conn = None
                        conn.close()
                        continue
                    iids = []
                    for payload in notices:
                        for word in payload.split():
                            try:
                                iids.append(bytes.fromhex(word))
                            except ValueError:
                                pass  # not ours: someone else notified the channel
                    notices.clear()
                    self._deliver_mail(iids)
        except Exception:  # pragma: no cover - a system task must not raise
            log.exception("node %r: mail pump failed; notices from other nodes stop", self.node)
        finally:
            conn, self._listen_conn = self._listen_conn, None
            if conn is not None:
                conn.close()
            done.set()

    async def _stop_pump(self) -> None:
        scope, self._pump_scope = self._pump_scope, None
        if scope is not None:
            scope.cancel()
            assert self._pump_done is not None
            await self._pump_done.wait()
        elif self._listen_conn is not None:  # opened, but the pump never started
            conn, self._listen_conn = self._listen_conn, None
            conn.close()

    def _watched(self, txns: list[Txn]) -> set[bytes]:
        """Instances whose owner a batch must lock and read: those fenced,
        and those it appends mail to (to notify their owner)."""
        if self.node is None:
            return set()
        found = {iid for t in txns for iid, _ in t.fences}
        for t in txns:
            found.update(op[1] for op in t.ops if op[0] == j.APPEND_MESSAGE)
        return found

    def _check_fences(self, txn: Txn, owned: dict[bytes, tuple[str | None, int] | None]) -> None:
        if self.node is None:
            return
        for iid, epoch in txn.fences:
            found = owned.get(iid)
            if found != (self.node, epoch):
                now = (
                    "it is gone" if found is None
                    else f"node {found[0]!r} owns it at epoch {found[1]}"
                )  # fmt: skip
                raise Conflict(
                    f"node {self.node!r} no longer owns instance {iid.hex()} at epoch {epoch} "
                    f"({now}); another node took it over, so this write is refused",
                    reason="epoch",
                )

    def _notices(
        self,
        txns: list[Txn],
        outcomes: list[Any],
        owned: dict[bytes, tuple[str | None, int] | None],
    ) -> list[list[str]] | None:
        """The (channels, payloads) of a batch's pg_notify calls: the mail it
        appends for instances that other nodes own."""
        if self.node is None:
            return None
        by_owner: dict[str, set[str]] = {}
        for txn, outcome in zip(txns, outcomes):
            if outcome is not None:
                continue
            for op in txn.ops:
                if op[0] == j.APPEND_MESSAGE:
                    found = owned.get(op[1])
                    if found is not None and found[0] is not None and found[0] != self.node:
                        by_owner.setdefault(found[0], set()).add(op[1].hex())
        channels: list[str] = []
        payloads: list[str] = []
        for owner, ids in by_owner.items():
            ordered = sorted(ids)
            for k in range(0, len(ordered), _NOTICE_IDS):
                channels.append(_channel(self.schema, owner))
                payloads.append(" ".join(ordered[k : k + _NOTICE_IDS]))
        return [channels, payloads] if channels else None

    # -- writing -----------------------------------------------------------

    def submit(self, txn: Txn) -> Ticket:
        return self._submit(txn, durable=False)

    def _submit(self, txn: Txn, *, durable: bool) -> Ticket:
        self._check_open()
        with self._cond:
            batch = self._pending
            if batch is None:
                batch = self._pending = _Batch()
                self._inflight += 1
                if self._inflight == 1 and self._hold is not None:
                    self._hold.acquire()
                self._cond.notify()
            batch.txns.append(txn)
            batch.durable = batch.durable or durable
            return _Ticket(batch, len(batch.txns) - 1)

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        if durable and self.durability == "async":
            return await self._submit(txn, durable=True).wait()
        if txn.fences and self.node is not None:  # a precondition, like require
            return await self._submit(txn, durable=bool(durable)).wait()
        return await super().commit(txn, durable=durable)

    async def flush(self) -> None:
        await self._submit(Txn(), durable=True).wait()

    def _finish(self, batch: _Batch) -> None:
        # Runs in the trio thread (via the token), once per batch.
        self._inflight -= 1
        if self._inflight == 0 and self._hold is not None:
            self._hold.release()
        batch.event.set()

    def _write_loop(self) -> None:
        try:
            while True:
                with self._cond:
                    while self._pending is None and not self._closing:
                        self._cond.wait()
                    batch = self._pending
                    self._pending = None
                    if batch is None:
                        return
                self._write(batch)
                assert self._token is not None
                try:
                    self._token.run_sync_soon(self._finish, batch)
                except trio.RunFinishedError:  # pragma: no cover - loop already gone
                    return
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _write(self, batch: _Batch) -> None:
        """Commit ``batch`` and set its outcomes; never raises."""
        txns = batch.txns
        durable = batch.durable and self.durability == "async"
        fenced = self.node is not None and any(t.fences for t in txns)
        if not durable and not fenced and not any(t.ops or t.requires for t in txns):
            batch.outcomes = [[] for _ in txns]  # a flush: every earlier batch is durable
            return
        failure: BaseException | None = None
        for attempt in range(_ATTEMPTS):
            if attempt:
                time.sleep(min(0.02 * 2**attempt, 1.0) * random.uniform(0.5, 1.0))
            try:
                conn = self._writer_connection()
            except JournalUnavailable as exc:
                failure = exc
                continue
            run = _Attempt()
            try:
                if not self._force_savepoints:
                    try:
                        self._run_batch(conn, txns, durable, run)
                    except psycopg.errors.TransactionRollback:
                        raise
                    except psycopg.Error:
                        if conn.broken:
                            raise
                        # A statement failed: find out which transaction's it was.
                        _rollback(conn)
                        run = _Attempt()
                if run.outcomes is None:
                    self._run_with_savepoints(conn, txns, durable, run)
                batch.outcomes = run.outcomes  # type: ignore[assignment]
                self.commits += 1
                return
            except psycopg.errors.TransactionRollback as exc:
                # A deadlock with another node, or a serialization failure:
                # nothing was committed; run the batch again.
                _rollback(conn)
                failure = JournalUnavailable(f"commit to {self.describe()} kept failing: {exc}")
                failure.__cause__ = exc
            except psycopg.Error as exc:
                if not (conn.broken or conn.closed):
                    _rollback(conn)
                    failure = _txn_error(exc, self.describe())
                    break
                failure = self._unreachable(exc)
                failure.__cause__ = exc
                if run.committing:
                    committed = self._committed(run, txns)
                    if committed:
                        batch.outcomes = run.outcomes  # type: ignore[assignment]
                        self.commits += 1
                        return
                    if committed is None:
                        failure = JournalUnavailable(
                            f"the connection to {self.describe()} was lost during COMMIT "
                            f"({exc}); whether these transactions were written is unknown"
                        )
                        failure.__cause__ = exc
                        break
                # Lost before COMMIT: the server rolled the transaction back.
            except Exception as exc:  # a bug here: every caller learns of it
                _rollback(conn)
                failure = JournalCorrupt(
                    f"commit to {self.describe()} failed: {exc!r}", database="", key=b""
                )
                failure.__cause__ = exc
                break
        assert failure is not None
        batch.outcomes = [failure] * len(txns)

    def _committed(self, run: _Attempt, txns: list[Txn]) -> bool | None:
        """After the connection broke during COMMIT: did it commit? None if unknown."""
        if run.xid is None:
            # Without appends a batch is idempotent: running it again is safe.
            appends = (j.APPEND_MESSAGE, j.APPEND_STREAM)
            return None if any(op[0] in appends for t in txns for op in t.ops) else False
        for _ in range(50):
            try:
                conn = self._writer_connection()
                state = conn.execute("SELECT pg_xact_status(%s::text::xid8)", [run.xid]).fetchone()
            except (psycopg.Error, JournalUnavailable):
                return None
            if state is not None and state[0] == "committed":
                return True
            if state is not None and state[0] == "aborted":
                return False
            time.sleep(0.01)  # "in progress": the old backend is still ending
        return None

    def _writer_connection(self) -> psycopg.Connection:
        conn = self._conn
        if conn is not None and not (conn.closed or conn.broken):
            return conn
        if conn is not None:
            conn.close()
            self._conn = None
        self._conn = self._connect()
        return self._conn

    def _run_batch(
        self, conn: psycopg.Connection, txns: list[Txn], durable: bool, run: _Attempt
    ) -> None:
        """The fast path: the whole batch in one pipelined transaction."""
        sql = self._sql
        outcomes: list[Any] = [None] * len(txns)
        plan = _Plan()
        for txn in txns:
            plan.add(txn.ops)  # as if no precondition fails; redone below if one does
        required = sorted({iid for t in txns for iid, _, _ in t.requires} | self._watched(txns))
        with conn.pipeline() as pipeline:
            conn.execute("BEGIN")
            if durable:
                conn.execute(sql.durable_commit)
            totals: dict[tuple[bytes, int], int] = {}
            if required or plan.wanted:
                # 1. One round trip: lock the instances named by preconditions,
                # then take sequence numbers for every append (both in key order).
                first = conn.execute(sql.lock_and_allocate, [required, *plan.allocation()])
                # A Sync, not just a flush: the server then counts the wait for
                # our next message as idle in transaction, so a node frozen
                # here loses these row locks after lease_timeout (see _connect).
                pipeline.sync()
                row = first.fetchone()
                assert row is not None
                xid, locked, statuses, iids, kinds, counts, owners, epochs = row
                run.xid = int(xid)
                totals = dict(zip(zip(iids, kinds), counts))
            elif durable:
                conn.execute(sql.take_xid)  # so that even an empty commit waits for the WAL
            # 2. Preconditions, in submission order, against the statuses the
            # earlier transactions of the batch leave behind.
            owned: dict[bytes, tuple[str | None, int] | None] = {}
            if required:
                status: dict[bytes, int | None] = dict.fromkeys(required)
                status.update(zip(locked, statuses))
                owned = dict.fromkeys(required)
                owned.update(zip(locked, zip(owners, epochs)))
                for i, txn in enumerate(txns):
                    try:
                        j.check_requires(txn.requires, status.get)
                        self._check_fences(txn, owned)
                    except Conflict as exc:
                        outcomes[i] = exc
                        continue
                    for op in txn.ops:
                        if op[1] in status:
                            _track_owner(owned, op, self.node)
                            _track_status(status, op)
            # Before the batch, each counter stood at its total less what we took.
            before = {key: n - plan.wanted[key] for key, n in totals.items()}
            if any(outcomes):
                # Some transactions are out: number the others' appends without
                # gaps and put each counter back to what they used. Nobody else
                # saw the over-allocation: we hold the counter rows' locks.
                taken = plan.wanted
                plan = _Plan()
                for i, txn in enumerate(txns):
                    if outcomes[i] is None:
                        plan.add(txn.ops)
                fixes = [
                    [iid, kind, n + plan.wanted.get((iid, kind), 0)]
                    for (iid, kind), n in before.items()
                    if plan.wanted.get((iid, kind), 0) != taken[(iid, kind)]
                ]
                if fixes:
                    conn.execute(sql.write[_SET_COUNTER], _columns(_SET_COUNTER, fixes))
                missing = [key for key in plan.wanted if key not in before]
                if missing:  # appends that followed a delete that is out
                    more = conn.execute(sql.allocate, plan.allocation(missing))
                    pipeline.sync()  # as above
                    for iid, kind, n in more.fetchall():
                        before[(iid, kind)] = n - plan.wanted[(iid, kind)]
            plan.number(before)
            # 3. Every write, in order per instance, then one COMMIT.
            for code, rows in plan.groups():
                conn.execute(sql.write[code], _columns(code, rows))
            notices = self._notices(txns, outcomes, owned)
            if notices:  # sent by the server at COMMIT, and only if it commits
                conn.execute(sql.notify, notices)
            appends = iter(plan.appends)
            run.outcomes = [o if o is not None else [c[1] for c in next(appends)] for o in outcomes]
            run.committing = True
            conn.execute("COMMIT")  # sent, with everything before it, as the pipeline ends

    def _run_with_savepoints(
        self, conn: psycopg.Connection, txns: list[Txn], durable: bool, run: _Attempt
    ) -> None:
        """The slow path: one SAVEPOINT per transaction, so a failing one fails alone."""
        sql = self._sql
        outcomes: list[Any] = []
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            if durable:
                cur.execute(sql.durable_commit)
            run.xid = int(cur.execute(sql.take_xid).fetchone()[0])  # type: ignore[index]
            for txn in txns:
                cur.execute("SAVEPOINT txn")
                try:
                    watched = self._watched([txn])
                    owned: dict[bytes, tuple[str | None, int] | None] = dict.fromkeys(watched)
                    if txn.requires or watched:
                        cur.execute(
                            sql.lock_instances,
                            [sorted({iid for iid, _, _ in txn.requires} | watched)],
                        )
                        rows = cur.fetchall()
                        found = {row[0]: row[1] for row in rows}
                        j.check_requires(txn.requires, found.get)
                        owned.update((row[0], (row[2], row[3])) for row in rows if row[0] in owned)
                        self._check_fences(txn, owned)
                    results: list[int] = []
                    for op in txn.ops:
                        params = _params(op)
                        if op[0] in (j.APPEND_MESSAGE, j.APPEND_STREAM):
                            kind = _MAIL if op[0] == j.APPEND_MESSAGE else _STREAM
                            cur.execute(sql.allocate, [[op[1]], [kind], [1]])
                            params[1] = _number(kind, cur.fetchone()[2])  # type: ignore[index]
                            results.append(params[1])
                        cur.execute(sql.write[op[0]], _columns(op[0], [params]))
                        if op[1] in owned:
                            _track_owner(owned, op, self.node)
                    notices = self._notices([txn], [None], owned)
                    if notices:
                        cur.execute(sql.notify, notices)
                    cur.execute("RELEASE SAVEPOINT txn")
                    outcomes.append(results)
                except Conflict as exc:
                    cur.execute("ROLLBACK TO SAVEPOINT txn")
                    outcomes.append(exc)
                except psycopg.errors.TransactionRollback:
                    raise
                except psycopg.Error as exc:
                    if conn.broken:
                        raise
                    cur.execute("ROLLBACK TO SAVEPOINT txn")
                    outcomes.append(_txn_error(exc, self.describe()))
            run.outcomes = outcomes
            run.committing = True
            cur.execute("COMMIT")

    # -- reading -----------------------------------------------------------

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        pool = self._check_open()
        with _mapped(self):
            reader = _PostgresReader(pool, self._sql)
            try:
                yield reader
            finally:
                reader.release()

    async def read(self, fn: Callable[[Reader], T]) -> T:
        self._check_open()
        assert self._limiter is not None
        with self._holding():
            return await trio.to_thread.run_sync(self._read_sync, fn, limiter=self._limiter)

    def _read_sync(self, fn: Callable[[Reader], T]) -> T:
        with self.reader() as r:
            return fn(r)


def _configure_reader(conn: psycopg.Connection) -> None:
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True


def _rollback(conn: psycopg.Connection) -> None:
    try:
        conn.rollback()
    except psycopg.Error:
        pass  # a broken connection is replaced by its owner


def _node_key(schema: str, node: str) -> int:
    """The advisory lock key of ``node``'s lease on ``schema``: a stable
    64-bit hash, the same on every node and every run."""
    digest = hashlib.blake2b(f"actors node {schema}\x00{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _channel(schema: str, node: str) -> str:
    """The NOTIFY channel of ``node`` (an identifier well under 63 bytes)."""
    return f"actors_{_node_key(schema, node) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def _track_owner(
    owned: dict[bytes, tuple[str | None, int] | None], op: tuple[Any, ...], node: str | None
) -> None:
    """Apply ``op``'s effect on its instance's (owner, epoch), as the database will:
    a new row belongs to the node that writes it, at epoch 0."""
    if op[0] == j.DELETE_INSTANCE:
        owned[op[1]] = None
    elif op[0] == j.PUT_INSTANCE and owned.get(op[1]) is None:
        owned[op[1]] = (node, 0)


def _track_status(status: dict[bytes, int | None], op: tuple[Any, ...]) -> None:
    """Apply ``op``'s effect on its instance's status, as the database will."""
    code = op[0]
    if code == j.PUT_INSTANCE:
        status[op[1]] = op[2]
    elif code == j.SET_STATUS:
        if status[op[1]] is not None:
            status[op[1]] = op[2]
    elif code == j.DELETE_INSTANCE:
        status[op[1]] = None


def _txn_error(exc: psycopg.Error, where: str) -> Exception:
    """What a transaction the database refused fails with."""
    state = exc.sqlstate or ""
    if state.startswith(("53", "54")):  # insufficient resources, program limit exceeded
        error: Exception = JournalFull(
            f"{where} has no room for this transaction ({exc}); free space on the "
            "database server, raise its limits, or clean up old instances (system.cleanup)"
        )
    elif state.startswith("22"):  # data exception: a value the columns cannot hold
        error = EncodeError(f"{where} cannot store a value of this transaction: {exc}")
    else:
        error = JournalCorrupt(f"commit to {where} failed: {exc}", database="", key=b"")
    error.__cause__ = exc
    return error


class _Plan:
    """Turns a batch's ops into a few array statements and numbers its appends.

    An op touches only its own instance's rows, in the tables `_TABLES`
    names, so two ops commute unless they share an instance and a table.
    Each op gets a stage: for each of its tables, the stage of the
    instance's last op there, plus one if that op was of another kind. So
    within a stage an instance's rows in a table see ops of one kind only,
    and running stage by stage, one statement per kind of op (a later op on
    a key replacing an earlier one, see `_columns`), gives what running the
    ops one by one in submission order would.
    """

    __slots__ = ("_cells", "_fresh", "_last", "_resets", "_stages", "appends", "wanted")

    def __init__(self) -> None:
        self._last: dict[tuple[bytes, str], tuple[int, int]] = {}  # (iid, table) -> (stage, code)
        self._stages: list[dict[int, list[Any]]] = []
        # Appends numbered from the stored counter: (iid, kind) -> how many.
        self.wanted: dict[tuple[bytes, int], int] = {}
        # Per transaction added, the param lists of its appends (index 1: the number).
        self.appends: list[list[list[Any]]] = []
        self._cells: dict[tuple[bytes, int], list[list[Any]]] = {}
        # After a delete in this batch, counters restart: (iid, kind) -> count so far.
        self._fresh: dict[tuple[bytes, int], int] = {}
        self._resets: dict[tuple[bytes, int], list[Any]] = {}  # its _SET_COUNTER params

    def _put(self, code: int, iid: bytes, params: Any) -> None:
        tables = _TABLES[code]
        stage = 0
        for table in tables:
            last = self._last.get((iid, table))
            if last is not None:
                stage = max(stage, last[0] + (last[1] != code))
        for table in tables:
            self._last[(iid, table)] = (stage, code)
        while len(self._stages) <= stage:
            self._stages.append({})
        self._stages[stage].setdefault(code, []).append(params)

    def add(self, ops: list[tuple[Any, ...]]) -> None:
        """Plan one transaction's ops."""
        appends: list[list[Any]] = []
        self.appends.append(appends)
        for op in ops:
            code, iid = op[0], op[1]
            params = _params(op)
            if code in (j.APPEND_MESSAGE, j.APPEND_STREAM):
                key = (iid, _MAIL if code == j.APPEND_MESSAGE else _STREAM)
                if key in self._fresh:
                    self._fresh[key] += 1
                    params[1] = _number(key[1], self._fresh[key])
                    self._resets[key][2] = self._fresh[key]
                else:
                    self.wanted[key] = self.wanted.get(key, 0) + 1
                    self._cells.setdefault(key, []).append(params)
                appends.append(params)
            self._put(code, iid, params)
            if code == j.DELETE_INSTANCE:
                for kind in (_MAIL, _STREAM):
                    # Invariant: the counter row after this batch holds the
                    # count since the last delete; a zero count writes nothing.
                    self._fresh[(iid, kind)] = 0
                    self._resets[(iid, kind)] = reset = [iid, kind, 0]
                    self._put(_SET_COUNTER, iid, reset)

    def allocation(self, keys: list[tuple[bytes, int]] | None = None) -> list[list[Any]]:
        """Parameters of the statement that takes ``wanted`` numbers (for ``keys``)."""
        keys = sorted(self.wanted if keys is None else keys)
        return [[k[0] for k in keys], [k[1] for k in keys], [self.wanted[k] for k in keys]]

    def number(self, before: dict[tuple[bytes, int], int]) -> None:
        """Number the appends that follow each counter's value ``before`` the batch."""
        for (iid, kind), cells in self._cells.items():
            first = before[(iid, kind)] + 1
            for k, params in enumerate(cells):
                params[1] = _number(kind, first + k)

    def groups(self) -> Iterator[tuple[int, list[Any]]]:
        for stage in self._stages:
            for code, rows in stage.items():
                if code == _SET_COUNTER:
                    rows = [r for r in rows if r[2]]
                if rows:
                    yield code, rows


@contextmanager
def _mapped(journal: PostgresJournal) -> Iterator[None]:
    """Turn psycopg's errors into the journal's own."""
    try:
        yield
    except PoolTimeout as exc:
        raise JournalUnavailable(
            f"no connection to {journal.describe()} came free in time; raise "
            "PostgresJournal(pool_size=...) or check that the server is up"
        ) from exc
    except psycopg.OperationalError as exc:
        raise journal._unreachable(exc) from exc
    except psycopg.Error as exc:
        raise JournalCorrupt(
            f"reading {journal.describe()} failed: {exc}", database="", key=b""
        ) from exc


class _PostgresReader(Reader):
    __slots__ = ("_conn", "_pool", "_sql", "_started")

    def __init__(self, pool: ConnectionPool, sql: _SQL) -> None:
        self._pool = pool
        self._sql = sql
        self._conn: psycopg.Connection | None = pool.getconn()
        self._started = False  # whether the snapshot has been taken

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _rollback(conn)
            self._pool.putconn(conn)

    def _rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        conn = self._conn
        if conn is None:
            raise JournalClosed(
                "this reader's 'with journal.reader()' block has ended; read inside it"
            )
        # The pooled connections may have died while idle (a server restart,
        # an idle timeout). Until the snapshot is taken, another one will do.
        attempts = 1 if self._started else self._pool.max_size + 1
        for attempt in range(attempts):
            try:
                with conn.cursor(binary=True) as cur:
                    cur.execute(query, params)
                    rows = cur.fetchall()
                break
            except psycopg.OperationalError:
                if not conn.broken or attempt == attempts - 1:
                    raise
                self._conn = None
                self._pool.putconn(conn)
                self._conn = conn = self._pool.getconn()
        self._started = True
        return rows

    def _one(self, query: str, params: Any = None) -> Any:
        rows = self._rows(query, params)
        return rows[0][0] if rows else None

    def _row(self, iid: bytes, address: str, process: str, code: int, record: bytes) -> InstanceRow:
        status = j.STATUS_NAME.get(code)
        if status is None:
            raise JournalCorrupt(
                f"instance {iid.hex()} has unknown status code {code}; it was written by a "
                "newer version of the library, or the row was edited by hand",
                database="instances",
                key=iid,
            )
        return InstanceRow(iid, address, process, status, j.decode_record(record, "instances", iid))

    def instance(self, iid: bytes) -> InstanceRow | None:
        rows = self._rows(self._sql.instance, [iid])
        return self._row(*rows[0]) if rows else None

    def instances(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        corrupt: list[j.CorruptRecord] | None = None,
    ) -> Iterator[InstanceRow]:
        # Pages by key within the one snapshot, so a big table is never loaded at once.
        query = self._sql.instances_page[(status is not None, process is not None)]
        after: tuple[int, bytes] = (0 if status is None else j.STATUS_CODE[status], b"")
        while True:
            params: list[Any] = list(after)
            if process is not None:
                params.append(process)
            rows = self._rows(query, [*params, _PAGE])
            for row in rows:
                try:
                    found = self._row(*row)
                except JournalCorrupt as exc:
                    if corrupt is None:
                        raise
                    name = j.STATUS_NAME.get(row[3], "unknown")
                    corrupt.append(j.CorruptRecord(row[0], row[1], row[2], name, exc))
                    continue
                yield found
            if len(rows) < _PAGE:
                return
            after = (rows[-1][3], rows[-1][0])

    def count_by_status(self) -> dict[str, int]:
        return {
            j.STATUS_NAME.get(code, "unknown"): count
            for code, count in self._rows(self._sql.count_by_status)
        }

    def log(self, iid: bytes, run: int) -> dict[int, Any]:
        return {
            seq: j.decode_record(entry, "log", iid)
            for seq, entry in self._rows(self._sql.log, [iid, run])
        }

    def log_runs(self, iid: bytes) -> list[int]:
        return [run for (run,) in self._rows(self._sql.log_runs, [iid])]

    def mailbox(self, iid: bytes) -> list[tuple[int, Any]]:
        return [
            (seq, j.decode_record(message, "mail", iid))
            for seq, message in self._rows(self._sql.mailbox, [iid])
        ]

    def last_message_seq(self, iid: bytes) -> int:
        return self._one(self._sql.last_message_seq, [iid]) or 0

    def instances_with_mail(self) -> Iterator[bytes]:
        return iter([iid for (iid,) in self._rows(self._sql.instances_with_mail)])

    def timers(self, iid: bytes) -> list[TimerRow]:
        return [
            TimerRow(due / 1e6, i, run, seq)
            for due, i, run, seq in self._rows(self._sql.timers, [iid])
        ]

    def due_timers(
        self, now: float, limit: int = 1000, after: float | None = None
    ) -> list[TimerRow]:
        if limit <= 0:
            return []
        low = -1 if after is None else j.due_us(after)
        return [
            TimerRow(due / 1e6, iid, run, seq)
            for due, iid, run, seq in self._rows(self._sql.due_timers, [low, j.due_us(now), limit])
        ]

    def next_due(self, after: float | None = None) -> float | None:
        low = -1 if after is None else j.due_us(after)
        due = self._one(self._sql.next_due, [low])
        return None if due is None else due / 1e6

    def stream(self, iid: bytes, start: int = 0, limit: int = 1000) -> list[tuple[int, Any]]:
        if limit <= 0:
            return []
        return [
            (idx, j.decode_record(value, "stream", iid))
            for idx, value in self._rows(self._sql.stream, [iid, max(0, start), start + limit])
        ]

    def stream_length(self, iid: bytes) -> int:
        return self._one(self._sql.stream_length, [iid]) or 0

    def cursors(self, iid: bytes) -> dict[str, int]:
        return dict(self._rows(self._sql.cursors, [iid]))  # type: ignore[arg-type]

    def has_records(self, iid: bytes) -> bool:
        return bool(self._one(self._sql.has_records, {"i": iid}))
