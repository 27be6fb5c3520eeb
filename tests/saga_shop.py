"""A saga program that tests/features/test_sagas_edges.py runs both ways: as a script
(``python tests/saga_shop.py JOURNAL close|die``), where its module is
``__main__``, and imported as ``tests.saga_shop`` to finish what the script
left. Each side effect appends a line to the file $SAGA_SHOP_LEDGER.

- ``close``: charge and reserve, then close the system while the order
  waits for approval (mid-saga).
- ``die``: charge and reserve, decline, and die (``os._exit``) inside the
  first compensation.
- ``finish``: decline an order that another program left waiting, and wait
  for it to fail, its compensations done.
"""

from __future__ import annotations

import os
import sys
from contextlib import aclosing

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

approval = Signal("approval")


def _note(line: str) -> None:
    with open(os.environ["SAGA_SHOP_LEDGER"], "a") as ledger:
        ledger.write(line + "\n")


def charge(order: str) -> str:
    _note(f"charge {order}")
    return f"ch-{order}"


def refund(order: str) -> None:
    _note(f"refund {order} {actors.current_step().forward_result}")


def reserve(order: str) -> str:
    _note(f"reserve {order}")
    return f"r-{order}"


def release(order: str) -> None:
    _note(f"release {order} {actors.current_step().forward_result}")
    if os.environ.get("SAGA_SHOP_DIE_IN_RELEASE"):
        os._exit(3)


@process("shop/:order")
async def shop(ctx: Context, order: str) -> str:
    await ctx.step(charge, order, compensate=refund)
    await ctx.step(reserve, order, compensate=release)
    if await ctx.wait(approval) != "yes":
        raise ValueError(f"order {order} declined")
    return "shipped"


async def main(path: str, mode: str) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[shop]) as system:
        if mode == "finish":
            await system.send("shop/o1", approval, "no")
            try:
                await system.get("shop/o1").result()
            except actors.ProcessFailed as exc:
                _note(f"finished: {exc}")
            if "tests.saga_shop" in sys.modules:
                _note("imported a second copy of this file as tests.saga_shop")
            return
        handle = await system.start(shop, "o1")
        async with aclosing(handle.status_changes()) as changes:
            async for status in changes:
                if status == "suspended":
                    break
        if mode == "die":
            os.environ["SAGA_SHOP_DIE_IN_RELEASE"] = "1"
            await system.send(handle.id, approval, "no")
            await handle.result()  # never returns: release ends the program
            raise AssertionError("release did not end the program")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
