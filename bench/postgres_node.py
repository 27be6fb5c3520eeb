"""Node B of the postgres suite (bench/postgres.py), and the load both nodes run.

Usage: python bench/postgres_node.py DSN SCHEMA NODE INSTANCES

Opens a system as node NODE on the shared schema, starts its own INSTANCES
sink instances (``pgsink/<NODE>.<i>``; a node owns what it starts), prints
``ready`` and then obeys one command per stdin line, answering each with one
stdout line:

- ``sig N``: start N senders, each looping ``send`` into one of its sinks;
- ``rsig N OTHER COUNT``: the same into node OTHER's first COUNT sinks
  (``pgsink/OTHER.<i>``), which this node does not own;
- ``proc N``: start N workers, each looping ``start`` + ``result()`` of a
  1-step process;
- ``mark``: remember the count (signals received, processes completed);
- ``end``: answer the count since ``mark``;
- ``stop``: stop the load and let in-flight messages land;
- ``quit``: close the system and exit.

The parent sends ``mark`` and ``end`` at the edges of its own window and
counts its own node over the same window, so the two counts add up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Context, Signal, process

ping = Signal("ping")
PAYLOAD = {"order": "o-17", "by": "ann"}
FOREVER = 1e9  # passivate_after that never passivates during the benchmark


class Counter:
    """Signals taken by this process's sinks, processes completed by its workers."""

    count = 0


@process("pgsink/:id")
async def pgsink(ctx: Context, id: str) -> None:
    while True:
        await ctx.wait(ping)
        Counter.count += 1


async def _noop(i: int) -> int:
    return i


@process("pgjob/:id")
async def pgjob(ctx: Context, id: str) -> int:
    await ctx.step(_noop, 1)
    return 1


PROCESSES = [pgsink, pgjob]


def open_node(dsn: str, schema: str, node: str) -> Any:
    from storage import PostgresJournal

    journal = PostgresJournal(dsn, schema=schema)
    return actors.open_system(journal, processes=PROCESSES, node=node, passivate_after=FOREVER)


async def start_sinks(system: Any, ids: list[str], starters: int = 500) -> None:
    async def starter(k: int) -> None:
        for i in range(k, len(ids), starters):
            await system.start(pgsink, ids[i])

    async with trio.open_nursery() as nursery:
        for k in range(min(starters, len(ids))):
            nursery.start_soon(starter, k)


async def signal_load(system: Any, addresses: list[str], senders: int) -> None:
    """``senders`` tasks, sender k looping ``send`` into ``addresses[k % len]``;
    runs until cancelled."""

    async def sender(address: str) -> None:
        while True:
            await system.send(address, ping, PAYLOAD)

    async with trio.open_nursery() as nursery:
        for k in range(senders):
            nursery.start_soon(sender, addresses[k % len(addresses)])


async def process_load(system: Any, prefix: str, workers: int) -> None:
    """``workers`` tasks, each looping start -> ``result()`` of a 1-step
    process with a fresh id; counts completions; runs until cancelled."""

    async def worker(k: int) -> None:
        n = 0
        while True:
            handle = await system.start(pgjob, f"{prefix}.{k}.{n}")
            await handle.result()
            Counter.count += 1
            n += 1

    async with trio.open_nursery() as nursery:
        for k in range(workers):
            nursery.start_soon(worker, k)


async def _lines(stream: trio.lowlevel.FdStream):
    buffer = b""
    while True:
        data = await stream.receive_some(4096)
        if not data:
            return
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line.decode().split()


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(dsn: str, schema: str, node: str, instances: int) -> None:
    async with open_node(dsn, schema, node) as system:
        addresses = [f"pgsink/{node}.{i}" for i in range(instances)]
        await start_sinks(system, [a.split("/", 1)[1] for a in addresses])
        _say(f"ready {os.getpid()}")
        stdin = trio.lowlevel.FdStream(os.dup(0))
        async with trio.open_nursery() as nursery:
            load: trio.CancelScope | None = None
            marked = 0
            rounds = 0

            async def run(fn: Callable[..., Any], *args: Any, task_status: Any) -> None:
                with trio.CancelScope() as scope:
                    task_status.started(scope)
                    await fn(*args)

            async for words in _lines(stdin):
                cmd = words[0]
                if cmd == "sig":
                    load = await nursery.start(run, signal_load, system, addresses, int(words[1]))
                elif cmd == "rsig":  # into another node's sinks: rsig N NODE COUNT
                    targets = [f"pgsink/{words[2]}.{i}" for i in range(int(words[3]))]
                    load = await nursery.start(run, signal_load, system, targets, int(words[1]))
                elif cmd == "proc":
                    rounds += 1
                    prefix = f"{node}.{rounds}"
                    load = await nursery.start(run, process_load, system, prefix, int(words[1]))
                elif cmd == "mark":
                    marked = Counter.count
                elif cmd == "end":
                    _say(str(Counter.count - marked))
                    continue
                elif cmd == "stop":
                    if load is not None:
                        load.cancel()
                        load = None
                    await trio.sleep(0.3)  # let delivered messages reach the sinks
                elif cmd == "quit":
                    nursery.cancel_scope.cancel()
                    break
                _say("ok")
    _say("bye")


if __name__ == "__main__":
    dsn, schema, node, instances = sys.argv[1:5]
    trio.run(main, dsn, schema, node, int(instances))
