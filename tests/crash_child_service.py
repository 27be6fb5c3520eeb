"""Child program for tests/system/test_service_signals.py: a service run by
`actors.run_until_signalled`, with a step in flight when it is signalled.

It starts ``job/x`` (idempotent: a later run finds it and resumes it),
whose step appends ``start <key> <attempt>`` to the side file, durably,
then blocks until cancelled, unless the side file holds ``release``: then
it appends ``done <key> <attempt>`` and returns. With ``stubborn``, the
service's ``main`` ignores cancellation, so the close never ends (the
second signal's case). The program prints the signal number that stopped
the service to the out file, and exits 0 when run_until_signalled returns.

Usage: python tests/crash_child_service.py JOURNAL SIDE OUT [stubborn]
"""

from __future__ import annotations

import logging
import os
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


def _released() -> bool:
    with open(SIDE) as f:
        return "release" in f.read().split()


async def work(amount: int) -> str:
    info = actors.current_step()
    _line(f"start {info.key} {info.attempt}")
    if not _released():
        await trio.sleep_forever()  # in flight until the close cancels it
    _line(f"done {info.key} {info.attempt}")
    return info.key


@process("job/:id")
async def job(ctx: Context, id: str) -> str:
    return await ctx.step(work, 1, name="work")


async def main(journal: str, out: str, stubborn: bool) -> None:
    async def serve(system: actors.ActorSystem) -> None:
        handle = await system.start(job, "x")
        if stubborn:
            with trio.CancelScope(shield=True):
                await trio.sleep_forever()  # a main that never lets go
        _line(f"result {await handle.result()}")

    signum = await actors.run_until_signalled(LMDBJournal(journal), [job], main=serve)
    with open(out, "w") as f:
        f.write(str(signum))


if __name__ == "__main__":
    SIDE = sys.argv[2]
    logging.basicConfig(level=logging.INFO)  # the test reads "closing" on stderr
    trio.run(main, sys.argv[1], sys.argv[3], sys.argv[4:] == ["stubborn"])
