"""A start on PostgreSQL: one conditional commit, with no read before it
and no claim after it, for the usual start (an address never used); the
other starts (an instance there, a cleanup's floor, a cancelled
incarnation, a lost lease) still go the way they went.

The commit requires the address absent and its floor row absent, and
claims the row it creates (see "A fresh start" in `actors._system._lifecycle`). These
talk to a real server (see tests/pg.py) and run in real time.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import ClassVar

import pytest
import trio

import actors
from actors._kernel import _transactions
from storage import Conflict, InstanceRecord, Txn, instance_id
from tests.pg import fresh_schema

if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
    pytest.importorskip("psycopg", reason="PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")

M = actors.Signal("m")
LEASE = 0.5  # seconds: short, so that a lost lease is quick to come by
RAN: Counter[str] = Counter()  # id -> how many times `once`'s step ran


@actors.process("pgstart/:id")
async def waiter(ctx: actors.Context, id: str) -> str:
    """Completes with the payload of the first message."""
    _signal, payload = await ctx.receive(M)
    return str(payload)


def note(id: str) -> None:
    RAN[id] += 1


@actors.process("pgonce/:id")
async def once(ctx: actors.Context, id: str) -> str:
    """One step, an external effect counted in `RAN`."""
    await ctx.step(note, id)
    return id


BROKEN = {"now": True}  # whether `flaky`'s step fails


def check() -> str:
    if BROKEN["now"]:
        raise RuntimeError("broken")
    return "fixed"


@actors.process("pgflaky/:id")
async def flaky(ctx: actors.Context, id: str) -> str:
    """One step that fails while `BROKEN` says so."""
    return await ctx.step(check, retry=actors.Retry(attempts=1))


@pytest.fixture
def nodes(request):
    """A factory of node journals on this test's own schema."""
    from storage import PostgresJournal

    dsn, schema = fresh_schema(request)

    def make():
        return PostgresJournal(dsn, schema=schema, lease_timeout=LEASE)

    return make


@pytest.fixture
def spy(monkeypatch):
    """What starts read first (`_transactions.read_for_start`) and which
    instances the journals are asked to claim, from now on."""

    class Spy:
        # Shared by the class on purpose: a new class per test (this fixture).
        reads: ClassVar[list[bytes]] = []
        claims: ClassVar[list[bytes]] = []

        def watch(self, journal):
            claim = journal.claim

            async def counted(iid):
                self.claims.append(iid)
                return await claim(iid)

            monkeypatch.setattr(journal, "claim", counted)

    read = _transactions.read_for_start

    def counted_read(r, iid):
        Spy.reads.append(iid)
        return read(r, iid)

    monkeypatch.setattr(_transactions, "read_for_start", counted_read)
    Spy.reads, Spy.claims = [], []
    return Spy()


def fresh_start(iid: bytes, *, floor: str | None = None) -> tuple[Txn, int]:
    """A start over nothing that claims what it creates (and, with
    ``floor``, expects that state row absent)."""
    txn = Txn()
    txn.require_absent(iid)
    if floor is not None:
        txn.expect_state(floor, 0)
    record = InstanceRecord(params=["x"])
    txn.put_instance(iid, address=iid.hex(), process="p/:id", status="running", record=record)
    return txn, txn.claim_created(iid)


@pytest.mark.parametrize("savepoints", [False, True], ids=["fast", "savepoints"])
async def test_a_commit_claims_the_row_it_creates_at_a_new_epoch(nodes, savepoints):
    import psycopg

    journal = nodes()
    journal.set_node("a")
    async with journal:
        journal._writer.force_savepoints = savepoints
        x, y = instance_id("p/x"), instance_id("p/y")
        claimed = await journal.claim(x)  # nothing there: no epoch
        assert claimed is None
        (txn_x, slot_x), (txn_y, slot_y) = fresh_start(x), fresh_start(y)
        tickets = [journal.submit(txn_x), journal.submit(txn_y)]  # one batch
        ex, ey = [(await t.wait())[s] for t, s in zip(tickets, (slot_x, slot_y), strict=True)]
        assert 0 < ex != ey > 0
        with psycopg.connect(journal.dsn) as conn:
            rows = conn.execute(
                f'SELECT iid, owner, epoch FROM "{journal.schema}".instances ORDER BY epoch'
            ).fetchall()
        assert sorted([(x, "a", ex), (y, "a", ey)], key=lambda r: r[2]) == rows
        # A later claim draws a newer epoch, as always.
        assert await journal.claim(x) > max(ex, ey)


async def test_a_batch_that_only_expects_versions_takes_the_fast_path(nodes, monkeypatch):
    journal = nodes()
    journal.set_node("a")
    async with journal:
        floor = "floor/test"
        state = Txn()
        state.put_state(floor, 7)
        await journal.commit(state)  # (a write of a state row: the savepoint path)

        def refuse(*args):
            raise AssertionError("took the savepoint path")

        monkeypatch.setattr(journal._writer, "_run_with_savepoints", refuse)
        # Found at version 1: refused alone, and the rest of its batch commits.
        txn_x, _ = fresh_start(instance_id("p/x"), floor=floor)
        txn_y, slot_y = fresh_start(instance_id("p/y"), floor="floor/other")
        tickets = [journal.submit(txn_x), journal.submit(txn_y)]
        with pytest.raises(Conflict) as refused:
            await tickets[0].wait()
        assert "state" == refused.value.reason
        assert (await tickets[1].wait())[slot_y] > 0
        with journal.reader() as r:
            assert r.instance(instance_id("p/x")) is None
            assert r.instance(instance_id("p/y")) is not None


async def test_a_start_over_nothing_waits_for_a_start_that_replaces_the_row(nodes):
    """A start over nothing whose commit waits on a row that another start
    deletes and inserts anew (over an ended incarnation) fails, and leaves
    that start's incarnation as it is: READ COMMITTED would skip the deleted
    row and not see the new one, so every start locks its address first."""
    import threading

    a, b = nodes(), nodes()
    a.set_node("a")
    b.set_node("b")
    async with a, b:
        x = instance_id("p/x")
        made = Txn()
        made.require_absent(x)
        made.put_instance(
            x,
            address="p/x",
            process="p/:id",
            status="cancelled",
            record=InstanceRecord(params=["x"]),
        )
        await a.commit(made)
        # a replaces the cancelled incarnation, and holds its locks a while.
        a._writer.force_savepoints = True  # (every lock taken before "locked")
        holding, go_on = threading.Event(), threading.Event()

        def hold(moment, conn, txns):
            if moment == "locked" and any(t.requires for t in txns):
                holding.set()
                go_on.wait(10)

        a._writer.fault = hold
        replace = Txn()
        replace.require(x, frozenset({"cancelled"}), incarnation=1)
        replace.delete_instance(x)
        second = InstanceRecord(params=["x"], incarnation=2)
        replace.put_instance(x, address="p/x", process="p/:id", status="running", record=second)
        replacing = a.submit(replace)
        await trio.to_thread.run_sync(holding.wait, 10)
        # b starts over nothing meanwhile: its commit waits for a's.
        txn, _ = fresh_start(x, floor="floor/x")
        starting = b.submit(txn)
        await trio.sleep(0.3)
        go_on.set()
        await replacing.wait()
        with pytest.raises(Conflict) as refused:
            await starting.wait()
        assert "exists" == refused.value.reason
        with a.reader() as r:
            row = r.instance(x)
        assert ("running", 2) == (row.status, row.record.incarnation)


async def test_a_start_is_one_commit_with_no_read_and_no_claim(nodes, spy):
    async with actors.open_system(nodes(), processes=[waiter], node="a") as a:
        spy.watch(a.journal)
        commits = a.journal.commits
        handle = await a.start(waiter, "x")
        assert 1 == a.journal.commits - commits
        assert ([], []) == (spy.reads, spy.claims)
        assert 1 == handle.incarnation
        # It runs here, fenced by the epoch its commit drew.
        actor = a.registry.live[instance_id("pgstart/x")]
        assert actor.epoch > 0
        await a.send(handle.id, M, "hi")
        with trio.fail_after(10):
            assert "hi" == await handle.result()


async def test_a_start_of_an_existing_address_returns_its_handle(nodes, spy):
    async with (
        actors.open_system(nodes(), processes=[waiter], node="a") as a,
        actors.open_system(nodes(), processes=[waiter], node="b") as b,
    ):
        spy.watch(b.journal)
        first = await a.start(waiter, "x")
        # b's commit finds it there, and reads it: the handle of a's instance.
        again = await b.start(waiter, "x")
        assert (1, 1) == (first.incarnation, again.incarnation)
        assert [instance_id("pgstart/x")] == spy.reads
        assert [] == spy.claims  # nothing to run on b
        with pytest.raises(actors.AlreadyStarted):
            await b.start(waiter, "x", if_exists="error")
        await b.send(again.id, M, "from b")
        with trio.fail_after(10):
            assert "from b" == await first.result()


async def test_a_start_after_a_cleanup_counts_on_from_its_floor(nodes, spy):
    async with actors.open_system(nodes(), processes=[once], node="a") as a:
        for incarnation in (1, 2, 3):
            handle = await a.start(once, "y")
            assert incarnation == handle.incarnation
            with trio.fail_after(10):
                assert "y" == await handle.result()
            assert 1 == await a.cleanup(0)
        # The first start read nothing; each later one found the floor, then read it.
        assert [instance_id("pgonce/y")] * 2 == spy.reads


async def test_a_start_over_a_cancelled_incarnation_starts_afresh(nodes):
    async with actors.open_system(nodes(), processes=[waiter], node="a") as a:
        first = await a.start(waiter, "z")
        assert await first.cancel()
        second = await a.start(waiter, "z")
        assert 2 == second.incarnation
        await a.send(second.id, M, "again")
        with trio.fail_after(10):
            assert "again" == await second.result()


@pytest.mark.parametrize("savepoints", [False, True], ids=["fast", "savepoints"])
async def test_two_nodes_starting_the_same_addresses_make_one_instance_each(nodes, savepoints):
    n = 60
    RAN.clear()
    async with (
        actors.open_system(nodes(), processes=[once], node="a") as a,
        actors.open_system(nodes(), processes=[once], node="b") as b,
    ):
        for system in (a, b):
            system.journal._writer.force_savepoints = savepoints
        # A third of the addresses were used and cleaned up: a floor each.
        for i in range(0, n, 3):
            await (await a.start(once, f"r{i}")).result()
        assert n // 3 == await a.cleanup(0)
        RAN.clear()
        handles: dict[str, list[int]] = {}

        async def start(system, i):
            handle = await system.start(once, f"r{i}")
            handles.setdefault(f"r{i}", []).append(handle.incarnation)

        async with trio.open_nursery() as nursery:
            for i in range(n):
                for system in (a, b):
                    nursery.start_soon(start, system, i)
        with trio.fail_after(30):
            for i in range(n):
                assert f"r{i}" == await a.get(f"pgonce/r{i}").result()
        # One instance per address, both starts name it, its step ran once.
        expected = {f"r{i}": [2 if i % 3 == 0 else 1] * 2 for i in range(n)}
        assert expected == handles
        assert {f"r{i}": 1 for i in range(n)} == dict(RAN)


async def test_a_start_while_the_lease_is_lost_runs_once_it_is_back(nodes, spy):
    import psycopg

    from storage._postgres._schema import _node_key

    async with actors.open_system(nodes(), processes=[waiter], node="a") as a:
        journal = a.journal
        key = _node_key(journal.schema, "a")
        other = await trio.to_thread.run_sync(lambda: psycopg.connect(journal.dsn, autocommit=True))
        try:
            # Another process takes node a's lease: a's session ends, and
            # its heartbeat cannot take the lease back.
            def take() -> bool:
                pid = journal._lease.conn and journal._lease.conn.info.backend_pid
                if pid:
                    other.execute("SELECT pg_terminate_backend(%s)", [pid])
                row = other.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
                return bool(row and row[0])

            with trio.fail_after(5):
                while not await trio.to_thread.run_sync(take):
                    await trio.sleep(0.01)
                while journal.lease_term() is not None:
                    await trio.sleep(0.01)
            iid = instance_id("pgstart/w")
            handle = await a.start(waiter, "w")
            # Written, read first as before, and not run: it waits for the lease.
            assert [iid] == spy.reads
            await trio.sleep(2 * LEASE)
            assert iid not in a.registry.live
        finally:
            await trio.to_thread.run_sync(other.close)  # the lease is free again
        with trio.fail_after(10):
            while iid not in a.registry.live:
                await trio.sleep(0.01)
        await a.send(handle.id, M, "back")
        with trio.fail_after(10):
            assert "back" == await handle.result()


@pytest.mark.parametrize("how", ["retry", "fork"])
async def test_a_retry_or_fork_on_another_node_than_the_failed_runs_runs(nodes, how):
    # Node a ran it and still owns its row (a live node); b starts the new
    # run. The start deletes the ended row and makes a new one, which is
    # the committer's (as any new row): b claims it and runs it, and a,
    # which holds nothing of it, is not needed.
    BROKEN["now"] = True
    async with (
        actors.open_system(nodes(), processes=[flaky], node="a") as a,
        actors.open_system(nodes(), processes=[flaky], node="b") as b,
    ):
        failed = await a.start(flaky, "f")
        with trio.fail_after(5):
            with pytest.raises(actors.ProcessFailed):
                await failed.result()
        iid = instance_id("pgflaky/f")
        assert "a" == await b.journal.read(lambda r: r.owner(iid))
        BROKEN["now"] = False
        with trio.fail_after(3):
            if how == "retry":
                again = await b.retry("pgflaky/f")
            else:
                again = await b.fork("pgflaky/f", from_effect=0)
            assert "fixed" == await again.result()
        assert "b" == await b.journal.read(lambda r: r.owner(iid))
