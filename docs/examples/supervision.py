"""Supervision: awaited children, a fan-out, and a supervised child restarted after a crash."""

import argparse

import trio
import trio.testing

from actors import Context, OneForOne, Signal, process
from actors.testing import open_test_system

close = Signal("close")
crashes = {"left": 1}  # the worker crashes once, then works


@process("price/:sku")
async def price(ctx: Context, sku: str) -> int:
    return await ctx.step(len, sku) * 10


@process("worker/:name")
async def worker(ctx: Context, name: str) -> str:
    if crashes["left"]:
        crashes["left"] -= 1
        raise RuntimeError("worker lost its connection")
    return f"{name} done"


@process("shops/:shop", supervision=OneForOne(max_restarts=3, within=60))
async def shop(ctx: Context, shop: str) -> dict:
    first = await ctx.call(price, "apple")  # child at shops/<shop>/price/apple
    prices = await ctx.scope(["fig", "kiwi", "melon"], price)  # one child per item, concurrently
    child = await ctx.spawn(worker, "w1", restart="transient")  # detached; restarted after a crash
    await ctx.wait(close)  # the parent's end would cancel a child still running
    return {"apple": first, "others": prices, "worker": child.id}


async def main() -> None:
    async with open_test_system([shop, price, worker]) as system:
        handle = await system.start(shop, "s-1")
        with trio.fail_after(60):
            while (child := system.get("shops/s-1/worker/w1")) is None:
                await trio.sleep(0.1)  # until the shop has spawned it
        print(child.id, "->", await child.result())
        print("restarts:", [r["reason"] for r in child.restarts])
        await system.send(handle.id, close)
        print(await handle.result())


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
