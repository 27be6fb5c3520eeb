"""A program for tests/whole/test_join_mail_crash.py, killed with SIGKILL while it works.

Usage: python tests/crash_child_join_mail.py JOURNAL ACKS FIRST

From id FIRST on, for ever: start ``mom/<id>`` (it spawns ``kid/<id>`` and
joins it) and ``box/<id>`` in a queue of one slot behind a slow blocker,
send the box its one message (keyed: a round that redoes an id sends it
once) while it is still queued, and append
``S <id>`` to ACKS (one write) once all of that is acknowledged.
"""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Context, Queue, Signal, process
from storage import LMDBJournal

HELLO = Signal("hello")
QUEUE = Queue("boxes", concurrency=1)


def double(n: int) -> int:
    return 2 * n


@process("kid/:id")
async def kid(ctx: Context, id: str) -> int:
    await ctx.sleep(0.01)
    return await ctx.step(double, int(id))


@process("mom/:id")
async def mom(ctx: Context, id: str) -> int:
    child = await ctx.spawn(kid, id)
    return await ctx.join(child)


@process("box/:id")
async def box(ctx: Context, id: str) -> object:
    _, payload = await ctx.receive(HELLO)
    return payload


PROCESSES = [kid, mom, box]


async def main(path: str, acks: str, first: int) -> None:
    fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES, queues=[QUEUE]) as system:
        i = first
        while True:
            await system.start(mom, str(i))
            await system.start(box, str(i), queue=QUEUE)
            await system.send(
                f"box/{i}", HELLO, {"n": i}, key=f"hello-{i}"
            )  # once, however often it is retried
            os.write(fd, b"S %d\n" % i)
            i += 1


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
