"""A first process: start it, wait for its result, and find it again after a restart."""

import argparse
import tempfile

import trio

import actors
from actors import Context, process
from storage import LMDBJournal


def greeting(name: str) -> str:  # a step: any sync or async function
    return f"hello, {name}"


@process("greeters/:name")
async def greeter(ctx: Context, name: str, *, punctuation: str = "!") -> str:
    text = await ctx.step(greeting, name)  # recorded: never runs again once done
    return text + punctuation


async def main(path: str) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[greeter]) as system:
        handle = await system.start(greeter, "ann", punctuation="?")
        print(handle.id, "->", await handle.result())

    # A new system on the same journal: the instance is still there, finished.
    async with actors.open_system(LMDBJournal(path), processes=[greeter]) as system:
        again = await system.start(greeter, "ann")  # idempotent per address
        print(again.id, again.status, await again.result())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("journal", nargs="?", help="a journal directory (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        trio.run(main, args.journal or scratch)
