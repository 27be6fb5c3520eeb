"""A node program for tests/whole/test_multinode.py: one of several systems that
share one PostgreSQL schema.

Usage: python tests/multinode_node.py DSN SCHEMA NODE WORKDIR PROCESSES

PROCESSES is a comma-separated subset of ``sink,sleeper,parent,kid,tree,gate`` (the
definitions this node registers; a node runs only instances whose process
it registers). The node is driven by JSON lines on stdin and answers each
with a JSON line on stdout::

    {"id": 1, "cmd": "start", "proc": "sink", "params": ["s1"], "input": {}}
    {"id": 1, "ok": true, "result": "sink/s1"}

Commands: ``start``, ``send`` (address, payload, key: a ``work`` signal, or
the ``signal`` named), ``keyed`` (address, ids, tasks: a keyed send of each
id, its key), ``mail`` (address: its unread messages, ``[id, signal,
payload]``), ``drop`` (address, message_id: the message dropped, ``[id,
payload]``, or ``{"refused": why}``), ``dropped`` (address: the payloads of
its dead letters),
``cancel`` (address), ``load`` (background senders: targets, first, count,
tasks, pace), ``freeze_in_batch`` (address: SIGSTOP itself while its next
batch that locks that instance's row holds the lock), ``loaded`` (instances in memory), ``status`` (address: what a
handle here says), ``quit``. ``ACTORS_TEST_PASSIVATE_AFTER`` in the
environment sets ``passivate_after`` (seconds); ``ACTORS_TEST_CLOCK_SKEW``
(seconds, default 0) sets this node's wall clock that far ahead (negative:
behind) of the host's, as a host whose clock is off would have it. It prints ``{"ready": true}`` once the system is
open. Log records (warnings and up) go to stderr.

Side effects go to WORKDIR: each handling step appends
``<node> <tag> <id> <idempotency key> <attempt> <epoch time>`` to ``side``; each send the
load acknowledged appends ``S <id> <node>`` to ``acks`` (``E <id> <error>``
if it failed, ``D <node>`` when the node's senders are done). Every line is
one ``write()`` on a file opened with O_APPEND, so lines from several
processes never mix and a SIGKILL cannot split one.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import psycopg
import trio

import actors
from actors import Context, Retry, Signal, process
from actors.testing import wait_quiescent
from storage import PostgresJournal, instance_id

work = Signal("work")
NODE = ""
WORKDIR = ""


def _append(name: str, line: str) -> None:
    fd = os.open(os.path.join(WORKDIR, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def mark(tag: str, ident: str) -> None:
    """The external side effect of a handling: one line in the side file."""
    step = actors.current_step()
    _append("side", f"{NODE} {tag} {ident} {step.key} {step.attempt} {time.time():.6f}\n")


# A crash cuts an attempt short, which runs again within the step's crash
# budget (3 by default, then the instance is parked stuck): the kills this
# program is made for may cut many short, so its steps get a crash budget
# larger than there are kills; they never raise.
OUTLIVE_KILLS = Retry(attempts=50, backoff=0, crashes=50)


@process("sink/:id")
async def sink(ctx: Context, id: str) -> None:
    while True:
        _signal, payload = await ctx.receive(work)
        await ctx.step(mark, "W", str(payload["id"]), name="W", retry=OUTLIVE_KILLS)
        await ctx.emit(str(payload["id"]))  # on the sink's stream: audited once each


@process("sleeper/:id")
async def sleeper(ctx: Context, id: str, *, seconds: float) -> None:
    await ctx.sleep(seconds)
    await ctx.step(mark, "T", id, name="T", retry=OUTLIVE_KILLS)


@process("kid/:id")
async def kid(ctx: Context, id: str) -> None:
    await ctx.receive(work)  # until cancelled


@process("parent/:id")
async def parent(ctx: Context, id: str) -> None:
    await ctx.spawn(kid, id)
    await ctx.receive(work)  # until cancelled


@process("tree/:id")
async def tree(ctx: Context, id: str, *, depth: int, fanout: int) -> None:
    if depth > 0:
        for i in range(fanout):
            await ctx.spawn(tree, str(i), depth=depth - 1, fanout=fanout)
    await ctx.receive(work)  # until cancelled


@process("gate/:id")
async def gate(ctx: Context, id: str) -> None:
    await ctx.wait(Signal("open"))  # its work waits, unread, until then
    while True:
        _signal, payload = await ctx.receive(work)
        await ctx.step(mark, "G", str(payload["id"]), name="G", retry=OUTLIVE_KILLS)


PROCESSES = {
    "sink": sink,
    "sleeper": sleeper,
    "parent": parent,
    "kid": kid,
    "tree": tree,
    "gate": gate,
}


async def _lines(stream: trio.lowlevel.FdStream):
    buffer = b""
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield json.loads(line)


def _reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _sender(system: actors.ActorSystem, targets: list[str], ids: range, pace: float) -> None:
    for msg_id in ids:
        target = targets[msg_id % len(targets)]
        try:
            await system.send(target, work, {"id": msg_id})
        except Exception as exc:  # noqa: BLE001 - the test reads these
            error = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            _append("acks", f"E {msg_id} {error}\n")
        else:
            _append("acks", f"S {msg_id} {NODE}\n")
        await trio.sleep(pace)


async def _keyed(system: actors.ActorSystem, address: str, ids: list[int]) -> None:
    for msg_id in ids:
        await system.send(address, work, {"id": msg_id}, key=str(msg_id))


async def _load(system: actors.ActorSystem, targets, first, count, tasks, pace) -> None:
    async with trio.open_nursery() as nursery:
        for t in range(tasks):
            start = first + t * count
            nursery.start_soon(_sender, system, targets, range(start, start + count), pace)
    _append("acks", f"D {NODE}\n")


def _freeze_in_next_batch(journal: PostgresJournal, iid: bytes) -> None:
    """Stop this process (SIGSTOP) in its committer, between the first
    statement of the next batch that locks ``iid``'s row and that
    statement's Sync: the server has run it and waits, "active", with the
    row locks held."""
    writer = journal._writer

    def fault(moment: str, conn, txns) -> None:
        if moment != "locked" or not any(i == iid for t in txns for i, _, _ in t.requires):
            return
        writer.fault = None
        while conn.pgconn.flush():  # the statement leaves the client's buffer
            time.sleep(0.001)
        # Wait until the server has run it and waits for more ("active", no
        # Sync yet), so that the freeze lands in that window every time.
        with psycopg.connect(journal.dsn, autocommit=True) as other:
            for _ in range(200):
                state = other.execute(
                    "SELECT state FROM pg_stat_activity WHERE pid = %s", [conn.info.backend_pid]
                ).fetchone()
                if state is not None and state[0] == "active":
                    break
                time.sleep(0.01)
            print(f"freezing in a batch, its session {state}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

    writer.fault = fault


async def _handle(system: actors.ActorSystem, nursery: trio.Nursery, request: dict) -> object:
    cmd = request["cmd"]
    if cmd == "start":
        proc = PROCESSES[request["proc"]]
        handle = await system.start(proc, *request.get("params", []), **request.get("input", {}))
        return handle.id
    if cmd == "send":
        key = request.get("key")
        signal = Signal(request["signal"]) if "signal" in request else work
        await system.send(request["address"], signal, request.get("payload"), key=key)
        return None
    if cmd == "keyed":  # one keyed send per id of ids, the id its key, over `tasks` tasks
        ids, tasks = request["ids"], request.get("tasks", 4)
        async with trio.open_nursery() as keyed:
            for t in range(tasks):
                keyed.start_soon(_keyed, system, request["address"], ids[t::tasks])
        return None
    if cmd == "mail":
        return [[m.id, m.signal, m.payload] for m in await system.mail(request["address"])]
    if cmd == "drop":
        try:
            m = await system.drop_message(request["address"], request["message_id"])
        except actors.InvalidArguments as exc:
            return {"refused": str(exc)}
        return [m.id, m.payload]
    if cmd == "dropped":
        return [d.message.payload for d in await system.dropped(request["address"])]
    if cmd == "cancel":
        return await system.cancel(request["address"])
    if cmd == "freeze_in_batch":  # SIGSTOP this process once a batch holds the address's row
        _freeze_in_next_batch(system.journal, instance_id(request["address"]))
        return None
    if cmd == "quiescent":  # wait until this node has nothing left to do
        await wait_quiescent(system, timeout=request.get("timeout", 15.0))
        return None
    if cmd == "loaded":  # how many instances this node holds in memory
        return sum(1 for actor in system.registry.live.values() if actor.loaded and not actor.done)
    if cmd == "status":  # what a handle on this node says, read from the journal
        handle = await system.lookup(request["address"])
        return None if handle is None else await handle.refresh()
    if cmd == "load":
        nursery.start_soon(
            _load,
            system,
            request["targets"],
            request["first"],
            request["count"],
            request["tasks"],
            request["pace"],
        )
        return None
    raise ValueError(f"unknown command {cmd!r}")


async def main(dsn: str, schema: str, node: str, procs: list[str]) -> None:
    journal = PostgresJournal(dsn, schema=schema)
    registered = [PROCESSES[name] for name in procs]
    passivate = float(os.environ.get("ACTORS_TEST_PASSIVATE_AFTER", "60"))
    skew = float(os.environ.get("ACTORS_TEST_CLOCK_SKEW", "0"))
    async with actors.open_system(
        journal,
        processes=registered,
        node=node,
        passivate_after=passivate,
        now=lambda: time.time() + skew,  # the wall clock, as this node's host has it
    ) as system:
        _reply({"ready": True, "node": node, "pid": os.getpid()})
        stdin = trio.lowlevel.FdStream(os.dup(0))
        async with trio.open_nursery() as nursery:

            async def serve(request: dict) -> None:
                try:
                    result = await _handle(system, nursery, request)
                except Exception as exc:  # noqa: BLE001 - answered, not fatal
                    error = f"{type(exc).__name__}: {exc}"
                    _reply({"id": request["id"], "ok": False, "error": error})
                else:
                    _reply({"id": request["id"], "ok": True, "result": result})

            async for request in _lines(stdin):
                if request["cmd"] == "quit":
                    _reply({"id": request["id"], "ok": True, "result": None})
                    break
                nursery.start_soon(serve, request)
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
    dsn, schema, NODE, WORKDIR, names = sys.argv[1:6]
    trio.run(main, dsn, schema, NODE, [n for n in names.split(",") if n])
