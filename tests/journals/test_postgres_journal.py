"""PostgreSQL-specific behaviour: migrations, several nodes on one schema,
group commit, lost connections, the SAVEPOINT path, and clear errors.

These talk to a real server (see tests/pg.py) and run in real time.
"""

from __future__ import annotations

import os
import random
import time

import pytest
import trio

import actors
from storage import (
    STATUSES,
    ActorError,
    Conflict,
    EncodeError,
    InstanceRecord,
    JournalCorrupt,
    MemoryJournal,
    Txn,
    instance_id,
)
from tests.pg import fresh_schema

if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
    pytest.importorskip("psycopg", reason="PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")

A = instance_id("orders/o-1")
B = instance_id("orders/o-2")
C = instance_id("orders/o-3")
LIVE = frozenset({"running", "suspended"})


@pytest.fixture
def pg(request):
    """``(dsn, schema)`` of a schema of this test's own."""
    return fresh_schema(request)


@pytest.fixture
def make_pg(pg):
    """A factory of PostgresJournal objects on this test's schema (each a 'node')."""
    from storage import PostgresJournal

    dsn, schema = pg
    return lambda **kw: PostgresJournal(dsn, **{"schema": schema, **kw})


def sql(dsn: str, query: str, params=None) -> list[tuple]:
    """Run one statement on a connection of its own (outside any journal)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def put(txn: Txn, iid: bytes, status: str = "running", **record) -> None:
    txn.put_instance(
        iid,
        address=iid.hex(),
        process="orders/:id",
        status=status,
        record=InstanceRecord(params=[iid.hex()], input=record),
    )


async def commit(journal, build) -> list[int]:
    txn = Txn()
    build(txn)
    return await journal.commit(txn)


# -- schema and migrations ---------------------------------------------------


async def test_migration_is_versioned_and_idempotent(make_pg, pg):
    dsn, schema = pg
    async with make_pg() as j:
        await commit(j, lambda t: put(t, A, n=1))
    async with make_pg() as j:  # a second open migrates nothing and keeps the data
        with j.reader() as r:
            assert {"n": 1} == r.instance(A).record.input
    from storage._postgres import SCHEMA_VERSION

    versions = sql(dsn, f'SELECT version FROM "{schema}".schema_version ORDER BY version')
    assert [(v,) for v in range(1, SCHEMA_VERSION + 1)] == versions
    tables = sql(
        dsn, "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [schema]
    )
    assert {
        "schema_version",
        "instances",
        "log",
        "mail",
        "timers",
        "stream",
        "cursors",
        "counters",
        "nodes",
        "states",
    } == {name for (name,) in tables}


async def test_several_nodes_may_open_a_fresh_schema_at_once(make_pg, pg):
    journals = [make_pg() for _ in range(4)]
    async with trio.open_nursery() as nursery:
        for j in journals:
            nursery.start_soon(j.open)
    try:
        await commit(journals[0], lambda t: put(t, A))
        with journals[3].reader() as r:
            assert "running" == r.instance(A).status
    finally:
        for j in journals:
            await j.close()
    assert [(1,)] == sql(pg[0], f'SELECT count(*) FROM "{pg[1]}".schema_version WHERE version = 1')


async def test_a_schema_from_a_newer_version_is_refused(make_pg, pg):
    dsn, schema = pg
    async with make_pg():
        pass
    sql(dsn, f'INSERT INTO "{schema}".schema_version (version) VALUES (999)')
    with pytest.raises(JournalCorrupt, match="upgrade the library"):
        await make_pg().open()


def test_bad_arguments_are_clear_errors():
    from storage import PostgresJournal

    with pytest.raises(ValueError, match="durability"):
        PostgresJournal("postgresql://x@localhost/db", durability="fast")
    with pytest.raises(ValueError, match="schema"):
        PostgresJournal("postgresql://x@localhost/db", schema="x" * 64)
    with pytest.raises(ValueError, match="not a valid PostgreSQL DSN"):
        PostgresJournal("host=localhost port")


# -- errors at the boundary --------------------------------------------------


async def test_unreachable_server_names_the_dsn_and_the_fix():
    from storage import JournalUnavailable, PostgresJournal

    j = PostgresJournal("postgresql://postgres:hunter2@127.0.0.1:1/test", schema="nowhere")
    with pytest.raises(JournalUnavailable) as info:
        await j.open()
    message = str(info.value)
    assert "127.0.0.1:1" in message and "PostgresJournal('postgresql://" in message
    assert "hunter2" not in message  # the password is masked
    assert isinstance(info.value, ActorError) and isinstance(info.value, ConnectionError)
    assert type(info.value).__module__.startswith("storage")
    assert type(info.value.__cause__).__module__.startswith("psycopg")  # chained, not leaked


async def test_undecodable_row_is_journal_corrupt(make_pg, pg):
    dsn, schema = pg
    async with make_pg() as j:
        await commit(j, lambda t: (put(t, A), t.put_log(A, 0, 1, {"fine": True})))
        sql(dsn, f'UPDATE "{schema}".log SET entry = %s', [b"\xc1garbage"])
        sql(dsn, f'UPDATE "{schema}".instances SET status = 99')
        with j.reader() as r:
            with pytest.raises(JournalCorrupt) as info:
                r.log(A, 0)
            assert "log" == info.value.database and A.hex() in str(info.value)
            with pytest.raises(JournalCorrupt, match="unknown status code 99"):
                r.instance(A)


async def test_a_value_the_columns_cannot_hold_fails_only_its_transaction(make_pg):
    async with make_pg() as j:
        await commit(j, lambda t: put(t, A))
        outcomes: dict[str, object] = {}

        async def run(name: str, build) -> None:
            try:
                outcomes[name] = await commit(j, build)
            except ActorError as exc:
                outcomes[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "before", lambda t: t.append_message(A, "m1"))
            nursery.start_soon(
                run, "bad", lambda t: (t.append_message(A, "x"), t.put_log(A, 0, 2**70, "x"))
            )
            nursery.start_soon(run, "after", lambda t: t.append_message(A, "m2"))
        assert isinstance(outcomes["bad"], EncodeError)
        assert [[1], [2]] == sorted([outcomes["before"], outcomes["after"]])  # no gap
        with j.reader() as r:
            mailbox = dict(r.mailbox(A))
            assert {1, 2} == set(mailbox)
            assert "m1" == mailbox[outcomes["before"][0]]
            assert {} == r.log(A, 0)


# -- several nodes, group commit --------------------------------------------


async def test_two_nodes_never_hand_out_one_mailbox_seq_twice(make_pg):
    async with make_pg() as one, make_pg() as two:
        await commit(one, lambda t: put(t, A))
        seqs: list[int] = []
        indexes: list[int] = []

        async def sender(journal, i: int) -> None:
            txn = Txn()
            txn.require(A, LIVE)
            txn.append_message(A, {"from": i})
            txn.append_stream(A, i)
            seq, index = await journal.commit(txn)
            seqs.append(seq)
            indexes.append(index)

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(sender, (one, two)[i % 2], i)
        assert list(range(1, 201)) == sorted(seqs)
        assert list(range(200)) == sorted(indexes)
        with two.reader() as r:
            assert sorted(seqs) == [seq for seq, _ in r.mailbox(A)]
            assert 200 == r.stream_length(A)


async def test_group_commit_batches_200_concurrent_writers(make_pg):
    async with make_pg() as j:
        await commit(j, lambda t: put(t, A))
        before = j.commits

        async def writer(i: int) -> None:
            txn = Txn()
            txn.require(A, LIVE)
            txn.put_log(A, 0, i, {"i": i})
            txn.append_message(A, i)
            await j.commit(txn)

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(writer, i)
        batches = j.commits - before
        assert 1 <= batches <= 10, f"{batches} commits for 200 writers"
        with j.reader() as r:
            assert 200 == len(r.log(A, 0)) == len(r.mailbox(A))


# -- durability, connections, snapshots --------------------------------------


async def test_async_durability_returns_when_queued(make_pg):
    async with make_pg(durability="async") as j:
        await commit(j, lambda t: put(t, A))
        assert [] == await commit(j, lambda t: t.append_message(A, "m"))
        txn = Txn()
        txn.append_message(A, "n")
        assert [2] == await j.commit(txn, durable=True)
        await j.flush()
        with j.reader() as r:
            assert [(1, "m"), (2, "n")] == r.mailbox(A)


def kill_connections(dsn: str, schema: str) -> int:
    """Terminate every server connection of the journals on ``schema``."""
    rows = sql(
        dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        [f"actors journal {schema}"[:63]],
    )
    return len(rows)


async def test_lost_connections_are_replaced_without_losing_a_write(make_pg, pg):
    dsn, schema = pg
    async with make_pg() as j:
        await commit(j, lambda t: put(t, A))
        for build in (
            lambda t: (t.require(A, LIVE), t.append_message(A, "after a kill")),
            lambda t: t.put_log(A, 0, 1, "idempotent batch"),
        ):
            with j.reader() as r:
                assert r.instance(A) is not None
            assert 2 <= kill_connections(dsn, schema)  # the committer's and a reader's
            await commit(j, build)
            with j.reader() as r:  # its pooled connection died while idle
                assert r.instance(A) is not None
        with j.reader() as r:
            assert [(1, "after a kill")] == r.mailbox(A)
            assert {1: "idempotent batch"} == r.log(A, 0)


async def test_a_commit_cut_off_during_commit_is_looked_up_by_its_xid(make_pg, pg):
    import psycopg

    from storage._postgres._writer import _Attempt

    async with make_pg() as j:
        outcomes = {}
        for ending in ("commit", "rollback"):
            with psycopg.connect(pg[0]) as conn:
                run = _Attempt()
                run.xid = int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
                getattr(conn, ending)()
            outcomes[ending] = await trio.to_thread.run_sync(j._writer.committed, run, [])
        assert {"commit": True, "rollback": False} == outcomes
        txn = Txn()
        txn.append_message(A, "m")
        # No xid and an append in the batch: running it again could append twice.
        assert await trio.to_thread.run_sync(j._writer.committed, _Attempt(), [txn]) is None


def kill_own_session(dsn: str, conn) -> None:
    """Terminate the server session behind the journal connection ``conn``
    (no other), and wait until it is gone."""
    pid = conn.info.backend_pid
    assert [(True,)] == sql(dsn, "SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 5
    while sql(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]):
        assert time.monotonic() < deadline, f"session {pid} did not end"
        time.sleep(0.01)


def fail_commits(dsn: str, moment: str, how: str, times: int = 1, only=lambda txns: True):
    """A committer fault: at ``moment`` of the next ``times`` commits (of
    batches ``only`` picks), kill the committer's own session; ``how`` is
    what the committer then sees: "busy" is psycopg's "cannot exit pipeline
    mode while busy" on a connection it still thinks is fine, "broken" the
    closed socket itself."""
    import psycopg

    left = [times]

    def fault(at: str, conn, txns) -> None:
        if at != moment or not left[0] or not only(txns):
            return
        left[0] -= 1
        kill_own_session(dsn, conn)
        if how == "busy":
            raise psycopg.OperationalError("cannot exit pipeline mode while busy")
        conn.execute("SELECT 1")  # finds the socket closed

    return fault


@pytest.mark.slow
@pytest.mark.parametrize(
    "moment, how, savepoints",
    [
        ("commit answered", "busy", False),
        ("commit answered", "broken", False),
        ("commit answered", "broken", True),
        ("commit sent", "broken", False),
    ],
)
async def test_a_commit_whose_answer_is_lost_is_written_exactly_once(
    make_pg, pg, moment, how, savepoints
):
    dsn, schema = pg
    async with make_pg() as j:
        await commit(j, lambda t: put(t, A))
        j._writer.force_savepoints = savepoints
        j._writer.fault = fail_commits(dsn, moment, how)
        before = j.commits

        def build(t: Txn) -> None:
            t.require(A, LIVE)
            t.append_message(A, "m")
            t.append_stream(A, "v")
            t.put_log(A, 0, 1, "entry")

        assert [1, 0] == await commit(j, build)
        assert 1 == j.commits - before  # looked up, not run again
        # A batch that appends after a delete takes no numbers up front, and
        # no precondition: it learns its transaction id all the same.
        j._writer.fault = fail_commits(dsn, moment, how)

        def again(t: Txn) -> None:
            t.delete_instance(B)
            put(t, B)
            t.append_message(B, "only once")

        assert [1] == await commit(j, again)
        with j.reader() as r:
            assert [(1, "m")] == r.mailbox(A)
            assert [(0, "v")] == r.stream(A)
            assert (1, 1) == (r.last_message_seq(A), r.stream_length(A))
            assert {1: "entry"} == r.log(A, 0)
            assert [(1, "only once")] == r.mailbox(B)
    rows = sql(dsn, f'SELECT count(*) FROM "{schema}".mail')
    assert [(2,)] == rows


@pytest.mark.slow
async def test_a_commit_whose_outcome_stays_unknown_is_reported_as_such(make_pg, pg):
    from storage import CommitOutcomeUnknown, JournalUnavailable

    dsn, _ = pg
    async with make_pg() as j:
        await commit(j, lambda t: put(t, A))
        j._writer.fault = fail_commits(dsn, "commit answered", "busy")
        j._writer.committed = lambda run, txns: None  # the server cannot say
        with pytest.raises(CommitOutcomeUnknown) as caught:
            await commit(j, lambda t: t.append_message(A, "m"))
        assert isinstance(caught.value, JournalUnavailable)
        assert "read back what they write before writing them again" in str(caught.value)
        del j._writer.committed
        with j.reader() as r:  # it was committed; the journal still works
            assert [(1, "m")] == r.mailbox(A)
        assert [2] == await commit(j, lambda t: t.append_message(A, "n"))


@actors.process("tally/:id")
async def tally(ctx: actors.Context, id: str) -> int:
    _signal, payload = await ctx.receive(actors.Signal("add"))
    return 2 * payload["n"]


@pytest.mark.slow
async def test_an_instance_whose_journal_connection_is_lost_is_loaded_again(make_pg, pg):
    from storage._journal import TAKE_MESSAGE
    from storage._postgres._writer import _ATTEMPTS

    dsn, schema = pg
    journal = make_pg()

    def takes(txns: list[Txn]) -> bool:
        return any(op[0] == TAKE_MESSAGE for t in txns for op in t.ops)

    async with actors.open_system(journal, processes=[tally]) as system:
        handle = await system.start(tally, "1")
        # Every try of the write that takes the message loses its session
        # (whether or not the server had its COMMIT yet): the instance gives
        # up on the journal, is loaded again from what was committed, and
        # the system carries on.
        journal._writer.fault = fail_commits(
            dsn, "commit sent", "broken", times=_ATTEMPTS, only=takes
        )
        await system.send("tally/1", actors.Signal("add"), {"n": 21})
        with trio.fail_after(15):
            assert 42 == await handle.result()
        other = await system.start(tally, "2")
        await system.send("tally/2", actors.Signal("add"), {"n": 1})
        assert 2 == await other.result()
    rows = sql(dsn, f'SELECT count(*) FROM "{schema}".mail')
    assert [(0,)] == rows


async def test_a_reader_sees_one_snapshot(make_pg, pg):
    dsn, schema = pg
    async with make_pg() as j:
        await commit(j, lambda t: put(t, A, n=1))
        with j.reader() as r:
            assert {"n": 1} == r.instance(A).record.input
            sql(dsn, f'DELETE FROM "{schema}".instances')
            assert {"n": 1} == r.instance(A).record.input
            assert {"running": 1} == r.count_by_status()
        with j.reader() as r:
            assert r.instance(A) is None
        assert 0 < j.size_bytes()


async def test_instances_iterates_past_a_page(make_pg):
    async with make_pg() as j:
        txn = Txn()
        iids = [instance_id(f"p/{i}") for i in range(2500)]
        for i, iid in enumerate(iids):
            put(txn, iid, ("running", "suspended")[i % 2])
        await j.commit(txn)
        with j.reader() as r:
            rows = list(r.instances())
            assert sorted(iids, key=lambda i: (iids.index(i) % 2, i)) == [x.iid for x in rows]
            assert 1250 == len(list(r.instances(status="suspended", process="orders/:id")))


# -- the same semantics as MemoryJournal, on random batches -------------------


def random_txn(rng: random.Random, now: float) -> Txn:
    txn = Txn()
    iids = (A, B, C)
    for _ in range(rng.randint(0, 2) if rng.random() < 0.4 else 0):
        txn.require(rng.choice(iids), rng.choice([None, LIVE, frozenset({"running"})]))
    for _ in range(rng.randint(1, 5)):
        iid = rng.choice(iids)
        kind = rng.randrange(12)
        if kind == 0:
            status = rng.choice(("running", "suspended", "completed"))
            put(txn, iid, status, n=rng.randrange(100))
        elif kind == 1:
            txn.set_status(iid, rng.choice(STATUSES[:3]))
        elif kind == 2 and rng.random() < 0.3:
            txn.delete_instance(iid)
        elif kind == 3:
            txn.put_log(iid, rng.randrange(2), rng.randrange(4), rng.random())
        elif kind == 4 and rng.random() < 0.3:
            txn.drop_log(iid, rng.randrange(2))
        elif kind in (5, 6):
            txn.append_message(iid, rng.randrange(1000))
        elif kind == 7:
            txn.take_message(iid, rng.randrange(1, 8))
        elif kind == 8:
            txn.add_timer(iid, rng.randrange(2), rng.randrange(3), now + rng.randrange(-50, 50))
        elif kind == 9:
            txn.cancel_timer(iid, rng.randrange(2), rng.randrange(3))
        elif kind == 10:
            txn.append_stream(iid, rng.random())
        else:
            txn.set_cursor(iid, rng.choice("xy"), rng.randrange(5))
    return txn


def snapshot(r, now: float) -> dict:
    per_iid = {
        iid: (
            None
            if r.instance(iid) is None
            else tuple(
                getattr(r.instance(iid), f) for f in ("address", "process", "status", "record")
            ),
            {run: r.log(iid, run) for run in r.log_runs(iid)},
            r.mailbox(iid),
            r.last_message_seq(iid),
            r.timers(iid),
            r.stream(iid),
            r.stream_length(iid),
            r.cursors(iid),
            r.has_records(iid),
        )
        for iid in (A, B, C)
    }
    return {
        "per_iid": per_iid,
        "instances": [x.iid for x in r.instances()],
        "running": [x.iid for x in r.instances(status="running")],
        "counts": r.count_by_status(),
        "with_mail": sorted(r.instances_with_mail()),
        "due": r.due_timers(now),
        "due_after": r.due_timers(now + 100, after=now - 10),
        "next_due": r.next_due(),
    }


def outcome(ticket_result) -> object:
    if isinstance(ticket_result, Conflict):
        return ("conflict", ticket_result.reason, ticket_result.status)
    return ticket_result


@pytest.mark.parametrize("savepoints", [False, True], ids=["pipelined", "savepoints"])
@pytest.mark.parametrize("seed", range(6))
async def test_random_batches_match_the_memory_journal(make_pg, seed, savepoints):
    rng = random.Random(seed)
    now = time.time()
    async with MemoryJournal() as mem, make_pg() as pgj:
        pgj._writer.force_savepoints = savepoints
        for _ in range(12):
            txns = [random_txn(rng, now) for _ in range(rng.randint(1, 30))]
            tickets = [(mem.submit(t), pgj.submit(t)) for t in txns]  # one or a few batches
            for mem_ticket, pg_ticket in tickets:
                results = []
                for ticket in (mem_ticket, pg_ticket):
                    try:
                        results.append(await ticket.wait())
                    except Conflict as exc:
                        results.append(exc)
                assert outcome(results[0]) == outcome(results[1])
            with mem.reader() as m, pgj.reader() as p:
                assert snapshot(m, now) == snapshot(p, now)


async def test_records_of_another_shape_read_as_corrupt_on_postgres(make_pg):
    """Like LMDB's: a log entry or a message of the wrong shape is
    `JournalCorrupt` where it is read (with check_shapes, as a system reads)."""
    async with make_pg() as j:
        txn = Txn()
        put(txn, A)
        txn.put_log(A, 0, 1, {"k": 5})  # a kind that is not a name
        txn.append_message(A, {"not": "a message"})
        await j.commit(txn)
        with j.reader() as r:  # without the checks, the stored maps come back
            assert r.log(A, 0) == {1: {"k": 5}}
        j.check_shapes = True
        with j.reader() as r:
            for read, database in (
                (lambda: r.entries(A, 0), "log"),
                (lambda: r.log(A, 0), "log"),
                (lambda: r.mailbox(A), "mail"),
            ):
                with pytest.raises(JournalCorrupt) as info:
                    read()
                assert info.value.database == database and "wrong shape" in str(info.value)
