"""A node restarted under its own name, beside nodes that scan for takeovers;
and the sessions of a read-only (inspector's) journal.

Node "a" owns a live instance and closes; node "b" runs its takeover scan
(`PostgresJournal.orphans`) all along, so it sees "a"'s lease free and ends
any session that holds "a"'s writer key, as it does to a frozen node's. A
new "a" must open all the same: it holds that key only once its lease is
taken again (see `PostgresJournal.open`), and the scan ends the sessions
of a node only while it holds that node's lease itself (`_Lease._end_sessions`).

These talk to a real server (see tests/pg.py) and run in real time: each
restart waits on the server, and the scan runs on a thread of its own.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio

from storage import InstanceRecord, Txn, instance_id
from tests.pg import fresh_schema

psycopg = pytest.importorskip("psycopg", reason="install the 'postgres' extra")
from psycopg.conninfo import make_conninfo

from storage import PostgresJournal

X = instance_id("orders/x")
ROUNDS = 5
HOLD = 0.3  # seconds another session holds the migration lock in each round
SCAN_EVERY = 0.02  # seconds between takeover scans of node "b"


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> tuple[str, str]:
    """``(dsn, schema)`` of a schema of this test's own."""
    return fresh_schema(request)


def migration_key(schema: str) -> int:
    """The advisory lock `storage._postgres._schema.migrate` takes while it
    migrates ``schema`` (the same hash)."""
    digest = hashlib.blake2b(f"actors journal {schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def node(pg: tuple[str, str], name: str) -> PostgresJournal:
    dsn, schema = pg
    journal = PostgresJournal(dsn, schema=schema, pool_size=2)
    journal.set_node(name)
    return journal


@pytest.fixture
async def scanning(pg: tuple[str, str]) -> AsyncIterator[PostgresJournal]:
    """Node "b", scanning for orphans every `SCAN_EVERY` seconds, once node
    "a" has written a live instance of its own and closed (so its lease is
    free, and it stays in the nodes table: it owns something live)."""
    a = node(pg, "a")
    async with a:
        txn = Txn()
        txn.put_instance(
            X,
            address="orders/x",
            process="orders/:id",
            status="running",
            record=InstanceRecord(params=["x"]),
        )
        await a.commit(txn)
    async with node(pg, "b") as b, trio.open_nursery() as nursery:

        async def scan() -> None:
            while True:
                assert set(await b.orphans()) <= {X}  # seen, never claimed
                await trio.sleep(SCAN_EVERY)

        nursery.start_soon(scan)
        yield b
        nursery.cancel_scope.cancel()


def ended_sessions(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What takeover scans said they ended."""
    return [r.getMessage() for r in caplog.records if "session(s) of node" in r.getMessage()]


async def restart(
    pg: tuple[str, str],
    failures: list[str],
    round_: int,
    then: Callable[[], Awaitable[object]] = trio.lowlevel.checkpoint,
) -> float:
    """Open node "a" again, await ``then()``, write through it, close it;
    how long it took to open."""
    t0 = time.monotonic()
    a = node(pg, "a")
    try:
        await a.open()
    except Exception as exc:  # noqa: BLE001 - counted, then reported
        failures.append(f"round {round_}: {exc!r}")
        return time.monotonic() - t0
    took = time.monotonic() - t0
    try:
        await then()
        assert await a.claim(X) is not None  # its own lease is held again
        txn = Txn()
        txn.put_log(X, 0, round_, "restarted")
        await a.commit(txn)
    finally:
        await a.close()
    return took


@pytest.mark.slow  # real time: the scan and the restarts race on the server
async def test_a_rolling_restart_opens_under_its_own_name_every_time(
    pg: tuple[str, str], scanning: PostgresJournal, caplog: pytest.LogCaptureFixture
) -> None:
    # Another node migrates (or opens) the schema meanwhile: it holds the
    # migration lock for a moment, and "a" waits for it with its lease free.
    dsn, schema = pg
    caplog.set_level(logging.WARNING, logger="storage.postgres")
    failures: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as holder:
        for round_ in range(ROUNDS):
            holder.execute("SELECT pg_advisory_lock(%s)", [migration_key(schema)])
            async with trio.open_nursery() as nursery:
                took: list[float] = []

                async def one() -> None:
                    took.append(await restart(pg, failures, round_))

                nursery.start_soon(one)
                await trio.sleep(HOLD)  # "b" scans several times meanwhile
                holder.execute("SELECT pg_advisory_unlock(%s)", [migration_key(schema)])
            if len(failures) <= round_:  # it opened: after waiting on the migration lock
                assert took[0] >= HOLD
    assert [] == failures
    assert [] == ended_sessions(caplog)


@pytest.mark.slow  # real time: as above
async def test_a_scan_that_saw_the_lease_free_ends_nothing_of_a_node_that_took_it_since(
    pg: tuple[str, str], scanning: PostgresJournal, caplog: pytest.LogCaptureFixture
) -> None:
    # The scan's thread stalls (a busy process, a descheduled thread) between
    # seeing "a"'s lease free and ending "a"'s sessions; "a" restarts then.
    caplog.set_level(logging.WARNING, logger="storage.postgres")
    lease = scanning._lease
    original: Callable[..., None] = lease._end_sessions
    stalled, resumed = threading.Event(), threading.Event()

    def stalling(conn: psycopg.Connection, lapsed: list[str]) -> None:
        stalled.set()
        time.sleep(HOLD)
        try:
            original(conn, lapsed)
        finally:
            resumed.set()

    async def scan_resumed() -> None:
        while not resumed.is_set():
            await trio.sleep(0.005)

    lease._end_sessions = stalling  # type: ignore[method-assign]
    failures: list[str] = []
    for round_ in range(3):
        stalled.clear()
        resumed.clear()
        while not stalled.is_set():
            await trio.sleep(0.005)
        # "a" stays open until the stalled scan is done.
        await restart(pg, failures, round_, then=scan_resumed)
    assert [] == failures
    assert [] == ended_sessions(caplog)


async def test_a_read_only_journal_names_its_sessions_apart_from_the_nodes(
    pg: tuple[str, str],
) -> None:
    dsn, schema = pg

    def names() -> dict[str, int]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT application_name, count(*) FROM pg_stat_activity "
                "WHERE application_name IN (%s, %s) GROUP BY 1",
                [f"actors journal {schema}", f"actors inspector {schema}"],
            ).fetchall()
        return dict(rows)

    async with node(pg, "a") as a:
        txn = Txn()
        txn.put_instance(
            X,
            address="orders/x",
            process="orders/:id",
            status="running",
            record=InstanceRecord(params=["x"]),
        )
        await a.commit(txn)
        writers = names()[f"actors journal {schema}"]  # the committer's
        inspector = PostgresJournal(dsn, schema=schema, pool_size=2, readonly=True)
        async with inspector:
            row = await inspector.read(lambda r: r.instance(X))
            assert row is not None and "orders/x" == row.address
            expected = {f"actors journal {schema}": writers, f"actors inspector {schema}": 1}
            assert expected == names()
        # A DSN that names the application keeps its name.
        own = f"ops {schema}"
        named = PostgresJournal(
            make_conninfo(dsn, application_name=own), schema=schema, readonly=True
        )
        async with named:
            await named.read(lambda r: r.instance(X))
            with psycopg.connect(dsn, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [own]
                ).fetchall()
            assert [(1,)] == rows
            assert {f"actors journal {schema}": writers} == names()
