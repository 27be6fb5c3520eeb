"""Requests and replies, keyed sends, and changing code that is running.

A counter answers asks with ctx.reply; a sent (not asked) message gets no
reply; a retried send with one key is stored once; a second version of the
counter's code, patched, runs on the history the first one recorded.
"""

import argparse

import trio

import actors
from actors import Context, Signal, process
from actors.testing import open_test_system, replay_check
from storage import MemoryJournal

add, total = Signal("add"), Signal("total")


@process("counters/:name")
async def counter(ctx: Context, name: str) -> None:
    count = 0
    while True:
        signal, amount = await ctx.receive(add, total)
        if signal == add:
            count += amount
        await ctx.reply(count)  # a no-op for a message that was sent, not asked


@process("counters/:name")
async def counter_v2(ctx: Context, name: str) -> None:
    count = 0
    doubled = ctx.patched("double")  # False on a history from before the patch
    while True:
        signal, amount = await ctx.receive(add, total)
        if signal == add:
            count += 2 * amount if doubled else amount
        await ctx.reply(count)


async def main() -> None:
    journal = MemoryJournal()
    async with open_test_system([counter], journal=journal) as system:
        await system.start(counter, "a")
        print("ask add 5:", await system.ask("counters/a", add, 5))
        await system.send("counters/a", add, 1, key="req-1")
        await system.send("counters/a", add, 1, key="req-1")  # a retry: stored once
        print("ask total:", await system.ask("counters/a", total))
        try:
            await system.ask("counters/a", total, timeout=0)  # the reply takes a moment
        except actors.AskTimeout as exc:
            print("AskTimeout:", isinstance(exc, TimeoutError))
    print("replay problems with v2:", await replay_check(journal, [counter_v2]))
    async with open_test_system([counter_v2], journal=journal) as system:
        print("old history, v2, add 1:", await system.ask("counters/a", add, 1))
        await system.start(counter_v2, "b")
        print("new instance, v2, add 1:", await system.ask("counters/b", add, 1))


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main)
