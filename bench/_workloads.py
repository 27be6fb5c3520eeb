"""The workloads `bench.instructions` counts, run as a script in a child process.

``python bench/_workloads.py WORKLOAD N``: runs WORKLOAD with N operations
on a `MemoryJournal` and exits. Only the public API (and the system's live
table, to see instances leave memory), so it runs against older trees of
this repository too: the caller puts the tree to measure first on
``PYTHONPATH``. Waiting polls every ``POLL`` seconds (environment; 0.05 by
default): under callgrind a poll costs instructions, so few are taken.

Workloads (N operations each):

- ``call``: one parent makes N ``ctx.call`` children, one after another.
- ``proc``: N 1-step processes, started and awaited 50 at a time.
- ``create``: N instances that passivate at their first wait.
- ``wake``: ``create``, then each woken once by a message (counted minus
  ``create``).
- ``cascade``: a tree of N children with N grandchildren each, all waiting;
  with ``CANCEL=1`` in the environment the root is then cancelled and every
  descendant leaves memory (counted minus the run without it).
"""

from __future__ import annotations

import os
import random
import sys
from typing import Any

import trio

import actors
from actors import Context, Signal, process
from storage import MemoryJournal

ping = Signal("ping")
POLL = float(os.environ.get("POLL", "0.05"))


class _Seen:
    count = 0
    event: trio.Event | None = None


@process("leaf/:n")
async def leaf(ctx: Context, n: str) -> str:
    return n


@process("caller/:id")
async def caller(ctx: Context, id: str, *, n: int) -> int:
    for i in range(n):
        await ctx.call(leaf, str(i))
    return n


@process("waiter/:id")
async def waiter(ctx: Context, id: str) -> None:
    while True:
        await ctx.wait(ping)
        _Seen.count += 1
        if _Seen.event is not None:
            _Seen.event.set()


async def _one(i: int) -> int:
    return i


@process("job/:id")
async def job(ctx: Context, id: str) -> int:
    return await ctx.step(_one, 1)


@process("root/:id")
async def root(ctx: Context, id: str, *, fanout: int) -> None:
    await ctx.all(*[ctx.spawn(branch, str(i), fanout=fanout) for i in range(fanout)])
    await ctx.wait(ping)


@process("branch/:id")
async def branch(ctx: Context, id: str, *, fanout: int) -> None:
    await ctx.all(*[ctx.spawn(twig, str(i)) for i in range(fanout)])
    await ctx.wait(ping)


@process("twig/:id")
async def twig(ctx: Context, id: str) -> None:
    _Seen.count += 1
    await ctx.wait(ping)


def _open(passivate_after: float = 1e9) -> Any:
    return actors.open_system(
        MemoryJournal(), processes=[leaf, caller, waiter, job, root, branch, twig],
        random=random.Random(0), passivate_after=passivate_after,
    )  # fmt: skip


async def _until(done: Any) -> None:
    while not done():
        await trio.sleep(POLL)


async def _create(system: Any, n: int) -> None:
    for i in range(n):
        await system.start(waiter, str(i))
    await _until(lambda: not system._live)


async def run(workload: str, n: int) -> None:
    """Run ``workload`` with ``n`` operations (see the module docstring)."""
    _Seen.count, _Seen.event = 0, None
    if workload == "call":
        async with _open() as system:
            await (await system.start(caller, "c", n=n)).result()
    elif workload == "proc":
        async with _open() as system:
            for wave in range(max(1, n // 50)):
                handles = [await system.start(job, f"{wave}-{i}") for i in range(min(n, 50))]
                for handle in handles:
                    await handle.result()
    elif workload in ("create", "wake"):
        async with _open(passivate_after=0) as system:
            await _create(system, n)
            if workload == "wake":
                for i in range(n):
                    _Seen.event = trio.Event()
                    await system.send(f"waiter/{i}", ping)
                    await _Seen.event.wait()
    elif workload == "cascade":
        async with _open() as system:
            await system.start(root, "r", fanout=n)
            everyone = n + n * n + 1
            await _until(
                lambda: _Seen.count == n * n and len(system._live) == everyone
                and all(a.status == "suspended" for a in system._live.values())
            )  # fmt: skip
            if os.environ.get("CANCEL"):
                await system.cancel("root/r")
                await _until(lambda: not system._live)
    else:
        raise SystemExit(f"unknown workload {workload!r}")


if __name__ == "__main__":
    trio.run(run, sys.argv[1], int(sys.argv[2]))
