"""Workload 8 (the default): an operator's calls among the clients'.

The plan adds, after the earlier versions' operations and drawn from a
stream of its own: inboxes (``inbox/:id``) that hold their mail a while
before each take, messages to them (some marked ``boom``, which fails an
inbox's first incarnation), ``system.mail`` and ``drop_message`` of an
unread one, ``retry`` of a failed inbox, ``fork`` of one to another
address, joiners (``joiner/:id``: ``ctx.spawn`` then ``ctx.join``) with
``cleanup`` of ended instances while they wait, and clients that keep the
handle of a completed joiner and read it again later. `Operators` runs
them for the `workload.Driver`; `check` judges them once the run settled:

- ``dropped-taken``: a message handled after a drop of it returned;
- ``drop-refused``: a drop refused as "no unread message" (or "dropped
  already") for a message that was neither taken nor dropped (nor
  renumbered by a retry or fork that began after ``mail`` read it); or a
  second drop of one message that was not refused;
- ``retry-lost-mail``: an acknowledged message to an inbox that a retry
  restarted, neither handled, nor dropped (in its dead letters: a drop
  whose outcome its caller was not told counts if it was written), nor
  unread in its mailbox now
  (``acked-lost`` for an inbox never retried; nothing for one that a
  cleanup removed once it failed);
- ``fork-copied-mail``: a message handled by an instance at another
  address than the one it was sent to (a fork copied it);
- ``handled-twice``: a message handled under two keys by one incarnation
  (a retry or a fork runs the taken messages again: not counted across
  incarnations);
- ``cleanup-removed-child``: a joiner that did not complete with its
  children's results (a cleanup removed one it was to join);
- ``completed-cancelled`` (while the run goes): a handle whose
  ``result()`` returned reports "cancelled" later, or raises
  `ProcessCancelled`.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import trio

import actors
from actors.testing import Simulation

from . import processes as p
from .world import Run, World


def plan_operators(rng: random.Random, op: Any) -> list[Any]:
    """Workload 8's operations (``op(kind, args, pause, background)`` makes one)."""
    ops: list[Any] = []
    inboxes = [f"inbox/x{i}" for i in range(rng.randint(1, 2))]
    for address in inboxes:
        hold = rng.choice([0.5, 5.0, 30.0])
        ops.append(op("inbox", {"id": address.split("/")[1], "hold": hold}, 0.0, False))
    joiners: list[str] = []
    kinds = [("isend", 10), ("drop", 4), ("retry", 3), ("fork", 3), ("joiner", 2)]
    kinds += [("cleanup", 2), ("handle", 2)]
    for n in range(rng.randint(10, 30)):
        kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        args: dict[str, Any]
        if kind == "isend":
            args = {"address": rng.choice(inboxes), "m": f"x-m{n}", "boom": rng.random() < 0.2}
        elif kind == "drop":
            args = {
                "address": rng.choice(inboxes),
                "pick": rng.random(),
                "again": rng.random() < 0.3,
            }
        elif kind == "retry":
            args = {"address": rng.choice(inboxes)}
        elif kind == "fork":
            source = rng.choice(inboxes)
            args = {"address": source, "to": f"{source}-f{n}", "keep": rng.randint(0, 2)}
        elif kind == "joiner":
            joiners.append(f"joiner/g{n}")
            kids = [rng.choice([0.1, 2.0, 20.0]) for _ in range(rng.randint(1, 3))]
            args = {"id": f"g{n}", "kids": kids, "wait": rng.choice([5.0, 60.0, 600.0])}
        elif kind == "cleanup":
            args = {"older_than": rng.choice([0.0, 0.0, 1.0])}
        else:
            if not joiners:
                continue
            args = {"address": rng.choice(joiners), "pause": rng.choice([1.0, 100.0, 1000.0])}
        ops.append(op(kind, args, rng.expovariate(1.0), rng.random() < 0.5))
    return ops


class Operators:
    """Workload 8's operations, for the `workload.Driver` (``op_<kind>``)."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def op_inbox(self, sim: Simulation, id: str, hold: float) -> None:
        handle = await sim.system.start(p.inbox, id, hold=hold)
        self.world.started[handle.id] = "start"

    async def op_isend(self, sim: Simulation, address: str, m: str, boom: bool) -> None:
        operated = self.world.operated
        operated.tried[m] = address
        try:
            await sim.system.send(address, p.work, {"m": m, "boom": boom})
        except actors.NotDelivered:
            return  # the inbox failed (or was replaced): nothing was stored
        operated.acked[m] = address

    async def op_drop(self, sim: Simulation, address: str, pick: float, again: bool) -> None:
        """Read the inbox's mail and drop one unread message (``again``: then
        drop it once more, as an operator who clicked twice)."""
        world, operated = self.world, self.world.operated
        try:
            mail = [
                message for message in await sim.system.mail(address) if message.signal == "work"
            ]
        except actors.NotDelivered:
            return
        if not mail:
            return
        read = world.now()
        chosen = mail[min(len(mail) - 1, int(pick * len(mail)))]
        try:
            dropped = await sim.system.drop_message(address, chosen.id)
        except actors.InvalidArguments as exc:
            refused = (chosen.payload["m"], address, str(exc), read, world.now())
            operated.refusals.append(refused)
            world.note(f"drop {chosen.payload['m']} at {address} refused: {exc}")
            return
        operated.dropped[dropped.payload["m"]] = world.now()
        world.note(f"dropped {dropped.payload['m']} at {address}")
        if again:
            read = world.now()
            try:
                await sim.system.drop_message(address, chosen.id)
            except actors.InvalidArguments as exc:
                operated.refusals.append(
                    (dropped.payload["m"], address, str(exc), read, world.now())
                )
                return
            world.fail("drop-refused", f"{address}'s message #{chosen.id} was dropped twice")

    async def op_retry(self, sim: Simulation, address: str) -> None:
        operated = self.world.operated
        operated.repairs.setdefault(address, []).append(self.world.now())
        await sim.system.retry(address)
        operated.retried.add(address)
        self.world.note(f"retried {address}")

    async def op_fork(self, sim: Simulation, address: str, to: str, keep: int) -> None:
        operated = self.world.operated
        operated.repairs.setdefault(address, []).append(self.world.now())
        handle = await sim.system.fork(address, from_effect=p.INBOX_HEAD + 3 * keep, to=to)
        operated.forks[handle.id] = address
        self.world.started[handle.id] = "fork"
        self.world.note(f"forked {address} to {handle.id}, keeping {keep} message(s)")

    async def op_joiner(self, sim: Simulation, id: str, kids: list[float], wait: float) -> None:
        handle = await sim.system.start(p.joiner, id, kids=kids, wait=wait)
        self.world.started[handle.id] = "start"
        self.world.operated.joiners[handle.id] = kids

    async def op_handle(self, sim: Simulation, address: str, pause: float) -> None:
        world = self.world
        handle = await sim.system.lookup(address)
        if handle is None:
            return
        with trio.move_on_after(3000) as waited:
            try:
                await handle.result()
            except (actors.ProcessFailed, actors.ProcessCancelled):
                return
        if waited.cancelled_caught:
            return
        await trio.sleep(pause)  # cleanups run meanwhile
        status = handle.status
        if status == "cancelled" and not world.lossy(sim):
            world.fail(
                "completed-cancelled", f"the handle of {address} completed now says {status}"
            )
        with trio.move_on_after(60):
            try:
                await handle.result()
            except actors.ProcessCancelled as exc:
                if not world.lossy(sim):
                    detail = f"the handle of {address} completed; result() now raises {exc!r}"
                    world.fail("completed-cancelled", detail)


async def check(world: World, sim: Simulation, rows: dict[str, Any]) -> None:
    """Raise `InvariantBroken` for the first of workload 8's invariants
    that does not hold (see the module docstring)."""
    operated = world.operated
    if not operated.tried and not operated.joiners:
        return
    taken: dict[str, list[Run]] = defaultdict(list)
    for run in world.ledger:
        if run.tag == "I":
            taken[run.ident].append(run)
    for m, runs in sorted(taken.items()):
        to = operated.tried.get(m)
        keys: dict[tuple[str, int], set[str]] = defaultdict(set)
        for run in runs:
            if run.address != to:
                detail = f"message {m} sent to {to} was handled by {run.address} ({run.key})"
                world.fail("fork-copied-mail", detail)
            keys[(run.address, run.incarnation)].add(run.key)
        for (address, incarnation), handled in sorted(keys.items()):
            if len(handled) > 1:
                detail = f"message {m} handled by incarnation {incarnation} of {address} under {sorted(handled)}"
                world.fail("handled-twice", detail)
    for m, at in sorted(operated.dropped.items()):
        for run in taken.get(m, []):
            if run.at > at:
                detail = (
                    f"message {m} was dropped at {at:.3f}; {run.key} handled it at {run.at:.3f}"
                )
                world.fail("dropped-taken", detail)
    unread = await _unread(sim, sorted(set(operated.tried.values())))
    # A drop whose caller heard no outcome (CommitOutcomeUnknown) may have
    # been written: the dead letters say which messages were dropped.
    dead = await _dead(sim, sorted(set(operated.tried.values())))
    for m, address, why, read, refused in operated.refusals:
        repaired = any(read <= at <= refused for at in operated.repairs.get(address, []))
        if "dropped already" in why and m not in operated.dropped:
            world.fail("drop-refused", f"a drop of {m} at {address} was refused: {why}")
        if (
            "no unread message" in why
            and not repaired
            and m not in taken
            and m not in operated.dropped
            and m not in dead.get(address, set())
        ) and m not in unread.get(address, set()):
            world.fail(
                "drop-refused",
                f"a drop of {m} at {address} was refused ({why}); it was never taken",
            )
    for m, address in sorted(operated.acked.items()):
        if m in taken or m in operated.dropped or m in unread.get(address, set()):
            continue
        if m in dead.get(address, set()):
            continue  # dropped by a drop whose caller was not told it was
        if address not in rows:
            continue  # a cleanup removed its failed inbox, unread mail and all
        detail = f"message {m} to {address} was acknowledged; never handled, dropped, nor unread"
        world.fail("retry-lost-mail" if address in operated.retried else "acked-lost", detail)
    for address, kids in sorted(operated.joiners.items()):
        found = rows.get(address)
        if found is None:
            continue  # removed by a cleanup once it ended
        row = found[0]
        want = [f"L:{address}/leafj/l{i}" for i in range(len(kids))]
        if row.status != "completed" or row.record.result != want:
            what = row.record.result if row.status == "completed" else row.record.error
            detail = f"{address} is {row.status} with {what!r}; its children gave {want}"
            world.fail("cleanup-removed-child", detail)


async def _unread(sim: Simulation, addresses: list[str]) -> dict[str, set[str]]:
    """The ids of the ``work`` messages unread in each inbox now, whatever its status."""
    found: dict[str, set[str]] = {}
    for address in addresses:
        try:
            mail = await sim.system.mail(address)
        except actors.NotDelivered:
            continue
        found[address] = {message.payload["m"] for message in mail if message.signal == "work"}
    return found


async def _dead(sim: Simulation, addresses: list[str]) -> dict[str, set[str]]:
    """The ids of the ``work`` messages dropped from each inbox (its dead letters)."""
    found: dict[str, set[str]] = {}
    for address in addresses:
        try:
            letters = await sim.system.dropped(address)
        except actors.NotDelivered:
            continue
        found[address] = {
            letter.message.payload["m"] for letter in letters if letter.message.signal == "work"
        }
    return found
