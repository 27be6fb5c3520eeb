"""Streams and exports: emit values for durable consumers, publish a current state."""

import argparse

import trio

from actors import Context, Signal, process
from actors.testing import open_test_system

reading = Signal("reading")
stop = Signal("stop")


@process("sensors/:sensor")
async def sensor(ctx: Context, sensor: str) -> int:
    count = 0
    while True:
        signal, value = await ctx.receive(reading, stop)
        if signal == stop:
            return count
        count += 1
        await ctx.emit({"n": count, "celsius": value})  # appended to the stream
        await ctx.publish({"last": value, "count": count})  # replaces the exports


async def main() -> None:
    async with open_test_system([sensor]) as system:
        handle = await system.start(sensor, "s-1")
        for value in (20.5, 21.0, 21.5):
            await system.send(handle.id, reading, value)

        async with system.stream(handle.id, consumer="dashboard") as stream:
            async for item in stream:
                print("dashboard got", item)
                if item["n"] == 2:
                    break  # leaving the block makes the cursor durable

        await system.send(handle.id, reading, 22.0)
        await system.send(handle.id, stop)
        print("stopped after", await handle.result(), "readings; exports:", handle.exports)

        # The same consumer continues right after its cursor; the stream ends
        # when the instance has ended and every value was read.
        async with system.stream(handle.id, consumer="dashboard") as stream:
            print("dashboard resumed:", [item["n"] async for item in stream])
        async with system.stream(handle.id, consumer="archive") as stream:
            print("archive read:", [item["n"] async for item in stream])


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main)
