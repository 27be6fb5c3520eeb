"""Two nodes starting one address at once (PostgreSQL): a start commits only
over what it read, so acknowledged work is never overwritten or deleted and
one address never has two owners.

LMDB and memory journals have one owner each (a second system on the same
journal is refused with `JournalLocked`), so two systems cannot race there;
the compare-and-set itself is checked on every journal by
tests/journals/test_journal_contract.py, and within one system by
tests/actor/test_creation_races.py.

These talk to a real server (see tests/pg.py) and run in real time.
"""

from __future__ import annotations

import os
import threading

import pytest
import trio

import actors
from storage import instance_id
from tests.pg import fresh_schema

if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
    pytest.importorskip("psycopg", reason="PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")

M = actors.Signal("m")
N = 200  # addresses per round


@actors.process("pair/:id")
async def pair(ctx: actors.Context, id: str) -> list[str]:
    """Completes with the payloads of the first two messages, sorted."""
    got = []
    for _ in range(2):
        _signal, payload = await ctx.receive(M)
        got.append(payload)
    return sorted(got)


@pytest.fixture
def nodes(request):
    from storage import PostgresJournal

    dsn, schema = fresh_schema(request)

    def make(**kw):
        return PostgresJournal(dsn, schema=schema, lease_timeout=3.0, **kw)

    return make


async def both(fn_a, fn_b):
    """Run the two calls at once; each one's outcome (value or exception)."""
    out: list = [None, None]

    async def run(i, fn):
        try:
            out[i] = await fn()
        except actors.ActorError as exc:
            out[i] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, 0, fn_a)
        nursery.start_soon(run, 1, fn_b)
    return out


async def race(a, b, fn_a, fn_b):
    """Each of N addresses started from both nodes at once."""
    results = []
    async with trio.open_nursery() as nursery:

        async def one(i):
            results.append((i, await both(lambda: fn_a(a, i), lambda: fn_b(b, i))))

        for i in range(N):
            nursery.start_soon(one, i)
    return sorted(results)


async def results_of(system, ids):
    out = {}
    with trio.move_on_after(60):
        for i in ids:
            out[i] = await system.get(f"pair/{i}").result()
        return out
    stuck = [i for i in ids if i not in out]
    iid = instance_id(f"pair/{stuck[0]}")
    with system.journal.reader() as r:
        row, mail = r.instance(iid), r.mailbox(iid)
    actor = system.registry.live.get(iid)
    raise AssertionError(
        f"{len(stuck)} of {len(ids)} did not end, e.g. {stuck[0]}: {row} {mail}; here: "
        f"{system.get(f'pair/{stuck[0]}').status} {actor and (actor.loaded, actor.status, actor.done)}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("savepoints", [False, True], ids=["fast", "savepoints"])
async def test_two_nodes_starting_the_same_addresses(nodes, savepoints):
    async with (
        actors.open_system(nodes(), processes=[pair], node="a") as a,
        actors.open_system(nodes(), processes=[pair], node="b") as b,
    ):
        a.journal._writer.force_savepoints = savepoints
        # Fresh addresses, each started with a message from both nodes: both
        # messages are acknowledged, so the one instance must read both.
        outcomes = await race(
            a,
            b,
            lambda s, i: s.signal_with_start(pair, f"f{i}", signal=M, payload="a"),
            lambda s, i: s.signal_with_start(pair, f"f{i}", signal=M, payload="b"),
        )
        for _, (ha, hb) in outcomes:
            assert (1, 1) == (ha.incarnation, hb.incarnation)
        done = await results_of(a, [f"f{i}" for i in range(N)])
        assert {f"f{i}": ["a", "b"] for i in range(N)} == done

        # Completed addresses started again from both, with and without
        # if_exists="error": nothing changes, the results stay.
        outcomes = await race(
            a,
            b,
            lambda s, i: s.start(pair, f"f{i}", if_exists="error"),
            lambda s, i: s.start(pair, f"f{i}"),
        )
        for _, (ea, hb) in outcomes:
            assert isinstance(ea, actors.AlreadyStarted) and ea.status == "completed"
            assert "completed" == hb.status
        assert done == await results_of(b, [f"f{i}" for i in range(N)])

        # Fresh addresses started with if_exists="error" from both: exactly
        # one start succeeds, the other is told the address is taken.
        outcomes = await race(
            a,
            b,
            lambda s, i: s.start(pair, f"e{i}", if_exists="error"),
            lambda s, i: s.start(pair, f"e{i}", if_exists="error"),
        )
        for i, (x, y) in outcomes:
            errors = [o for o in (x, y) if isinstance(o, actors.AlreadyStarted)]
            assert 1 == len(errors), (i, x, y)

        # Cancelled addresses restarted from both at once, each with a message:
        # one new incarnation, holding both messages.
        for i in range(N):
            assert await a.cancel(f"pair/e{i}")
        outcomes = await race(
            a,
            b,
            lambda s, i: s.signal_with_start(pair, f"e{i}", signal=M, payload="a"),
            lambda s, i: s.signal_with_start(pair, f"e{i}", signal=M, payload="b"),
        )
        for _, (ha, hb) in outcomes:
            assert (2, 2) == (ha.incarnation, hb.incarnation)
        assert {f"e{i}": ["a", "b"] for i in range(N)} == await results_of(
            a, [f"e{i}" for i in range(N)]
        )


@pytest.mark.slow
async def test_a_start_held_up_past_another_nodes_work_changes_nothing(nodes):
    """A starter stalled between reading and committing (as SIGSTOP does)
    lands after the other node started, ran and completed the instance, and
    after a cancelled address got its new incarnation and mail: its start
    must not turn either back."""
    ja, jb = nodes(), nodes()
    gate = threading.Event()
    held = threading.Event()
    write = ja._writer.write

    def stalled_write(batch):  # holds a's commits while the gate is shut
        if not gate.is_set():
            held.set()
            gate.wait(30)
        write(batch)

    ja._writer.write = stalled_write
    gate.set()
    async with (
        actors.open_system(ja, processes=[pair], node="a") as a,
        actors.open_system(jb, processes=[pair], node="b") as b,
    ):
        await b.start(pair, "c1")
        assert await b.cancel("pair/c1")
        gate.clear()
        late: dict = {}

        async def start_late(name):
            try:
                late[name] = await a.signal_with_start(pair, name, signal=M, payload="late")
            except actors.ActorError as exc:
                late[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start_late, "done1")
            nursery.start_soon(start_late, "c1")
            await trio.to_thread.run_sync(held.wait)
            # Meanwhile b starts both, and done1 completes.
            await b.signal_with_start(pair, "done1", signal=M, payload="x")
            await b.send("pair/done1", M, "y")
            assert ["x", "y"] == await b.get("pair/done1").result()
            await b.signal_with_start(pair, "c1", signal=M, payload="b1")
            gate.set()
        # done1 completed: the late start finds it so, and its message bounces.
        assert isinstance(late["done1"], actors.NotDelivered), late
        # c1: the late start finds b's incarnation 2, and its message joins it.
        assert 2 == late["c1"].incarnation
        assert ["b1", "late"] == await b.get("pair/c1").result()
        assert ["x", "y"] == await a.get("pair/done1").result()
        assert "completed" == b.get("pair/done1").status


@pytest.mark.parametrize("savepoints", [False, True], ids=["fast", "savepoints"])
async def test_a_deadlock_or_serialization_failure_runs_the_batch_again(nodes, savepoints):
    """The server rolls a transaction back with SQLSTATE 40P01 or 40001: the
    batch runs again, and nobody sees an error (psycopg files
    DeadlockDetected under OperationalError, so it is told by its code)."""
    import psycopg.errors

    journal = nodes()
    injected = [
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.SerializationFailure("could not serialize access"),
    ]

    def fault(moment, conn, txns):
        if moment == "locked" and injected:
            raise injected.pop(0)

    async with actors.open_system(journal, processes=[pair], node="a") as a:
        journal._writer.force_savepoints = savepoints
        journal._writer.fault = fault
        h = await a.signal_with_start(pair, "d1", signal=M, payload="x")
        await a.send("pair/d1", M, "y")
        assert ["x", "y"] == await h.result()
        assert [] == injected
