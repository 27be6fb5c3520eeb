"""Child program for tests/tools/test_cli_control.py: a system on an LMDB journal
that the ``actors`` command line works beside, through its control socket.

It starts ``approvals/a-1`` and ``approvals/a-2`` (each waits for
``approve``), ``trips/t-1`` and ``trips/t-2`` (each books, then fails; the
compensation fails until the file RELEASE exists, which parks them
``compensation_stuck``) and ``greet/ann`` (completes), prints ``ready`` and
runs until stdin closes.

Usage: python tests/control_child.py JOURNAL RELEASE [--no-control]
"""

from __future__ import annotations

import os
import sys
from contextlib import aclosing
from pathlib import Path

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Retry, Signal, process
from storage import LMDBJournal

approve = Signal("approve")
RELEASE: list[Path] = []


def book(item: str) -> str:
    return f"booking-{item}"


def unbook(item: str) -> None:
    if not RELEASE[0].exists():
        raise RuntimeError(f"the {item} desk is closed")


def explode() -> None:
    raise ValueError("no seats")


@process("approvals/:id")
async def approval(ctx, id):
    return await ctx.wait(approve)


@process("trips/:id")
async def trip(ctx, id):
    await ctx.step(book, "flight", compensate=unbook, retry=Retry(attempts=1))
    await ctx.step(explode, retry=Retry(attempts=1))


@process("greet/:name")
async def greet(ctx, name):
    return f"hello {name}"


async def main(path: str, release: str, control: bool) -> None:
    RELEASE.append(Path(release))
    processes = [approval, trip, greet]
    async with actors.open_system(
        LMDBJournal(path), processes=processes, control=control
    ) as system:
        await system.start(approval, "a-1")
        await system.start(approval, "a-2")
        await (await system.start(greet, "ann")).result()
        for id in ("t-1", "t-2"):
            handle = await system.start(trip, id)
            async with aclosing(handle.status_changes()) as changes:
                async for status in changes:
                    if status == "compensation_stuck":
                        break
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], "--no-control" not in sys.argv[3:])
