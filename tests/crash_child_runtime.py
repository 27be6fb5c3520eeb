"""Child program for tests/whole/test_runtime_crash.py: a system under load that the
test kills with SIGKILL at a random moment.

It opens an LMDB journal, makes sure the long-lived ``sink/s`` instance
exists, and runs several sender tasks that send uniquely numbered messages to
it. After each ``send`` returns (the message is durable) the sender appends
``S <id>`` to the acks file. The sink handles each message with two steps,
``A`` then ``B``; each step appends ``<A|B> <id> <idempotency key> <attempt>``
to the side file, the external effect the test audits afterwards.

Usage: python tests/crash_child_runtime.py JOURNAL SIDE ACKS FIRST_ID TASKS PER_TASK [PACE]

Each sender pauses a random 0..2*PACE seconds (default 0.02) between sends,
so that sends are still in flight when the kill comes and the mailbox
backlog stays near what the sink can handle.
"""

from __future__ import annotations

import os
import random
import sys

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Context, Retry, Signal, process
from storage import LMDBJournal

work = Signal("work")
ADDRESS = "sink/s"
EVERY = 25  # handled messages per run before continue_as_new


def mark(side: str, which: str, msg_id: int) -> None:
    """The sink's external side effect: one durable line per attempt."""
    step = actors.current_step()
    with open(side, "a") as f:
        f.write(f"{which} {msg_id} {step.key} {step.attempt}\n")
        f.flush()
        os.fsync(f.fileno())


# A crash cuts an attempt short, which runs again within the step's crash
# budget (3 by default, then the instance is parked stuck): the kills this
# program is made for may cut many short, so its steps get a crash budget
# larger than there are kills; they never raise.
OUTLIVE_KILLS = Retry(attempts=50, backoff=0, crashes=50)


@process("sink/:id")
async def sink(ctx: Context, id: str, *, side: str, handled: int = 0) -> None:
    while True:
        _signal, payload = await ctx.receive(work)
        # Named steps: keys are sink/s/1/<run>/A/<n> and sink/s/1/<run>/B/<n>,
        # so the test can pair the two steps of the n-th message of a run.
        await ctx.step(mark, side, "A", payload["id"], name="A", retry=OUTLIVE_KILLS)
        await ctx.step(mark, side, "B", payload["id"], name="B", retry=OUTLIVE_KILLS)
        handled += 1
        if handled % EVERY == 0:
            await ctx.continue_as_new(side=side, handled=handled)


async def ensure_sink(system: actors.ActorSystem, side: str) -> None:
    await system.start(sink, "s", side=side)  # idempotent: an existing one is kept


async def main(
    journal: str, side: str, acks: str, first: int, tasks: int, per_task: int, pace: float
) -> None:
    # Acks go straight to the file with os.write (no userspace buffer): the
    # bytes are in the kernel's page cache when write() returns, and a
    # SIGKILL of this process cannot lose them (only a machine crash could,
    # which this test does not simulate), so no fsync is needed for the
    # parent's check to be sound. A line is written only after send()
    # returned, i.e. after the message is durable in the journal.
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def sender(t: int) -> None:
        start = first + t * per_task
        for msg_id in range(start, start + per_task):
            await system.send(ADDRESS, work, {"id": msg_id})
            os.write(fd, f"S {msg_id}\n".encode())
            await trio.sleep(random.uniform(0, 2 * pace))

    async with actors.open_system(LMDBJournal(journal), processes=[sink]) as system:
        await ensure_sink(system, side)
        async with trio.open_nursery() as nursery:
            for t in range(tasks):
                nursery.start_soon(sender, t)
        os.write(fd, b"done\n")
        await trio.sleep_forever()  # keep handling until the parent kills us


if __name__ == "__main__":
    journal, side, acks, first, tasks, per_task = sys.argv[1:7]
    pace = float(sys.argv[7]) if len(sys.argv) > 7 else 0.02
    trio.run(main, journal, side, acks, int(first), int(tasks), int(per_task), pace)
