"""Two nodes on one PostgreSQL schema fork the same failed instances at
once: each address gets exactly one new incarnation, the loser is refused
with what happened, and no step before the fork point runs again."""

from __future__ import annotations

import collections
import os
import re

import pytest
import trio

import actors
from actors import Context, process

N = 20  # addresses forked from both nodes at once
RAN: collections.Counter[str] = collections.Counter()
BROKEN = {"on": True}


def pay(id: str) -> str:
    RAN["pay"] += 1
    return f"paid {id}"


def deliver(id: str) -> str:
    RAN["deliver"] += 1
    if BROKEN["on"]:
        raise RuntimeError("the courier is down")
    return f"delivered {id}"


@process("parcels/:id")
async def parcel(ctx: Context, id: str) -> list[str]:
    return [await ctx.step(pay, id), await ctx.step(deliver, id)]


@pytest.mark.slow  # two systems on PostgreSQL, in real time
async def test_two_nodes_forking_one_address_make_one_incarnation(request):
    if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
        pytest.skip("PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)

    def journal():
        return PostgresJournal(dsn, schema=schema, lease_timeout=3.0)

    RAN.clear()
    BROKEN["on"] = True
    with trio.fail_after(60):
        async with (
            actors.open_system(journal(), processes=[parcel], node="a") as a,
            actors.open_system(journal(), processes=[parcel], node="b") as b,
        ):
            for i in range(N):
                with pytest.raises(actors.ProcessFailed):
                    await (await a.start(parcel, f"p{i}")).result()
            assert {"pay": N, "deliver": N} == RAN
            BROKEN["on"] = False
            outcomes: dict[int, list] = {}

            async def both(i):
                got: list = []

                async def one(system):
                    try:
                        got.append(await system.fork(f"parcels/p{i}", after_step="pay"))
                    except actors.InvalidArguments as exc:
                        assert re.match(
                            rf"cannot fork 'parcels/p{i}': (another fork, start or retry made "
                            r"incarnation 2|it is running|it completed)",
                            str(exc),
                        ), exc
                        got.append(exc)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(one, a)
                    nursery.start_soon(one, b)
                outcomes[i] = got

            async with trio.open_nursery() as nursery:
                for i in range(N):
                    nursery.start_soon(both, i)
            for i, got in outcomes.items():
                handles = [h for h in got if isinstance(h, actors.Handle)]
                assert 1 == len(handles) and 2 == handles[0].incarnation, (i, got)
                assert [f"paid p{i}", f"delivered p{i}"] == await handles[0].result()
            rows = await a.journal.read(lambda r: list(r.instances(None, "parcels/:id")))
            assert {("completed", 2)} == {(row.status, row.record.incarnation) for row in rows}
            # The step before the fork point ran 0 more times; the one after it, once each.
            assert {"pay": N, "deliver": 2 * N} == RAN
