"""Signals and selective receive: a process takes the message it asks for;
other messages wait in its mailbox, oldest first."""

import argparse

import trio

import actors
from actors import Context, Signal, process
from actors.testing import open_test_system

item = Signal("item")
checkout = Signal("checkout")
note = Signal("note")


@process("carts/:cart_id")
async def cart(ctx: Context, cart_id: str) -> dict:
    items = []
    while True:
        signal, payload = await ctx.receive(item, checkout)  # any of these, oldest first
        if signal == checkout:
            break
        items.append(payload)
    remark = await ctx.wait(note)  # only a note; it had arrived before the checkout
    return {"cart": cart_id, "items": items, "note": remark}


async def main() -> None:
    async with open_test_system([cart]) as system:
        handle = await system.start(cart, "c-1")
        await system.send("carts/c-1", item, "apple")
        await system.send("carts/c-1", note, "leave at the door")  # kept for later
        await system.send("carts/c-1", item, "pear")
        await system.send("carts/c-1", checkout)
        print(await handle.result())
        try:
            await system.send("carts/c-1", item, "plum")
        except actors.NotDelivered as exc:
            print("NotDelivered:", exc.reason)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main)
