"""Python calls and modules on the signal path and the 1-step path.

``python -m bench.paths [--runs N]``

Runs an LMDB system in a temporary directory and traces (``sys.setprofile``)
one ``send`` to a waiting receiver until it has taken the message, and one
``start`` of a 1-step process until its result: the Python calls made, the
modules they were in, and how many of each were ours (``actors/`` and
``storage/``). The fewest calls over the runs is printed (a thread's timing
moves the 1-step path by a few calls). A measure of the shape of the code,
not of its speed: compare it before and after a change of structure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import trio

import actors
from storage import LMDBJournal

GO = actors.Signal("go")


@actors.process("paths/receiver/:id")
async def receiver(ctx: actors.Context, id: str) -> None:
    while True:
        await ctx.receive(GO)


@actors.process("paths/one/:id")
async def one_step(ctx: actors.Context, id: str) -> int:
    return await ctx.step(lambda: 1, name="one")


def _ours(filename: str) -> bool:
    return "/actors/" in filename or "/storage/" in filename


async def _traced(run: Callable[[], Awaitable[Any]]) -> tuple[int, int, int, int]:
    """(calls, modules, our calls, our modules) while ``run`` runs."""
    files: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            files.append(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        await run()
    finally:
        sys.setprofile(None)
    ours = [f for f in files if _ours(f)]
    return len(files), len(set(files)), len(ours), len(set(ours))


async def measure(runs: int) -> dict[str, tuple[int, int, int, int]]:
    with tempfile.TemporaryDirectory() as directory:
        async with actors.open_system(
            LMDBJournal(directory), processes=[receiver, one_step]
        ) as system:
            await system.start(receiver, "r")
            for n in range(50):  # warm: imports, caches, the receiver's first waits
                await system.send("paths/receiver/r", GO, n)
            await trio.sleep(0.05)

            async def signal() -> None:
                await system.send("paths/receiver/r", GO, 1)
                await trio.sleep(0.01)  # the receiver takes it

            counter = iter(range(1_000_000))

            async def one() -> None:
                handle = await system.start(one_step, f"p{next(counter)}")
                await handle.result()

            found: dict[str, tuple[int, int, int, int]] = {}
            for name, run in (("signal", signal), ("1-step", one)):
                found[name] = min([await _traced(run) for _ in range(runs)])
            return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    for name, (calls, modules, ours, our_modules) in trio.run(measure, options.runs).items():
        print(f"{name}: {calls} calls across {modules} modules (ours: {ours} across {our_modules})")


if __name__ == "__main__":
    main()
