"""Child program for tests/whole/test_retry_crash.py: an at-most-once step that
takes its process down with SIGKILL on every attempt.

It opens an LMDB journal, starts ``crashy/x`` (idempotent: after the first
run it finds the instance already there, resuming it) and waits for its
result. The step appends ``<key> <attempt>`` to the side file, durably, then
SIGKILLs its own process; its compensation appends
``undo <key> <forward_result>``. Once the instance ends, the program writes
``<status> <message>`` to the out file and exits 0.

Usage: python tests/crash_child_retry.py JOURNAL SIDE OUT ATTEMPTS
"""

from __future__ import annotations

import os
import signal
import sys

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Context, Retry, process
from storage import LMDBJournal
from tests.crash_kit import append_line

SIDE = ""


def _line(text: str) -> None:
    append_line(SIDE, text)


async def die(amount: int) -> None:
    info = actors.current_step()
    _line(f"{info.key} {info.attempt}")
    os.kill(os.getpid(), signal.SIGKILL)


async def undo(amount: int) -> None:
    info = actors.current_step()
    _line(f"undo {info.key} {info.forward_result!r}")


@process("crashy/:id")
async def crashy(ctx: Context, id: str, *, attempts: int) -> None:
    retry = Retry(attempts=attempts, backoff=0) if attempts > 1 else None
    await ctx.step(die, 1, name="charge", retry=retry, compensate=undo, at_most_once=True)


async def main(journal: str, out: str, attempts: int) -> None:
    async with actors.open_system(LMDBJournal(journal), processes=[crashy]) as system:
        handle = await system.start(crashy, "x", attempts=attempts)
        try:
            await handle.result()
            text = "completed"
        except actors.ProcessFailed as exc:
            text = f"failed {exc}"
    with open(out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    SIDE = sys.argv[2]
    trio.run(main, sys.argv[1], sys.argv[3], int(sys.argv[4]))
