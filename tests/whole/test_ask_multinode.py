"""Request/reply between two nodes sharing one PostgreSQL schema: the asker
on one node, the instance on the other. Real server (tests/pg.py), real time.

The asker's periodic status read is pushed out of reach (CHECK_EVERY), so a
reply can only arrive by the journal's notice to the asker's node.
"""

from __future__ import annotations

import os

import pytest
import trio

import actors
from actors._features import _asks
from storage import instance_id
from tests.features.test_ask import add, client, counter, get, silent
from tests.pg import fresh_schema

if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
    pytest.importorskip("psycopg", reason="PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")


@pytest.fixture
def two_nodes(request, monkeypatch):
    """Open systems "a" and "b" on one fresh schema: ``async with two_nodes(procs) as (a, b)``."""
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from contextlib import asynccontextmanager

    from storage import PostgresJournal

    monkeypatch.setattr(_asks, "CHECK_EVERY", 3600.0)
    dsn, schema = fresh_schema(request)

    @asynccontextmanager
    async def both(processes):
        journal_a = PostgresJournal(dsn, schema=schema, lease_timeout=3.0)
        journal_b = PostgresJournal(dsn, schema=schema, lease_timeout=3.0)
        async with (
            actors.open_system(journal_a, processes=processes, node="a") as a,
            actors.open_system(journal_b, processes=processes, node="b") as b,
        ):
            yield a, b

    both.pg = (dsn, schema)  # type: ignore[attr-defined]
    return both


def rows_without_instance(pg, table: str) -> int:
    import psycopg

    dsn, schema = pg
    query = (
        f'SELECT count(*) FROM "{schema}".{table} t WHERE NOT EXISTS '
        f'(SELECT 1 FROM "{schema}".instances i WHERE i.iid = t.iid)'
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query).fetchone()[0]


async def test_ask_from_another_node_gets_the_reply_by_notice(two_nodes):
    async with two_nodes([counter, silent]) as (a, b):
        handle = await a.start(counter, "c")
        with trio.fail_after(20):
            assert 5 == await b.ask("counter/c", add, 5)
            assert 7 == await b.ask("counter/c", add, 2)
            assert 7 == await a.ask("counter/c", get)  # and from its own node
            assert 7 == await b.ask("counter/c", get)
        assert instance_id("counter/c") in a.registry.live  # it ran on a all along
        assert instance_id("counter/c") not in b.registry.live
        assert handle.status in ("running", "suspended")
        await b.journal.flush()
    # Each reply that crossed nodes was read and deleted by its asker.
    assert 0 == rows_without_instance(two_nodes.pg, "mail")
    assert 0 == rows_without_instance(two_nodes.pg, "counters")


async def test_ending_without_reply_reaches_an_asker_on_another_node(two_nodes):
    async with two_nodes([counter, silent]) as (a, b):
        await a.start(silent, "s")
        with trio.fail_after(20):
            with pytest.raises(actors.NotDelivered, match="ended without replying"):
                await b.ask("silent/s", add, 1)


async def test_ctx_ask_between_nodes(two_nodes):
    async with two_nodes([counter, client]) as (a, b):
        await a.start(counter, "c")
        handle = await b.start(client, "x", target="counter/c", amount=3)
        with trio.fail_after(20):
            assert [3, 3] == await handle.result()
        assert instance_id("client/x") not in a.registry.live
