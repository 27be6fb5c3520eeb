"""A program for tests/whole/test_schedules_crash.py: open the journal at argv[1],
keep a schedule ticking every 0.25 s (real time), and have each tick's
instance append ``<tick> <idempotency key>`` to the file argv[2] with one
write() before it completes. Runs until it is killed."""

from __future__ import annotations

import os
import sys

import trio

import actors
from storage import LMDBJournal


def mark(path: str, tick: str) -> None:
    line = f"{tick} {actors.current_step().key}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@actors.process("tick/:at")
async def tick(ctx: actors.Context, at: str, *, side: str) -> None:
    # A kill between an attempt's record and its write spends the attempt;
    # with room for another the tick is still marked (same key), once.
    await ctx.step(mark, side, at, retry=actors.Retry(attempts=3))


async def main(journal: str, side: str, seconds: float) -> None:
    async with actors.open_system(LMDBJournal(journal), processes=[tick]) as system:
        await system.schedule(
            "fast", tick, every=0.25, input={"side": side}, overlap="allow", catch_up=1000
        )
        await trio.sleep(seconds)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 1e9)
