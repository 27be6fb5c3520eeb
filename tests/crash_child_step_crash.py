"""Child program for tests/whole/test_step_crashes_sigkill.py: a step without
``retry=`` that takes its process down with SIGKILL.

It opens an LMDB journal and starts ``crashy/x`` (idempotent: after the
first run it finds the instance already there, resuming it), or with
``retry`` resumes it by ``system.retry``. The step appends ``<key>
<attempt>`` to the side file, durably, then SIGKILLs its own process: on
the first attempt only (``once``), or on every attempt until the side file
holds ``fixed`` (``always``). Once the instance completes or is stuck, the
program writes ``completed <result>`` or ``stuck <held>`` and its
``last_error`` to the out file and exits 0.

Usage: python tests/crash_child_step_crash.py JOURNAL SIDE OUT once|always [retry]
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
from actors import Context, process
from storage import LMDBJournal
from tests.crash_kit import append_line

SIDE = ""


def _line(text: str) -> None:
    append_line(SIDE, text)


def die(mode: str) -> str:
    info = actors.current_step()
    _line(f"{info.key} {info.attempt}")
    with open(SIDE) as f:
        fixed = "fixed" in f.read().split()
    if (mode == "once" and info.attempt == 1) or (mode == "always" and not fixed):
        os.kill(os.getpid(), signal.SIGKILL)
    return info.key


@process("crashy/:id")
async def crashy(ctx: Context, id: str, *, mode: str) -> str:
    return await ctx.step(die, mode, name="charge")


async def main(journal: str, out: str, mode: str, retry: bool) -> None:
    async with actors.open_system(LMDBJournal(journal), processes=[crashy]) as system:
        if retry:
            handle = await system.retry("crashy/x")
        else:
            handle = await system.start(crashy, "x", mode=mode)
        while handle.status != "completed" and handle.stuck is None:
            await trio.sleep(0.01)
        if handle.stuck is not None:
            text = f"stuck {handle.stuck}\n{handle.last_error}"
        else:
            text = f"completed {await handle.result()}"
    with open(out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    SIDE = sys.argv[2]
    trio.run(main, sys.argv[1], sys.argv[3], sys.argv[4], sys.argv[5:] == ["retry"])
