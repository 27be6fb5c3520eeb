"""Workload 9: signals routed by identity (opt-in: ``--workload 9``).

The plan adds, after version 8's operations and drawn from a stream of
its own: listeners (``lsn/:topic/:id``, a process that listens to `BELL`,
whose identity field is ``topic``) that start and end (each lives a while,
then completes; a client cancels some) around signals of one of two
topics; processes at ``deaf/:topic/:id`` with the same param that do not
listen; and bells: ``system.signal`` from a client (some keyed, and a
keyed one whose outcome was unknown is sent again with its key) and
``ctx.signal`` from a ``ringer/:id`` instance.

What was delivered is read from the transactions written, in the order
they were written (`Simulation.on_write`): each start, status change and
removal of an instance at ``lsn/`` or ``deaf/``, and each ``bell``
message with the transaction that stored it. A bell's first written
transaction is its commit; once the run settled, `check` judges:

- ``signal-missed``: a listener of the bell's topic that existed and had
  not ended (its status takes mail) when the bell committed got no
  message of it in that transaction; or a bell that reached nobody (so
  wrote nothing) while such a listener was there all through its call;
- ``signal-stray``: a bell's message written to an instance that was not
  such a listener then (another topic, a process that does not listen,
  one that ended or was not started yet);
- ``signal-twice``: one instance given one bell twice (a keyed bell sent
  again included);
- ``signal-count``: ``system.signal`` returned another count than the
  messages its transaction wrote.

A run that lost an acknowledged write (durability "async") is not judged
on these: what the transactions said may be undone.
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import trio

from actors import Context, Signal, process
from actors.testing import Simulation
from storage import MAIL_STATUSES, CommitOutcomeUnknown, Txn, decode
from storage._statuses import STATUS_NAME
from storage._txn import APPEND_MESSAGE, DELETE_INSTANCE, PUT_INSTANCE, SET_STATUS

#: The signal of workload 9, routed by its ``topic``.
BELL = Signal("bell", identity=("topic",))
TOPICS = ("t0", "t1")


@process("lsn/:topic/:id", listens=[BELL])
async def lsn(ctx: Context, topic: str, id: str, *, life: float) -> str:
    await ctx.sleep(life)  # its bells stay in its mailbox: delivery is what counts
    return ctx.id


@process("deaf/:topic/:id")
async def deaf(ctx: Context, topic: str, id: str, *, life: float) -> str:
    await ctx.sleep(life)
    return ctx.id


@process("ringer/:id")
async def ringer(ctx: Context, id: str, *, topic: str, bell: str, delay: float) -> int:
    await ctx.sleep(delay)
    reached: int = await ctx.signal(BELL, {"topic": topic}, {"bell": bell})
    return reached


PROCESSES_9 = [lsn, deaf, ringer]


def plan_signals(rng: random.Random, op: Any) -> list[Any]:
    """Workload 9's operations (``op(kind, args, pause, background)`` makes one)."""
    ops: list[Any] = []
    listeners: list[str] = []
    kinds = [("listen", 6), ("deaf", 2), ("ring", 6), ("ringer", 2), ("hush", 2)]
    for n in range(rng.randint(10, 30)):
        kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        args: dict[str, Any]
        topic = rng.choice(TOPICS)
        if kind in ("listen", "deaf"):
            if kind == "listen":
                listeners.append(f"lsn/{topic}/l{n}")
            args = {"topic": topic, "id": f"l{n}", "life": rng.choice([0.5, 5.0, 60.0, 600.0])}
        elif kind == "ring":
            args = {"topic": topic, "bell": f"b{n}", "keyed": rng.random() < 0.4}
        elif kind == "ringer":
            args = {"id": f"r{n}", "topic": topic, "delay": rng.choice([0.0, 1.0, 10.0])}
        else:
            if not listeners:
                continue
            args = {"address": rng.choice(listeners)}
        pause = rng.expovariate(2.0) if rng.random() < 0.7 else 0.0
        ops.append(op(kind, args, pause, rng.random() < 0.5))
    return ops


@attrs.define
class Signalled:
    """Workload 9: what the transactions written say of listeners and bells."""

    #: instance id -> (address, status), for ``lsn/`` and ``deaf/`` instances
    status: dict[bytes, tuple[str, str]] = attrs.Factory(dict)
    #: instance id -> when it began or stopped taking mail (virtual seconds)
    changes: dict[bytes, list[tuple[float, bool]]] = attrs.Factory(dict)
    #: bell -> (its topic, the instances it was written to at its commit,
    #: those that should have been)
    committed: dict[str, tuple[str, set[bytes], set[bytes]]] = attrs.Factory(dict)
    #: (bell, instance id) -> how many of its messages were written
    given: dict[tuple[str, bytes], int] = attrs.Factory(dict)
    #: messages written to instances that were no listener of their topic then
    strays: list[str] = attrs.Factory(list)
    #: client bells: (bell, topic, when the call began, when it returned, its count)
    rung: list[tuple[str, str, float, float, int]] = attrs.Factory(list)
    #: bell -> its topic, for every bell planned to ring
    topics: dict[str, str] = attrs.Factory(dict)

    def written(self, txn: Txn) -> None:
        """Note what a written transaction holds (bells first, against the
        listeners as they were before it)."""
        now = trio.current_time()
        bells: dict[str, set[bytes]] = {}
        for op in txn.ops:
            if op[0] == APPEND_MESSAGE:
                stored = decode(op[2])
                payload = stored[1]
                if stored[0] == BELL.name and isinstance(payload, dict) and "bell" in payload:
                    bells.setdefault(payload["bell"], set()).add(op[1])
                    key = (payload["bell"], op[1])
                    self.given[key] = self.given.get(key, 0) + 1
        for bell, reached in bells.items():
            topic = self.topics.get(bell, "?")
            live = self.listening(topic)
            for iid in sorted(reached - live):
                address, status = self.status.get(iid, ("an unknown instance", "absent"))
                self.strays.append(f"bell {bell} ({topic}) written to {address} ({status})")
            if bell not in self.committed:
                self.committed[bell] = (topic, reached, live)
        for op in txn.ops:
            if op[0] == PUT_INSTANCE and op[4].startswith(("lsn/", "deaf/")):
                self._set(op[1], op[4], STATUS_NAME.get(op[2], "unknown"), now)
            elif op[0] == SET_STATUS and op[1] in self.status:
                self._set(op[1], self.status[op[1]][0], STATUS_NAME.get(op[2], "unknown"), now)
            elif op[0] == DELETE_INSTANCE and op[1] in self.status:
                self._set(op[1], self.status[op[1]][0], "removed", now)

    def _set(self, iid: bytes, address: str, status: str, now: float) -> None:
        before = self.status.get(iid)
        if before is None or (before[1] in MAIL_STATUSES) != (status in MAIL_STATUSES):
            self.changes.setdefault(iid, []).append((now, status in MAIL_STATUSES))
        self.status[iid] = (address, status)

    def listened_throughout(self, iid: bytes, began: float, returned: float) -> bool:
        """Whether ``iid`` took mail from before ``began`` until after ``returned``."""
        changes = self.changes.get(iid, [])
        before = [live for at, live in changes if at < began]
        return bool(before) and before[-1] and not any(began <= at <= returned for at, _ in changes)

    def listening(self, topic: str) -> set[bytes]:
        """The listeners of ``topic`` whose status takes mail now."""
        prefix = f"lsn/{topic}/"
        return {
            iid
            for iid, (address, status) in self.status.items()
            if address.startswith(prefix) and status in MAIL_STATUSES
        }


class Signals:
    """Workload 9's operations, for the `workload.Driver` (``op_<kind>``)."""

    def __init__(self, signalled: Signalled, world: Any) -> None:
        self.signalled = signalled
        self.world = world

    async def op_listen(self, sim: Simulation, topic: str, id: str, life: float) -> None:
        handle = await sim.system.start(lsn, topic, id, life=life)
        self.world.started[handle.id] = "start"

    async def op_deaf(self, sim: Simulation, topic: str, id: str, life: float) -> None:
        handle = await sim.system.start(deaf, topic, id, life=life)
        self.world.started[handle.id] = "start"

    async def op_hush(self, sim: Simulation, address: str) -> None:
        await sim.system.cancel(address)

    async def op_ringer(self, sim: Simulation, id: str, topic: str, delay: float) -> None:
        bell = f"{id}-bell"
        self.signalled.topics[bell] = topic
        handle = await sim.system.start(ringer, id, topic=topic, bell=bell, delay=delay)
        self.world.started[handle.id] = "start"

    async def op_ring(self, sim: Simulation, topic: str, bell: str, keyed: bool) -> None:
        signalled = self.signalled
        signalled.topics[bell] = topic
        key = f"key-{bell}" if keyed else None
        began = trio.current_time()
        try:
            reached = await sim.system.signal(BELL, {"topic": topic}, {"bell": bell}, key=key)
        except CommitOutcomeUnknown:
            if key is None:
                return
            # Again with its key: who had it gets nothing more.
            await sim.system.signal(BELL, {"topic": topic}, {"bell": bell}, key=key)
            return
        signalled.rung.append((bell, topic, began, trio.current_time(), reached))
        self.world.note(f"bell {bell} ({topic}) reached {reached}")


def check(signalled: Signalled, fail: Any) -> None:
    """Call ``fail(invariant, detail)`` for the first of workload 9's
    invariants that does not hold (see the module docstring)."""
    for (bell, iid), count in sorted(signalled.given.items()):
        if count > 1:
            address = signalled.status.get(iid, ("an unknown instance", ""))[0]
            fail("signal-twice", f"bell {bell} was written to {address} {count} times")
    if signalled.strays:
        fail("signal-stray", signalled.strays[0])
    for bell, (topic, reached, live) in sorted(signalled.committed.items()):
        for iid in sorted(live - reached):
            address, _status = signalled.status[iid]
            detail = f"bell {bell} ({topic}) committed without {address}, a listener then"
            fail("signal-missed", detail)
    for bell, topic, began, returned, count in signalled.rung:
        written = signalled.committed.get(bell)
        if written is not None and len(written[1]) != count:
            detail = f"bell {bell} returned {count}; its commit wrote {len(written[1])}"
            fail("signal-count", detail)
        if written is None and count == 0:
            for iid, (address, _) in sorted(signalled.status.items()):
                if address.startswith(f"lsn/{topic}/") and signalled.listened_throughout(
                    iid, began, returned
                ):
                    detail = f"bell {bell} ({topic}) reached nobody while {address} listened"
                    fail("signal-missed", detail)
