"""Child program for tests/features/test_ctx_send.py: a process sending messages one
by one with ``ctx.send``, in a program the test kills with SIGKILL.

It opens an LMDB journal and starts (idempotently: an existing instance is
kept) the receiver ``inbox/r`` and the sender ``outbox/s``, which sends
``item`` 0, 1, ... COUNT-1 to the receiver, one ``ctx.send`` each, then
``done``. After each send returns (its message is durable) the sender
appends ``S <n>`` to the acks file, unless it is replaying that send. The
receiver takes the items until ``done`` and returns them in the order taken.

Usage: python tests/crash_child_ctx_send.py JOURNAL ACKS COUNT
"""

from __future__ import annotations

import os
import sys

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

item = Signal("item")
done = Signal("done")
RECEIVER = "inbox/r"
SENDER = "outbox/s"

# The acks file, opened by main (None in the test's own process).
ACKS_FD: int | None = None


@process("inbox/:name")
async def inbox(ctx: Context, name: str) -> list[int]:
    taken = []
    while True:
        signal, payload = await ctx.receive(item, done)
        if signal is done:
            return taken
        taken.append(payload)


@process("outbox/:name")
async def outbox(ctx: Context, name: str, *, to: str, count: int) -> int:
    for n in range(count):
        await ctx.send(to, item, n)
        # A metric, not an effect: written with one write() (in the page
        # cache once it returns: a SIGKILL cannot lose it), only for a send
        # that ran live, i.e. whose message was committed just now.
        if ACKS_FD is not None and not ctx.replaying:
            os.write(ACKS_FD, f"S {n}\n".encode())
    await ctx.send(to, done)
    return count


async def start_both(system: actors.ActorSystem, count: int) -> None:
    await system.start(inbox, "r")
    await system.start(outbox, "s", to=RECEIVER, count=count)


async def main(journal: str, acks: str, count: int) -> None:
    global ACKS_FD
    ACKS_FD = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    async with actors.open_system(LMDBJournal(journal), processes=[inbox, outbox]) as system:
        await start_both(system, count)
        await trio.sleep_forever()  # the parent kills us


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
