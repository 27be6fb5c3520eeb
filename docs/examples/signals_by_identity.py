"""One fact, many listeners: an order, its parcels and a loyalty account
react to a single ``orders.shipped`` signal that names only the order."""

import argparse

import trio

from actors import Context, Signal, process
from actors.testing import open_test_system

# The identity fields: the emitter says which order, never which instances.
shipped = Signal("orders.shipped", identity=("order_id",))
delivered = Signal("parcel.delivered")  # sent to one known address


@process("orders/:order_id", listens=[shipped])
async def order(ctx: Context, order_id: str, *, parcels: list[str]) -> str:
    # One child per parcel, at orders/<id>/parcels/<id>/<parcel>.
    children = [await ctx.spawn(parcel, order_id, p) for p in parcels]
    tracking = await ctx.wait(shipped)
    done = [await ctx.join(child) for child in children]
    return f"order {order_id} shipped with {tracking['carrier']}: {done}"


@process("parcels/:order_id/:parcel_id", listens=[shipped])
async def parcel(ctx: Context, order_id: str, parcel_id: str) -> str:
    tracking = await ctx.wait(shipped)  # the same signal reaches every parcel
    await ctx.wait(delivered)
    return f"parcel {parcel_id} delivered ({tracking['carrier']})"


@process("loyalty/:customer/:order_id", listens=[shipped])
async def loyalty(ctx: Context, customer: str, order_id: str) -> str:
    await ctx.wait(shipped)  # order_id is not the template's first param: indexed
    return f"{customer} earns points for {order_id}"


@process("warehouse/:order_id")  # same param name, listens to nothing
async def warehouse(ctx: Context, order_id: str) -> None:
    await ctx.sleep(3600)


async def main() -> None:
    async with open_test_system([order, parcel, loyalty, warehouse]) as system:
        first = await system.start(order, "o-17", parcels=["p1", "p2"])
        points = await system.start(loyalty, "ann", "o-17")
        await system.start(warehouse, "o-17")
        await system.start(order, "o-18", parcels=[])
        while len([a for a in ("p1", "p2") if system.get(f"orders/o-17/parcels/o-17/{a}")]) < 2:
            await trio.sleep(0.01)
        # One fact; the runtime finds who cares: 1 order, 2 parcels, 1 loyalty.
        reached = await system.signal(shipped, {"order_id": "o-17"}, {"carrier": "DHL"})
        print("reached", reached)
        print(await points.result())
        # A message for one known instance is a send, to its address.
        for p in ("p1", "p2"):
            await system.send(f"orders/o-17/parcels/o-17/{p}", delivered)
        print(await first.result())
        print("o-18 unread:", len(await system.mail("orders/o-18")))
        print("warehouse unread:", len(await system.mail("warehouse/o-17")))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main)
