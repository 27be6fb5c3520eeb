"""An order that waits for approval; the CLI tutorial runs it twice around a `send`."""

import argparse

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

approved = Signal("approved")


@process("orders/:order_id")
async def order(ctx: Context, order_id: str, *, amount: int) -> dict:
    decision = await ctx.wait(approved)
    return {"order": order_id, "amount": amount, "by": decision["by"]}


async def main(path: str) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[order]) as system:
        handle = await system.start(order, "o-1", amount=30)  # finds it on the second run
        with trio.move_on_after(2):
            print("result:", await handle.result())
            return
        print(handle.id, "is", handle.status)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("journal", help="the journal directory")
    trio.run(main, parser.parse_args().journal)
