"""Child program for tests/system/test_retry.py: a retried instance, killed mid-run.

It opens an LMDB journal and starts ``jobs/x`` with ``fail=True`` (a start
is idempotent: a later run finds the instance there). Its first incarnation
fails at once; the program retries it with ``fail=False``, and that
incarnation does three steps, each appending ``<key>`` to the side file
durably, with a durable 0.2 s timer after each. The steps allow retries: a
kill between a step's append and its recorded result spends that attempt
(a step without ``retry=`` would then fail), and the next one runs it again. Once the instance ends, the
program writes ``<incarnation> <result>`` to the out file and exits 0.
Killed during the retried run and run again, it finds incarnation 2 (not
failed) and only waits for it, so the retried instance resumes by replay.

Usage: python tests/crash_child_retry_api.py JOURNAL SIDE OUT
"""

from __future__ import annotations

import os
import sys

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import contextlib

import trio

import actors
from actors import Context, process
from storage import LMDBJournal

SIDE = ""


def work(n: int) -> int:
    fd = os.open(SIDE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (actors.current_step().key + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return n


def explode() -> None:
    raise RuntimeError("the first incarnation fails")


@process("jobs/:id")
async def job(ctx: Context, id: str, *, fail: bool) -> int:
    if fail:
        await ctx.step(explode)
    total = 0
    for n in range(1, 4):
        total += await ctx.step(work, n, retry=actors.Retry(attempts=3))
        await ctx.sleep(0.2)
    return total


async def main(journal: str, out: str) -> None:
    async with actors.open_system(LMDBJournal(journal), processes=[job]) as system:
        handle = await system.start(job, "x", fail=True)
        if handle.incarnation == 1:
            with contextlib.suppress(actors.ProcessFailed):
                await handle.result()
            handle = await system.retry("jobs/x", input={"fail": False})
        result = await handle.result()
    with open(out, "w") as f:
        f.write(f"{handle.incarnation} {result}")


if __name__ == "__main__":
    SIDE = sys.argv[2]
    trio.run(main, sys.argv[1], sys.argv[3])
