"""A program for tests/whole/test_queues_crash.py: open the journal at argv[1],
start 60 jobs through a queue of concurrency 3 (idempotent: a rerun finds
them), and wait for them all. Each job's step appends ``S <name> <time>``
when it begins and ``E <name> <time>`` when it ends to the file argv[2]
(one write() each), so the test can count how many ran at once."""

from __future__ import annotations

import os
import sys
import time

import trio

import actors
from storage import LMDBJournal

jobs = actors.Queue("jobs", concurrency=3)


def mark(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


async def work(path: str, name: str) -> None:
    mark(path, f"S {name}")
    await trio.sleep(0.05)
    mark(path, f"E {name}")


@actors.process("cjob/:name")
async def cjob(ctx: actors.Context, name: str, *, side: str) -> None:
    await ctx.step(work, side, name, retry=actors.Retry(attempts=10, backoff=0.01))


async def main(journal: str, side: str) -> None:
    async with actors.open_system(LMDBJournal(journal), processes=[cjob], queues=[jobs]) as system:
        handles = [await system.start(cjob, f"j{i}", queue=jobs, side=side) for i in range(60)]
        for handle in handles:
            await handle.result()
    print("done")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
