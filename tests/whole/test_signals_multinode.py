"""Signals routed by identity across two nodes on one PostgreSQL schema:
recipients another node owns get their messages in the signal's commit
and are woken; an instance started on one node while another signals
either gets the signal or was started after it (docs/guarantees.md): a
start on one node that commits between the other's read of the recipients
and its commit makes that commit fail, and the signal reads again.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import instance_id

pytestmark = pytest.mark.slow  # two systems on PostgreSQL, real time

shipped = Signal("orders.shipped", identity=("order_id",))
seen = Signal("seen")


@process("parcels/:order_id/:parcel", listens=[shipped])
async def parcel(ctx: Context, order_id: str, parcel: str) -> list:
    """Takes every ``shipped`` until ``seen`` is asked, which it answers
    with what it took."""
    taken: list = []
    while True:
        signal, payload = await ctx.receive(shipped, seen)
        if signal is seen:
            await ctx.reply(taken)
            return taken
        taken.append(payload)


@process("emitter/:name")
async def emitter(ctx: Context, name: str, *, order_id: str) -> int:
    return await ctx.signal(shipped, {"order_id": order_id}, f"from {name}")


@pytest.fixture
def two_nodes(request):
    return _two_nodes(request)


def _two_nodes(request, second=None):
    """Systems "a" and "b" on one fresh schema; b's journal of class ``second``."""
    if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
        pytest.skip("PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)

    @asynccontextmanager
    async def both(processes):
        journal_a = PostgresJournal(dsn, schema=schema, lease_timeout=3.0)
        journal_b = (second or PostgresJournal)(dsn, schema=schema, lease_timeout=3.0)
        async with (
            actors.open_system(journal_a, processes=processes, node="a") as a,
            actors.open_system(journal_b, processes=processes, node="b") as b,
        ):
            yield a, b

    return both


async def test_recipients_on_another_node_get_the_signal(two_nodes):
    async with two_nodes([parcel, emitter]) as (a, b):
        with trio.fail_after(30):
            for p in ("p1", "p2"):
                await b.start(parcel, "o-1", p)
            await a.start(parcel, "o-2", "p1")
            assert 2 == await a.signal(shipped, {"order_id": "o-1"}, "from a")
            assert 2 == await (await a.start(emitter, "e", order_id="o-1")).result()
            for p in ("p1", "p2"):
                assert instance_id(f"parcels/o-1/{p}") in b.registry.live
                # They run where they were started: the messages crossed nodes.
                assert instance_id(f"parcels/o-1/{p}") not in a.registry.live
                assert ["from a", "from e"] == await a.ask(f"parcels/o-1/{p}", seen)
            assert [] == await a.ask("parcels/o-2/p1", seen)


async def test_a_start_racing_a_signal_on_another_node_gets_it_or_started_after(two_nodes):
    rounds, starts = 6, 12
    async with two_nodes([parcel]) as (a, b):
        with trio.fail_after(120):
            for n in range(rounds):
                order_id = f"o-{n}"
                started: list[str] = []  # in the order their starts returned
                before_signal: list[str] = []
                reached: list[int] = []

                async def start_all(order_id: str = order_id) -> None:
                    for i in range(starts):
                        await a.start(parcel, order_id, f"p{i:02}")
                        started.append(f"p{i:02}")
                        await trio.sleep(0.002 * (n % 3))

                async def signal_once(order_id: str = order_id) -> None:
                    await trio.sleep(0.005 * n)
                    before_signal.extend(started)
                    reached.append(await b.signal(shipped, {"order_id": order_id}, "s"))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(start_all)
                    nursery.start_soon(signal_once)
                # How many messages each was ever given (its mailbox counter).
                given = await a.journal.read(
                    lambda r, order_id=order_id, started=started: {
                        p: r.last_message_seq(instance_id(f"parcels/{order_id}/{p}"))
                        for p in started
                    }
                )
                assert set(given.values()) <= {0, 1}  # none got it twice
                got = [p for p in started if given[p] == 1]
                # Those that got it are the ones started first: the starts
                # that came after the signal got none.
                assert started[: len(got)] == got, (n, given, reached)
                assert set(before_signal) <= set(got)
                assert [len(got)] == reached


async def test_a_start_on_one_node_between_a_signals_read_and_commit_gets_it(request):
    from storage import PostgresJournal

    class StartsDuringARead(PostgresJournal):
        """Node b's journal: once armed, a start commits on node a after a
        read of b's and before b commits what it built on it."""

        between = None

        async def read(self, fn):
            found = await super().read(fn)
            # Only the signal's read of its recipients: a read of b's own in
            # the background (its takeover scan, say) would take the turn
            # under load and let p2 start before the signal read at all.
            if getattr(fn, "__module__", None) != "actors._features._signals":
                return found
            between, StartsDuringARead.between = StartsDuringARead.between, None
            if between is not None:
                await between()
            return found

    async with _two_nodes(request, StartsDuringARead)([parcel]) as (a, b):
        with trio.fail_after(30):
            await a.start(parcel, "o-1", "p1")

            async def start_on_a() -> None:
                await a.start(parcel, "o-1", "p2")

            StartsDuringARead.between = start_on_a
            # p2's start commits (on a) after b read the recipients and
            # before b commits: b reads again, and p2 gets the signal.
            assert 2 == await b.signal(shipped, {"order_id": "o-1"}, "s")
            assert ["s"] == await b.ask("parcels/o-1/p2", seen)
            assert ["s"] == await b.ask("parcels/o-1/p1", seen)
