"""Child program for tests/whole/test_supervision_crash.py: a supervisor under load
that the test kills with SIGKILL at a random moment.

It opens an LMDB journal, makes sure the long-lived ``hub/h`` instance
exists, and runs several sender tasks that send uniquely numbered jobs to
it. After each ``send`` returns (the job is durable) the sender appends
``S <id>`` to the acks file. For each job the hub spawns a detached child
``hub/h/worker/<id>``, and for every CALL_EVERY-th job it also calls an
awaited child ``hub/h/worker/c<id>``; it continues as new every EVERY jobs.
Each worker takes a recorded ``ctx.uuid()`` (its incarnation token: the
same on every replay, a new one only if the worker were started afresh),
runs one step that appends ``<address> <idempotency key> <attempt> <token>``
to the side file, and then completes, or, for every HOLD_EVERY-th spawned
job, waits for a ``release`` signal, so that some children stay live.

Usage:
    python tests/crash_child_supervision.py JOURNAL SIDE ACKS FIRST_ID TASKS PER_TASK PACE PASSIVATE

Each sender pauses a random 0..2*PACE seconds between sends; PASSIVATE is
the system's ``passivate_after`` (0 passivates at every suspension, so the
hub is replayed from the journal for nearly every job).
"""

from __future__ import annotations

import os
import random
import sys
import time

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Context, Retry, Signal, process
from storage import LMDBJournal

job = Signal("job")
release = Signal("release")
HUB = "hub/h"
EVERY = 40  # jobs per hub run before continue_as_new
CALL_EVERY = 4  # every 4th job also calls an awaited child c<id>
HOLD_EVERY = 6  # spawned workers of ids = 1 (mod 6) wait for `release`


def holds(n: int) -> bool:
    return n % HOLD_EVERY == 1


def calls(n: int) -> bool:
    return n % CALL_EVERY == 0


def effect(side: str, address: str, token: str) -> str:
    """The worker's external side effect: one line per attempt.

    One unbuffered append (os.write on an O_APPEND descriptor): the line is
    in the page cache, whole, when write() returns, and a SIGKILL of this
    process cannot lose or split it. The short pause after it widens the
    window in which a kill finds the effect done but its result unrecorded.
    """
    step = actors.current_step()
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{address} {step.key} {step.attempt} {token}\n".encode())
    finally:
        os.close(fd)
    time.sleep(random.uniform(0, 0.004))
    return token


# A crash cuts an attempt short, which runs again within the step's crash
# budget (3 by default, then the instance is parked stuck): the kills this
# program is made for may cut many short, so its steps get a crash budget
# larger than there are kills; they never raise.
OUTLIVE_KILLS = Retry(attempts=50, backoff=0, crashes=50)


@process("worker/:id")
async def worker(ctx: Context, id: str, *, n: int, side: str, hold: bool = False) -> int:
    token = ctx.uuid()  # recorded: a replay gets the same, a fresh start a new one
    await ctx.step(effect, side, ctx.id, str(token), name="effect", retry=OUTLIVE_KILLS)
    if hold:
        await ctx.wait(release)
    return n


@process("hub/:id")
async def hub(ctx: Context, id: str, *, side: str, handled: int = 0) -> None:
    while True:
        _signal, payload = await ctx.receive(job)
        n = payload["id"]
        await ctx.spawn(worker, str(n), n=n, side=side, hold=holds(n))
        if calls(n):
            await ctx.call(worker, f"c{n}", n=n, side=side)
        handled += 1
        if handled % EVERY == 0:
            await ctx.continue_as_new(side=side, handled=handled)


PROCESSES = [hub, worker]


async def ensure_hub(system: actors.ActorSystem, side: str) -> None:
    await system.start(hub, "h", side=side)  # idempotent: an existing one is kept


async def main(
    journal: str,
    side: str,
    acks: str,
    first: int,
    tasks: int,
    per_task: int,
    pace: float,
    passivate: float,
) -> None:
    # Acks go straight to the file with os.write: in the page cache when
    # write() returns, so a SIGKILL cannot lose one. A line is written only
    # after send() returned, i.e. after the job is durable in the journal.
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def sender(t: int) -> None:
        start = first + t * per_task
        for job_id in range(start, start + per_task):
            await system.send(HUB, job, {"id": job_id})
            os.write(fd, f"S {job_id}\n".encode())
            await trio.sleep(random.uniform(0, 2 * pace))

    async with actors.open_system(
        LMDBJournal(journal), processes=PROCESSES, passivate_after=passivate
    ) as system:
        await ensure_hub(system, side)
        async with trio.open_nursery() as nursery:
            for t in range(tasks):
                nursery.start_soon(sender, t)
        os.write(fd, b"done\n")
        await trio.sleep_forever()  # keep working until the parent kills us


if __name__ == "__main__":
    journal, side, acks, first, tasks, per_task, pace, passivate = sys.argv[1:9]
    trio.run(
        main,
        journal,
        side,
        acks,
        int(first),
        int(tasks),
        int(per_task),
        float(pace),
        float(passivate),
    )
