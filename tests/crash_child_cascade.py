"""Child program for tests/whole/test_cancel_cascade_crash.py: a tree of 181
instances whose root is cancelled, killed by the test with SIGKILL while
the cancel cascades.

It opens an LMDB journal and starts ``node/<ROOT>`` (idempotent), a tree
of `node` instances: the root spawns FANOUT[0] children, each of those
FANOUT[1], each of those FANOUT[2], and every node then waits for a signal
that never comes. Once every node of the tree is live (and suspended) it
writes ``R`` to the acks file, then ``C <time.monotonic()>`` just before it
calls ``system.cancel`` on the root (from then on on a slow disk, see
`SlowDisk`), and ``D <time.monotonic()>`` once the cancel returned; then it
waits for the kill.

Usage:
    python tests/crash_child_cascade.py JOURNAL ACKS ROOT PASSIVATE

PASSIVATE is the system's ``passivate_after``: 0 passivates every node at
its suspension (the cascade then reads each from the journal), a large
value keeps them all in memory.
"""

from __future__ import annotations

import os
import sys
import time

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal, Txn

never = Signal("never")
FANOUT = (5, 5, 6)  # children per node, by depth: 1 + 5 + 25 + 150 = 181 nodes


@process("node/:id")
async def node(ctx: Context, id: str, *, depth: int = 0) -> None:
    if depth < len(FANOUT):
        await ctx.all(*(ctx.spawn(node, str(i), depth=depth + 1) for i in range(FANOUT[depth])))
    await ctx.wait(never)


PROCESSES = [node]
FSYNC = 0.0008  # seconds per commit during the cancel (see SlowDisk)


class SlowDisk(LMDBJournal):
    """Once ``slow``, every commit first holds the trio thread for
    FSYNC seconds, as LMDB's inline commit does for an fsync on a slow disk:
    the cascade then takes about 250 ms instead of tens, a window a kill
    can be aimed into."""

    slow = False

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        if self.slow:
            time.sleep(FSYNC)
        return await super().commit(txn, durable=durable)


def addresses(root: str) -> list[str]:
    """Every node of the tree under ``node/<root>``, the root first."""
    level = [f"node/{root}"]
    found = list(level)
    for fanout in FANOUT:
        level = [f"{parent}/node/{i}" for parent in level for i in range(fanout)]
        found += level
    return found


async def main(journal: str, acks: str, root: str, passivate: float) -> None:
    # Acks go straight to the file with os.write: a SIGKILL cannot lose one.
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    tree = set(addresses(root))
    store = SlowDisk(journal)
    async with actors.open_system(store, processes=PROCESSES, passivate_after=passivate) as system:
        handle = await system.start(node, root)
        with trio.fail_after(60):
            while True:
                settled = {
                    info.id
                    async for info in system.query(status="suspended", process=node)
                    if info.id in tree
                }
                if settled == tree:
                    break
                await trio.sleep(0.01)
        os.write(fd, b"R\n")
        store.slow = True
        os.write(fd, f"C {time.monotonic()}\n".encode())
        await handle.cancel()
        os.write(fd, f"D {time.monotonic()}\n".encode())
        await trio.sleep_forever()  # until the test kills us


if __name__ == "__main__":
    journal, acks, root, passivate = sys.argv[1:5]
    trio.run(main, journal, acks, root, float(passivate))
