"""Opening a journal's schema to read it only: ``PostgresJournal(..., readonly=True)``.

A read-only journal writes nothing to the server: it creates no schema,
runs no migration, takes no lease and starts no committer. What it does on
open is connect and check the schema's version, and refuse any version but
`SCHEMA_VERSION`, naming both: an older schema is read with the statements
of its own version only after a read-write open migrates it (which is a
write, so not done here), a newer one is never misread.

Every session it opens starts read-only (``default_transaction_read_only``,
set in the connection's options), and its reads run in REPEATABLE READ, READ
ONLY transactions like any journal's (`_pool`): a statement that writes is
refused by the server itself, whatever the role may do. So it needs a role
with no more than USAGE on the schema and SELECT on its tables, and works
beside the systems that run on the schema. Its sessions are named
``actors inspector <schema>`` (unless the DSN names them), not ``actors
journal <schema>`` as the nodes' committers are: pg_stat_activity tells
them apart, and they hold no node's writer key, so no takeover ends them.
"""

from __future__ import annotations

import psycopg

from ..errors import JournalCorrupt
from ._migrations import SCHEMA_VERSION
from ._pool import _ReadPool
from ._schema import _quote
from ._server import _rollback, _safe_dsn, _Server

__all__ = ["open_read_only"]


def open_read_only(server: _Server, pool_size: int) -> _ReadPool:
    """Reader connections to ``server``'s schema, once its version is checked.

    Runs in a worker thread.

    Raises:
        JournalUnavailable: the server cannot be reached.
        JournalCorrupt: the schema is missing, not readable by this role, holds
            no journal, or is at another version than `SCHEMA_VERSION`.
    """
    pool = _ReadPool(server, pool_size)
    try:
        conn = pool.getconn()
        try:
            with server.mapped():
                check_version(conn, server)
        finally:
            _rollback(conn)
            pool.putconn(conn)
    except BaseException:
        pool.close()
        raise
    return pool


def check_version(conn: psycopg.Connection, server: _Server) -> None:
    """Raise `JournalCorrupt` unless ``server.schema`` holds a journal at
    `SCHEMA_VERSION` that this session may read; reads only (``conn`` is in a
    read-only transaction, which the caller ends)."""
    name = server.schema
    where = f"schema {name!r} at {_safe_dsn(server.dsn)!r}"
    with conn.cursor() as cur:
        cur.execute(
            "SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = %s",
            [name],
        )
        found = cur.fetchone()
        if found is None:
            raise JournalCorrupt(
                f"there is no {where}; check the schema's name (a journal's schema is "
                "created when a system first opens it read-write)",
                database="schema_version",
            )
        if not found[0]:
            raise JournalCorrupt(
                f"this role may not read {where}; grant it USAGE on the schema and "
                "SELECT on its tables",
                database="schema_version",
            )
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [f"{_quote(name)}.schema_version"])
        row = cur.fetchone()
        if row is None or not row[0]:
            raise JournalCorrupt(
                f"{where} holds no journal (it has no schema_version table); check the "
                "schema's name",
                database="schema_version",
            )
        cur.execute(f"SELECT coalesce(max(version), 0) FROM {_quote(name)}.schema_version")
        row = cur.fetchone()
    current = int(row[0]) if row is not None else 0
    if current > SCHEMA_VERSION:
        raise JournalCorrupt(
            f"{where} is at version {current}, and this version of the library reads "
            f"version {SCHEMA_VERSION}; upgrade the library to read it",
            database="schema_version",
            key=str(current),
        )
    if current < SCHEMA_VERSION:
        raise JournalCorrupt(
            f"{where} is at version {current}, and this version of the library reads "
            f"version {SCHEMA_VERSION}; a read-only open never migrates it: open it once "
            "read-write (PostgresJournal without readonly=True, as actors.open_system "
            "does) to migrate it, or read it with the library version that wrote it",
            database="schema_version",
            key=str(current),
        )
