"""A node program for the fault runs (tests/nemesis.py) and the start races
between OS processes (tests/whole/test_multinode_starts.py): one of several
systems that share one PostgreSQL schema, driven by JSON lines on stdin.

Usage: python tests/nemesis_node.py DSN SCHEMA NODE WORKDIR

It opens its system (trying again for up to a minute while the server is
down or its previous process's lease is still held), prints
``{"ready": true, "node": ..., "pid": ...}`` and then serves commands::

    {"id": 7, "cmd": "batch", "ops": [{"op": "send", "address": "sink/s1", "msg": 41}, ...]}
    {"id": 7, "ok": true, "result": {"done": 1}}

A batch runs its ops at once; each op writes what came of it to the
record file (below), so that nothing the harness learns depends on a
reply that a SIGKILL may have cut off. Ops:

- ``send`` / ``ksend`` (key ``k<msg>``; a lost journal is tried again with
  the same key for ``retry_for`` seconds, as a client retries a request) /
  ``ask`` (``timeout``): message ``msg`` to ``address``;
- ``until_sent``: send ``msg`` to ``address`` as soon as it exists (a
  `NotDelivered` with reason ``unknown`` is tried again), for ``deadline`` s;
- ``start`` (``proc``, ``id``, ``if_exists``, ``input``, ``queue``) and
  ``sws`` (signal_with_start of ``proc``/``id`` with message ``msg``);
- ``start_cancel``: start ``proc``/``id``, then cancel it;
- ``cancel`` (``address``).

Every op may carry ``tag`` (a round's name), echoed in its record.
``ping`` answers at once, ``quit`` closes the system. ``NEMESIS_LEASE``
(the journal's ``lease_timeout``, default 1 s) and ``NEMESIS_PASSIVATE``
(``passivate_after``, default 60 s) in the environment tune the node.

Processes: ``sink`` (handles every message with one step, replies to
asks, continues as new every 25), ``pair`` (completes with its first
``count`` messages), ``job`` (two steps, then a value of its own run),
``qjob`` (a slow step, run from the queue ``nemesis``, concurrency 2) and
``sleeper`` (a durable timer, then a step).

The record file ``WORKDIR/acks`` gets one line per outcome:

    I <msg> <address> <how> <node> <tag>                 before a message is sent
    S <msg> <address> <how> <node> <tag>                 a message acknowledged
    T <address> <incarnation> <status> <how> <node> <tag>  a start acknowledged
    Y <address> <status> <how> <node> <tag>              AlreadyStarted
    N <msg> <address> <reason> <how> <node> <tag>        NotDelivered
    C <address> <cancelled> <node> <tag>                 a cancel's answer
    A <msg> <address> <reply> <node> <tag>               an ask's reply
    E <how> <address> <msg> <node> <tag> <error...>      anything else

and each handling step appends ``<node> <tag> <ident> <idempotency key>
<attempt> <epoch time> <value>`` to ``WORKDIR/side``. Each line is one
``write()`` on a file opened with O_APPEND, so lines from several processes
never mix and a SIGKILL cannot split one. tests/nemesis_audit.py reads
both back.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

# Run as a script from a clean clone: make the repository root importable.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import trio

import actors
from actors import Context, Queue, Retry, Signal, process
from actors.testing import wait_quiescent
from storage import PostgresJournal
from storage.errors import JournalLocked, JournalUnavailable

work = Signal("work")
NODE = ""
WORKDIR = ""
QUEUE = Queue("nemesis", concurrency=2)

# Kills cut attempts short, and each counts in a step's crash budget (past
# it the instance is parked stuck): a budget far larger than a run makes
# kills, so that no step is ever parked for it.
OUTLIVE = Retry(attempts=1000, backoff=0, crashes=1000)


def append(name: str, line: str) -> None:
    """One ``write()`` of ``line`` at the end of ``WORKDIR/name``."""
    fd = os.open(os.path.join(WORKDIR, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def mark(tag: str, ident: str, value: str = "-") -> None:
    """The external side effect of a step: one line in the side file."""
    step = actors.current_step()
    append("side", f"{NODE} {tag} {ident} {step.key} {step.attempt} {time.time():.6f} {value}\n")


async def pause(seconds: float) -> None:
    await trio.sleep(seconds)


@process("sink/:id")
async def sink(ctx: Context, id: str, *, runs: int = 25) -> None:
    """Handles every message (sent or asked) with one step, replies with
    its id, and continues as new every ``runs`` messages."""
    for _ in range(runs):
        _signal, payload = await ctx.receive(work)
        await ctx.step(mark, "W", str(payload["msg"]), name="W", retry=OUTLIVE)
        await ctx.reply(payload["msg"])  # a recorded no-op for a message that was sent
    await ctx.continue_as_new(runs=runs)


@process("pair/:id")
async def pair(ctx: Context, id: str, *, count: int = 2) -> list[int]:
    """Completes with the ids of its first ``count`` messages, sorted."""
    got = []
    for _ in range(count):
        _signal, payload = await ctx.receive(work)
        await ctx.step(mark, "W", str(payload["msg"]), name="W", retry=OUTLIVE)
        got.append(payload["msg"])
    return sorted(got)


@process("job/:id")
async def job(ctx: Context, id: str) -> str:
    """One step, then completes with a value of its own run (recorded first)."""
    await ctx.step(mark, "J", id, name="J", retry=OUTLIVE)
    value = ctx.uuid().hex
    await ctx.step(mark, "R", ctx.id, value, name="R", retry=OUTLIVE)
    return value


@process("qjob/:id")
async def qjob(ctx: Context, id: str, *, seconds: float = 0.05) -> str:
    """Started from the queue: one slow step."""
    await ctx.step(pause, seconds, name="pause", retry=OUTLIVE)
    await ctx.step(mark, "Q", id, name="Q", retry=OUTLIVE)
    return id


@process("sleeper/:id")
async def sleeper(ctx: Context, id: str, *, seconds: float) -> str:
    """A durable timer, then one step."""
    await ctx.sleep(seconds)
    await ctx.step(mark, "Z", id, name="Z", retry=OUTLIVE)
    return id


PROCESSES = {p.template.split("/")[0]: p for p in (sink, pair, job, qjob, sleeper)}


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]


class Ops:
    """The ops of a batch, each writing its own record lines."""

    def __init__(self, system: actors.ActorSystem) -> None:
        self.system = system

    async def run(self, op: dict[str, Any]) -> None:
        kind = op["op"]
        tag = op.get("tag", "-")
        try:
            await getattr(self, kind)(op, tag)
        except Exception as exc:  # noqa: BLE001 - recorded, the harness judges it
            where = op.get("address") or f"{op.get('proc')}/{op.get('id')}"
            append("acks", f"E {kind} {where} {op.get('msg', '-')} {NODE} {tag} {_text(exc)}\n")

    async def send(self, op: dict[str, Any], tag: str, key: str | None = None) -> None:
        address, msg = op["address"], op["msg"]
        how = "send" if key is None else "ksend"
        append("acks", f"I {msg} {address} {how} {NODE} {tag}\n")
        try:
            await self.system.send(address, work, {"msg": msg}, key=key)
        except actors.NotDelivered as exc:
            append("acks", f"N {msg} {address} {exc.reason} {how} {NODE} {tag}\n")
            return
        append("acks", f"S {msg} {address} {how} {NODE} {tag}\n")

    async def ksend(self, op: dict[str, Any], tag: str) -> None:
        deadline = trio.current_time() + op.get("retry_for", 15.0)
        while True:
            try:
                return await self.send(op, tag, key=f"k{op['msg']}")
            except JournalUnavailable as exc:  # the same key again: stored once
                if trio.current_time() > deadline:
                    raise
                where = f"{op['address']} {op['msg']} {NODE} {tag}"
                append("acks", f"E ksend-retry {where} {_text(exc)}\n")
                await trio.sleep(0.2)

    async def ask(self, op: dict[str, Any], tag: str) -> None:
        address, msg = op["address"], op["msg"]
        append("acks", f"I {msg} {address} ask {NODE} {tag}\n")
        try:
            reply = await self.system.ask(address, work, {"msg": msg}, timeout=op.get("timeout", 8))
        except actors.NotDelivered as exc:
            append("acks", f"N {msg} {address} {exc.reason} ask {NODE} {tag}\n")
            return
        append("acks", f"A {msg} {address} {reply} {NODE} {tag}\n")
        append("acks", f"S {msg} {address} ask {NODE} {tag}\n")

    async def quiescent(self, op: dict[str, Any], tag: str) -> None:
        """Wait until this node has nothing left to do (`wait_quiescent`)."""
        await wait_quiescent(self.system, timeout=op.get("timeout", 15.0))

    async def until_sent(self, op: dict[str, Any], tag: str) -> None:
        address, msg = op["address"], op["msg"]
        deadline = trio.current_time() + op.get("deadline", 20.0)
        append("acks", f"I {msg} {address} until {NODE} {tag}\n")
        wait = 0.002  # between tries, doubling to 0.05 s: soon, not a flood of reads
        while True:
            try:
                await self.system.send(address, work, {"msg": msg})
            except actors.NotDelivered as exc:
                if exc.reason != "unknown" or trio.current_time() > deadline:
                    append("acks", f"N {msg} {address} {exc.reason} until {NODE} {tag}\n")
                    return
                await trio.sleep(wait)
                wait = min(wait * 2, 0.05)
                continue
            append("acks", f"S {msg} {address} until {NODE} {tag}\n")
            return

    async def start(self, op: dict[str, Any], tag: str) -> None:
        proc = PROCESSES[op["proc"]]
        if_exists = op.get("if_exists", "return")
        how = "queue" if op.get("queue") else f"start-{if_exists}"
        address = f"{op['proc']}/{op['id']}"
        options: dict[str, Any] = dict(op.get("input", {}))
        if op.get("queue"):
            options["queue"] = QUEUE
        try:
            handle = await self.system.start(proc, op["id"], if_exists=if_exists, **options)
        except actors.AlreadyStarted as exc:
            append("acks", f"Y {address} {exc.status} {how} {NODE} {tag}\n")
            return
        append("acks", f"T {address} {handle.incarnation} {handle.status} {how} {NODE} {tag}\n")

    async def sws(self, op: dict[str, Any], tag: str) -> None:
        proc = PROCESSES[op["proc"]]
        address, msg = f"{op['proc']}/{op['id']}", op["msg"]
        append("acks", f"I {msg} {address} sws {NODE} {tag}\n")
        try:
            handle = await self.system.signal_with_start(
                proc, op["id"], signal=work, payload={"msg": msg}, **op.get("input", {})
            )
        except actors.NotDelivered as exc:
            append("acks", f"N {msg} {address} {exc.reason} sws {NODE} {tag}\n")
            return
        append("acks", f"T {address} {handle.incarnation} {handle.status} sws {NODE} {tag}\n")
        append("acks", f"S {msg} {address} sws {NODE} {tag}\n")

    async def cancel(self, op: dict[str, Any], tag: str) -> None:
        cancelled = await self.system.cancel(op["address"])
        append("acks", f"C {op['address']} {cancelled} {NODE} {tag}\n")

    async def start_cancel(self, op: dict[str, Any], tag: str) -> None:
        await self.start(op, tag)
        await self.cancel({"address": f"{op['proc']}/{op['id']}"}, tag)


async def _lines(stream: trio.lowlevel.FdStream) -> Any:
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


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _batch(ops: Ops, request: dict[str, Any]) -> None:
    async with trio.open_nursery() as nursery:
        for op in request["ops"]:
            nursery.start_soon(ops.run, op)
    _reply({"id": request["id"], "ok": True, "result": {"done": len(request["ops"])}})


async def serve(system: actors.ActorSystem) -> None:
    _reply({"ready": True, "node": NODE, "pid": os.getpid()})
    ops = Ops(system)
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with trio.open_nursery() as nursery:
        async for request in _lines(stdin):
            if request["cmd"] == "quit":
                break
            if request["cmd"] == "ping":
                _reply({"id": request["id"], "ok": True, "result": None})
            elif request["cmd"] == "batch":
                nursery.start_soon(_batch, ops, request)
            else:
                _reply({"id": request["id"], "ok": False, "error": f"unknown {request['cmd']!r}"})
        nursery.cancel_scope.cancel()


async def main(dsn: str, schema: str) -> None:
    lease = float(os.environ.get("NEMESIS_LEASE", "1.0"))
    passivate = float(os.environ.get("NEMESIS_PASSIVATE", "60"))
    deadline = trio.current_time() + 60
    opened = False
    while True:
        journal = PostgresJournal(dsn, schema=schema, lease_timeout=lease, pool_size=4)
        try:
            async with actors.open_system(
                journal,
                processes=list(PROCESSES.values()),
                node=NODE,
                passivate_after=passivate,
                queues=[QUEUE],
            ) as system:
                opened = True
                await serve(system)
                return
        except (JournalUnavailable, JournalLocked) as exc:
            # Only an open is tried again (a supervisor would restart the
            # program): a system that ends on its own is a node death.
            if opened or trio.current_time() > deadline:
                raise
            print(f"opening: {_text(exc)}; again soon", file=sys.stderr, flush=True)
            await trio.sleep(0.3)


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
    dsn, schema, NODE, WORKDIR = sys.argv[1:5]
    trio.run(main, dsn, schema)
