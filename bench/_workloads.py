"""The workloads `bench.instructions` counts, run in a child process.

``python -c RUNNER TREE WORKLOAD N`` (see `bench.instructions.count`): runs
WORKLOAD with N operations on a `MemoryJournal` and exits, with ``actors``
and ``storage`` imported from TREE, a checkout of this repository (this
one, or an older commit's worktree), and these workloads from this one.
They use only what older trees have too: the public API, the system's live
table (to see instances leave memory) and the processes of `bench._kit`
that take nothing newer. Waiting polls every ``POLL`` seconds (environment;
0.05 by default): under callgrind a poll costs instructions, so few are taken.

Workloads (N operations each):

- ``call``: one parent makes N ``ctx.call`` children, one after another.
- ``proc``: N 1-step processes, started and awaited 50 at a time.
- ``create``: N instances that passivate at their first wait.
- ``wake``: ``create``, then each woken once by a message (counted minus
  ``create``).
- ``send``: 100 live instances, each sent N/100 messages by a sender of
  its own (100 senders at once), every message taken.
- ``many``: the same 100, sent N messages by ``send_many``, 100 a call
  (one to each), every message taken before the next call.
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
from actors import Context, process
from storage import MemoryJournal

from ._kit import _probe, branch, leaf, ping, root, sink, twig

POLL = float(os.environ.get("POLL", "0.05"))
_SINKS = 100  # the live instances of ``send`` and ``many``


@process("caller/:id")
async def caller(ctx: Context, id: str, *, n: int) -> int:
    for i in range(n):
        await ctx.call(leaf, str(i))
    return n


async def _one(i: int) -> int:
    return i


@process("job/:id")
async def job(ctx: Context, id: str) -> int:
    return await ctx.step(_one, 1)  # (bench._kit's job takes thread=, which older trees lack)


def _open(passivate_after: float = 1e9) -> Any:
    return actors.open_system(
        MemoryJournal(),
        processes=[leaf, caller, sink, job, root, branch, twig],
        random=random.Random(0),
        passivate_after=passivate_after,
    )


def _live(system: Any) -> dict[bytes, Any]:
    """The system's live instances (an older tree, measured with --tree,
    kept them in ``system._live``)."""
    registry = getattr(system, "registry", None)
    live: dict[bytes, Any] = registry.live if registry is not None else system._live
    return live


async def _until(done: Any) -> None:
    while not done():
        await trio.sleep(POLL)


async def run(workload: str, n: int) -> None:
    """Run ``workload`` with ``n`` operations (see the module docstring)."""
    _probe.reset()
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
            for i in range(n):
                await system.start(sink, str(i))
            await _until(lambda: not _live(system))
            if workload == "wake":
                for i in range(n):
                    seen = _probe.expect(i + 1)
                    await system.send(f"sink/{i}", ping, i + 1)
                    await seen.wait()
    elif workload in ("send", "many"):
        async with _open() as system:
            for i in range(_SINKS):
                await system.start(sink, str(i))
            per = max(1, n // _SINKS)  # (a message each at least: a test runs n=3)
            if workload == "send":

                async def sender(i: int) -> None:
                    for _ in range(per):
                        await system.send(f"sink/{i}", ping, None)

                async with trio.open_nursery() as nursery:
                    for i in range(_SINKS):
                        nursery.start_soon(sender, i)
            elif workload == "many":
                batch = [(f"sink/{i}", ping, None) for i in range(_SINKS)]
                for k in range(per):
                    await system.send_many(batch)
                    await _until(lambda k=k: _probe.count >= (k + 1) * _SINKS)
            await _until(lambda: _probe.count >= per * _SINKS)
    elif workload == "cascade":
        async with _open() as system:
            await system.start(root, "r", fanout=n)
            everyone = n + n * n + 1
            await _until(
                lambda: (
                    _probe.count == n * n
                    and len(_live(system)) == everyone
                    and all(a.status == "suspended" for a in _live(system).values())
                )
            )
            if os.environ.get("CANCEL"):
                await system.cancel("root/r")
                await _until(lambda: not _live(system))
    else:
        raise SystemExit(f"unknown workload {workload!r}")


if __name__ == "__main__":
    sys.stderr.write(f"actors from {os.path.dirname(os.path.dirname(actors.__file__))}\n")
    trio.run(run, sys.argv[1], int(sys.argv[2]))
