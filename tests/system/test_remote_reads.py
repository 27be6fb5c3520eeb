"""No journal I/O on the trio thread with a remote journal (PostgreSQL):
handles read what the system holds in memory; `await handle.refresh()`,
`await system.lookup()` and the waits read off the thread."""

from __future__ import annotations

import os
import threading

import pytest
import trio

import actors
from tests.pg import fresh_schema

if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
    pytest.importorskip("psycopg", reason="PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")

GO = actors.Signal("go")


@actors.process("kid/:id")
async def kid(ctx: actors.Context, id: str) -> str:
    await ctx.wait(GO)
    return f"kid {id}"


@actors.process("mom/:id")
async def mom(ctx: actors.Context, id: str) -> str:
    child = await ctx.spawn(kid, id)
    await ctx.wait(GO)
    await ctx.sleep(0.01)
    return child.id


def count_trio_thread_reads(journal) -> list[str]:
    """Every `reader()` opened on the trio thread (the main thread here)."""
    seen: list[str] = []
    reader = journal.reader

    def counted():
        if threading.current_thread() is threading.main_thread():
            seen.append("reader")
        return reader()

    journal.reader = counted
    return seen


@pytest.fixture
def pg(request):
    from storage import PostgresJournal

    dsn, schema = fresh_schema(request)
    return lambda: PostgresJournal(dsn, schema=schema, lease_timeout=3.0)


async def test_handles_of_another_nodes_instance_read_nothing_on_the_trio_thread(pg):
    ja, jb = pg(), pg()
    async with (
        actors.open_system(ja, processes=[kid], node="a") as a,
        actors.open_system(jb, processes=[kid], node="b") as b,
    ):
        await b.start(kid, "k1")
        reads = count_trio_thread_reads(ja)
        handle = await a.lookup("kid/k1")
        assert handle is not None and 1 == handle.incarnation
        assert handle.status in ("running", "suspended")
        assert None is await a.lookup("kid/none")
        await b.send("kid/k1", GO)
        with trio.fail_after(10):
            assert "kid k1" == await handle.result()
        assert "completed" == handle.status == await handle.refresh()
        assert [] == reads


async def test_a_parent_replayed_on_a_remote_journal_makes_its_child_handle_without_a_read(pg):
    async with actors.open_system(pg(), processes=[mom, kid], node="a", passivate_after=0.05) as a:
        handle = await a.start(mom, "m1")
        await trio.sleep(0.5)  # it passivates, waiting
        reads = count_trio_thread_reads(a.journal)
        await a.send("mom/m1", GO)  # it replays, making its ChildHandle again
        with trio.fail_after(10):
            assert "mom/m1/kid/m1" == await handle.result()
        assert [] == reads
