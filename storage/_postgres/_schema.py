"""Every SQL statement the PostgreSQL journal runs, and the names it
derives from a schema and a node.

The tables, and their migrations, are in `storage._postgres._migrations`.
Nodes sharing the schema (see `PostgresJournal`) each hold a lease, an
advisory lock on `_node_key`, and hear of their mail on the channel
`_channel`. `_SQL` renders every statement once per schema, the writes as
one statement per kind of op over arrays (see `storage._postgres._plan`).
"""

from __future__ import annotations

import hashlib

from .. import _journal as j
from .._states import DELETE_STATE, PUT_STATE

_MAIL = 1
_STREAM = 2
_SET_COUNTER = -1  # a planner-made op: (op, iid, kind, next)


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
        # (State keys are locked as in lock_states; see below.)
        lock_keys = (
            f"SELECT count(pg_advisory_xact_lock(hashtextextended({schema!r} || k, 7))) "
            "FROM (SELECT k FROM unnest(%s::text[]) AS k ORDER BY k) AS keys"
        )

        def lock_and_allocate(keys: bool) -> str:
            return (
                f"WITH locked AS ({self.lock_instances}), taken AS ({self.allocate}) "
                "SELECT pg_current_xact_id()::text, "  # the select list runs left to right
                "coalesce((SELECT array_agg(iid ORDER BY iid) FROM locked), '{}'), "
                "coalesce((SELECT array_agg(status ORDER BY iid) FROM locked), '{}'), "
                + (f"({lock_keys}), " if keys else "")  # after the rows, before counters
                + "coalesce((SELECT array_agg(iid ORDER BY iid, kind) FROM taken), '{}'), "
                "coalesce((SELECT array_agg(kind ORDER BY iid, kind) FROM taken), '{}'), "
                "coalesce((SELECT array_agg(next ORDER BY iid, kind) FROM taken), '{}'), "
                "coalesce((SELECT array_agg(owner ORDER BY iid) FROM locked), '{}'), "
                "coalesce((SELECT array_agg(epoch ORDER BY iid) FROM locked), '{}')"
            )

        self.lock_and_allocate = lock_and_allocate(keys=False)
        # The same, locking the state keys a batch expects (and does not
        # write) between the rows and the counters: its parameters are the
        # instances, the counters' three arrays, then the keys.
        self.lock_keys_and_allocate = lock_and_allocate(keys=True)
        # A start over no instance (Txn.require_absent) locks its address
        # first, transaction-scoped, in a statement of its own: a row lock
        # cannot hold a row that is not there, and the next statement's
        # snapshot then sees a start that committed while this one waited.
        # Invariant: so does every transaction that deletes an instance on
        # condition of its incarnation (a start over an ended one, a retry,
        # a cleanup: Txn.require with an incarnation). Else a start over
        # nothing whose row lock waited on the row such a transaction
        # deletes, and replaces with a new row in its next statement, would
        # find nothing there (READ COMMITTED skips the deleted row and does
        # not see the new one) and overwrite the new incarnation.
        self.lock_starts = (
            f"SELECT count(pg_advisory_xact_lock(hashtextextended({schema!r} || "
            "encode(k, 'hex'), 11))) FROM unnest(%b::bytea[]) AS k"
        )
        # The records of instances a start replaces (Txn.require's incarnation).
        self.records = f"SELECT iid, record FROM {s}.instances WHERE iid = ANY(%b::bytea[])"
        # The savepoint path takes every counter row its appends use up
        # front, in key order, with the instances' row locks held (so only
        # counters of instances that exist; a new one's are its start's).
        self.lock_counters = (
            f"INSERT INTO {s}.counters AS c (iid, kind, next) "
            "SELECT u.iid, u.kind, 0 FROM unnest(%b::bytea[], %b::smallint[]) AS u(iid, kind) "
            f"WHERE EXISTS (SELECT 1 FROM {s}.instances i WHERE i.iid = u.iid) ORDER BY 1, 2 "
            "ON CONFLICT (iid, kind) DO UPDATE SET next = c.next"
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
                "instances",
                "iid, status, process, address, record",
                ("bytea", "smallint", "text", "text", "bytea"),
                "iid",
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
                "log",
                "iid, run, seq, entry",
                ("bytea", "bigint", "bigint", "bytea"),
                "iid, run, seq",
                "entry = excluded.entry",
            ),
            j.DROP_LOG: delete("log", "iid, run", ("bytea", "bigint")),
            j.APPEND_MESSAGE: (
                f"INSERT INTO {s}.mail (iid, seq, message) "
                f"SELECT * FROM {rows('bytea', 'bigint', 'bytea')}"
            ),
            j.TAKE_MESSAGE: delete("mail", "iid, seq", ("bytea", "bigint")),
            j.ADD_TIMER: upsert(
                "timers",
                "iid, run, seq, due_us",
                ("bytea", "bigint", "bigint", "bigint"),
                "iid, run, seq",
                "due_us = excluded.due_us",
            ),
            j.CANCEL_TIMER: delete("timers", "iid, run, seq", ("bytea", "bigint", "bigint")),
            j.APPEND_STREAM: (
                f"INSERT INTO {s}.stream (iid, idx, value) "
                f"SELECT * FROM {rows('bytea', 'bigint', 'bytea')}"
            ),
            j.SET_CURSOR: upsert(
                "cursors",
                "iid, consumer, position",
                ("bytea", "text", "bigint"),
                "iid, consumer",
                "position = excluded.position",
            ),
            j.DELETE_CURSOR: delete("cursors", "iid, consumer", ("bytea", "text")),
            _SET_COUNTER: upsert(
                "counters",
                "iid, kind, next",
                ("bytea", "smallint", "bigint"),
                "iid, kind",
                "next = excluded.next",
            ),
        }
        # State rows (see storage._states): writers of a key take its
        # transaction-scoped advisory lock first, so a compare-and-set reads
        # a version no one else can change before it commits.
        self.write[PUT_STATE] = (
            f"INSERT INTO {s}.states AS t (key, version, value) "
            f"SELECT u.key, 1, u.value FROM {rows('text', 'bytea')} AS u(key, value) "
            "ON CONFLICT (key) DO UPDATE SET version = t.version + 1, value = excluded.value"
        )
        self.write[DELETE_STATE] = delete("states", "key", ("text",))
        self.lock_states = (
            f"SELECT pg_advisory_xact_lock(hashtextextended({schema!r} || k, 7)) "
            "FROM unnest(%s::text[]) AS k ORDER BY k"
        )
        self.state_versions = f"SELECT key, version FROM {s}.states WHERE key = ANY(%s::text[])"
        self.states = f"SELECT key, version, value FROM {s}.states WHERE starts_with(key, %s) ORDER BY key LIMIT %s"
        # The same over the keys from a prefix (its first parameter) up to
        # the prefix with its last character one on (its second): a range
        # read of the index of migration 4, in code point order.
        self.states_range = (
            f"SELECT key, version, value FROM {s}.states "
            'WHERE (key COLLATE "C") >= %s AND (key COLLATE "C") < %s '
            "AND starts_with(key, %s) ORDER BY key LIMIT %s"
        )
        # A new instance belongs to the node that creates it (the committer's
        # session names it; see _Server.connect). An existing one
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
        self.clock = "SELECT extract(epoch from clock_timestamp())::float8"
        self.count_by_status = f"SELECT status, count(*) FROM {s}.instances GROUP BY status"
        self.log = f"SELECT seq, entry FROM {s}.log WHERE iid = %s AND run = %s ORDER BY seq"
        self.log_runs = f"SELECT DISTINCT run FROM {s}.log WHERE iid = %s ORDER BY run"
        self.mailbox = f"SELECT seq, message FROM {s}.mail WHERE iid = %s ORDER BY seq"
        self.mailbox_page = (
            f"SELECT seq, message FROM {s}.mail WHERE iid = %s ORDER BY seq LIMIT %s OFFSET %s"
        )
        self.mailbox_count = f"SELECT count(*) FROM {s}.mail WHERE iid = %s"
        self.mailboxes = (
            f"SELECT iid, seq, message FROM {s}.mail WHERE iid = ANY(%s) ORDER BY iid, seq"
        )
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
        self.owner = f"SELECT owner FROM {s}.instances WHERE iid = %s"
        self.last_message_seq = f"SELECT next FROM {s}.counters WHERE iid = %s AND kind = {_MAIL}"
        self.cursors = f"SELECT consumer, position FROM {s}.cursors WHERE iid = %s"
        # Which of these (iid, consumer) cursors exist (Txn.require_no_cursor:
        # read once the instances' row locks are held).
        self.cursors_named = (
            f"SELECT c.iid, c.consumer FROM {s}.cursors c WHERE (c.iid, c.consumer) IN "
            "(SELECT * FROM unnest(%b::bytea[], %s::text[]))"
        )
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
        # A claim in the commit that creates the row (Txn.claim_created):
        # epochs are drawn in the batch's first round trip, and set beside
        # its writes (the row is this transaction's: no other session sees it).
        self.draw_epochs = f"SELECT nextval({epochs}) FROM generate_series(1, %s)"
        self.set_epochs = (
            f"UPDATE {s}.instances i SET epoch = u.epoch FROM {rows('bytea', 'bigint')} "
            "AS u(iid, epoch) WHERE i.iid = u.iid"
        )
        self.lapsed = (
            f"SELECT name FROM {s}.nodes WHERE name <> %(me)s AND {free.format(k='lock_key')}"
        )
        # The committer sessions of lapsed nodes, found by the lock each holds
        # (_writer_key; an advisory lock keeps a bigint key in two halves).
        self.end_sessions = (
            "SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.pid <> pg_backend_pid() AND (l.classid::bigint, l.objid::bigint) IN ("
            "SELECT k >> 32 & 4294967295, k & 4294967295 FROM unnest(%s::bigint[]) AS u(k))"
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


def _node_key(schema: str, node: str) -> int:
    """The advisory lock key of ``node``'s lease on ``schema``: a stable
    64-bit hash, the same on every node and every run."""
    digest = hashlib.blake2b(f"actors node {schema}\x00{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _writer_key(schema: str, node: str) -> int:
    """The advisory lock key every committer session of ``node`` holds
    (shared) while it lives: how other nodes find the sessions of a node
    whose lease lapsed, to end them (see `_SQL.end_sessions`)."""
    digest = hashlib.blake2b(f"actors writer {schema}\x00{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _channel(schema: str, node: str) -> str:
    """The NOTIFY channel of ``node`` (an identifier well under 63 bytes)."""
    return f"actors_{_node_key(schema, node) & 0xFFFF_FFFF_FFFF_FFFF:016x}"
