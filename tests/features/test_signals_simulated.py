"""Signals routed by identity on the simulated journal (virtual time,
commits in batches, latency) and on two simulated nodes sharing one
store: the identity index is the store's, so a signal sent from one node
reaches the listeners another node runs, and starts racing it on the other
node either get it or came after it.
"""

from __future__ import annotations

import random

import trio

import actors
from actors import Context, Signal, process
from storage import JournalFaults, SimulatedJournal, instance_id, simulated_nodes

shipped = Signal("orders.shipped", identity=("order_id",))
go = Signal("go")


@process("parcels/:order_id/:parcel", listens=[shipped])
async def parcel(ctx: Context, order_id: str, parcel: str) -> list:
    """Takes every ``shipped`` until ``go``; gives what it took."""
    taken: list = []
    while True:
        signal, payload = await ctx.receive(shipped, go)
        if signal is go:
            return taken
        taken.append(payload)


async def test_fan_out_on_the_simulated_journal(autojump_clock):
    journal = SimulatedJournal(random.Random(7), faults=JournalFaults(latency=0.01))
    async with actors.open_system(journal, processes=[parcel]) as system:
        for p in ("a", "b", "c"):
            await system.start(parcel, "o-1", p)
        await system.start(parcel, "o-2", "a")
        assert 3 == await system.signal(shipped, {"order_id": "o-1"}, "s1")
        assert 3 == await system.signal(shipped, {"order_id": "o-1"}, "s2", key="k")
        assert 0 == await system.signal(shipped, {"order_id": "o-1"}, "s3", key="k")
        for p in ("a", "b", "c"):
            await system.send(f"parcels/o-1/{p}", go)
            assert ["s1", "s2"] == await system.get(f"parcels/o-1/{p}").result()
        await system.send("parcels/o-2/a", go)
        assert [] == await system.get("parcels/o-2/a").result()


async def test_two_simulated_nodes_share_the_index(autojump_clock):
    a_journal, b_journal = simulated_nodes(random.Random(3), ["a", "b"])
    async with (
        actors.open_system(a_journal, processes=[parcel], node="a") as a,
        actors.open_system(b_journal, processes=[parcel], node="b") as b,
    ):
        for n in range(8):
            order_id = f"o-{n}"
            started: list[str] = []
            before: list[str] = []
            reached: list[int] = []

            async def start_all(order_id: str = order_id, started: list = started) -> None:
                for i in range(10):
                    await a.start(parcel, order_id, f"p{i}")
                    started.append(f"p{i}")

            async def signal_once(
                order_id: str = order_id, before: list = before, n: int = n
            ) -> None:
                await trio.sleep(0.0002 * n)
                before.extend(started)
                reached.append(await b.signal(shipped, {"order_id": order_id}, "s"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(start_all)
                nursery.start_soon(signal_once)
            given = await a.journal.read(
                lambda r, order_id=order_id, started=started: {
                    p: r.last_message_seq(instance_id(f"parcels/{order_id}/{p}")) for p in started
                }
            )
            assert set(given.values()) <= {0, 1}
            got = [p for p in started if given[p] == 1]
            assert started[: len(got)] == got  # the later starts got none
            assert set(before) <= set(got)  # every start before the signal got it
            assert [len(got)] == reached
            # The instances run on a, the signal came from b.
            for p in got:
                assert instance_id(f"parcels/{order_id}/{p}") not in b.registry.live
