"""One "orders.shipped" fact, every process that cares: signals routed by identity.

An order, its parcels (children of the order) and the customer's loyalty
account each declare ``listens=[shipped]``; a warehouse process has an
``order_id`` too but does not listen. The shipping service emits one
signal naming the order, without knowing who listens: it reaches the
order, each parcel and the loyalty account, in one durable commit. The
system is then closed and opened again: the signal waits in the mailboxes
of the instances that had not read it yet, and a keyed retry of the
same emit stores nothing more.

Run:  python examples/shipping.py [JOURNAL_DIR]
(a temporary journal by default)
"""

import argparse
import tempfile

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

shipped = Signal("orders.shipped", identity=("order_id",))
delivered = Signal("delivered")


@process("orders/:order_id", listens=[shipped])
async def order(ctx: Context, order_id: str, *, parcels: list[str]) -> str:
    children = [await ctx.spawn(parcel, order_id, p) for p in parcels]
    tracking = await ctx.wait(shipped)
    done = [await ctx.join(child) for child in children]
    return f"{order_id} shipped by {tracking['carrier']}; {', '.join(done)}"


@process("parcels/:order_id/:parcel", listens=[shipped])
async def parcel(ctx: Context, order_id: str, parcel: str) -> str:
    await ctx.wait(delivered)  # the shipped signal waits in the mailbox meanwhile
    tracking = await ctx.wait(shipped)
    return f"{parcel} delivered ({tracking['number']})"


@process("loyalty/:customer/:order_id", listens=[shipped])
async def loyalty(ctx: Context, customer: str, order_id: str) -> str:
    await ctx.wait(shipped)
    return f"{customer} earns 10 points for {order_id}"


@process("warehouse/:order_id")
async def warehouse(ctx: Context, order_id: str) -> None:
    await ctx.wait(delivered)


PROCESSES = [order, parcel, loyalty, warehouse]


async def main(directory: str) -> None:
    async with actors.open_system(LMDBJournal(directory), processes=PROCESSES) as system:
        await system.start(order, "o-17", parcels=["p1", "p2"])
        await system.start(loyalty, "ann", "o-17")
        await system.start(warehouse, "o-17")
        while system.get("orders/o-17/parcels/o-17/p2") is None:
            await trio.sleep(0.01)
        tracking = {"carrier": "DHL", "number": "JD0142"}
        reached = await system.signal(shipped, {"order_id": "o-17"}, tracking, key="ship-o-17")
        print(f"shipped o-17: {reached} instances reached")
        print(await system.get("loyalty/ann/o-17").result())
    print("closed; opening again")
    async with actors.open_system(LMDBJournal(directory), processes=PROCESSES) as system:
        again = await system.signal(shipped, {"order_id": "o-17"}, tracking, key="ship-o-17")
        print(f"the shipping service retried: {again} instances reached")
        for p in ("p1", "p2"):
            await system.send(f"orders/o-17/parcels/o-17/{p}", delivered)
        print(await system.get("orders/o-17").result())
        print("warehouse unread:", [m.signal for m in await system.mail("warehouse/o-17")])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("journal", nargs="?", help="journal directory (default: a temporary one)")
    args = parser.parse_args()
    if args.journal:
        trio.run(main, args.journal)
    else:
        with tempfile.TemporaryDirectory() as d:
            trio.run(main, d + "/journal")
