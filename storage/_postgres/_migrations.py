"""The PostgreSQL journal's tables and their migrations.

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
the ``nodes`` table serve nodes sharing the schema (see `PostgresJournal`):
a node's lease is an advisory lock on `_node_key`, its mail notices come on
the channel `_channel` (both in `_schema`).

Migrations are numbered lists of statements, applied in order under an
advisory lock (so nodes opening one schema together take turns); a schema
newer than `SCHEMA_VERSION` is refused, never misread.
"""

from __future__ import annotations

import hashlib

import psycopg

from ..errors import JournalCorrupt
from ._schema import _quote
from ._server import _safe_dsn, _Server

__all__ = ["SCHEMA_VERSION", "migrate"]


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
    (  # 3: state rows of queues and schedules (see storage._states)
        """CREATE TABLE {s}.states (key text PRIMARY KEY, version bigint NOT NULL,
            value bytea NOT NULL)""",
    ),
    (  # 4: a prefix of state keys is a range, whatever the database's collation
        # (the identity index's buckets are read by prefix: see actors._kernel._identity)
        'CREATE INDEX states_prefix ON {s}.states ((key COLLATE "C"))',
    ),
]
SCHEMA_VERSION = len(_MIGRATIONS)


def migrate(conn: psycopg.Connection, server: _Server) -> None:
    """Bring ``server``'s schema to `SCHEMA_VERSION`; safe to run from several nodes at once."""
    s = _quote(server.schema)
    key = int.from_bytes(
        hashlib.blake2b(f"actors journal {server.schema}".encode(), digest_size=8).digest(),
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
                    f"schema {server.schema!r} at {_safe_dsn(server.dsn)!r} is at version "
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
        raise server.unreachable(exc) from exc
    except psycopg.Error as exc:
        raise JournalCorrupt(
            f"cannot create or migrate schema {server.schema!r} at {_safe_dsn(server.dsn)!r}: "
            f"{exc}",
            database="schema_version",
        ) from exc
