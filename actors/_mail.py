"""An instance's mail as an operator sees it: unread messages
(`ActorSystem.mail`), dropping one into the address's dead letters
(`ActorSystem.drop_message`), and the message a failed run was handling.

Each message is a `Message`: its id (the mailbox sequence number ``show``
prints as ``#id``), its signal name and its payload as stored.

Dead letters. ``drop_message`` takes an unread message out of the mailbox
and adds it to the state row ``dead/<id hex>`` (`_protocol.dead_key`), in
one transaction, on condition that the instance is still the incarnation
read (and the row at the version read). ``mail --dropped`` lists them; they
are kept until the cleanup that removes the instance removes them too
(`_protocol.cleanup_txn`), across retries and forks of the address, each
naming the incarnation it was dropped from.

The message a run was handling. A process that crashes while handling a
message (a poison message: one it cannot handle) took it with a wait whose
entry holds it (its id, signal and payload) in the run's log, and the log
of the run that ended an instance stays with it; so the message an instance
was handling when it failed — restarted past its restart limit, the last
restart's — is recorded as it failed, and `handling` finds it: the latest
message the run took. ``show`` names it. Dropping it (its id) adds it to the
dead letters, and a fork (`actors._fork`) then leaves it out of the mail it
puts back, so the forked run never sees it again.

An instance in this system's memory holds its unread mail there too: a
drop first asks it to leave memory (it does once it is suspended with
nothing running; one that is running a step is refused, to try again),
holds its activation while the drop commits, and brings it back after, so
it reads its mailbox from the journal. On a journal shared by several
nodes, another node that holds the instance in memory forgets the dropped
message when it next reads the journal's mailbox (as it does to learn of
mail sent through other nodes); until then it may still take it. Drop from
the node that runs the instance, or while it is suspended out of memory,
to be sure.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from storage import LIVE_STATUSES, InstanceRow, Reader, Txn
from storage.errors import Conflict

from . import _guard, _protocol
from ._interfaces import SystemAPI
from ._log import LogEntry
from .errors import InvalidArguments, NotDelivered

__all__ = [
    "Message",
    "DeadLetter",
    "dead_ids",
    "drop_txn",
    "handling",
    "read_dead",
    "read_mail",
    "drop_message",
    "mail",
    "dropped",
    "poison",
]

# How long a drop waits, in seconds, for an instance in memory to leave it.
_LEAVE = 1.0


@attrs.frozen
class Message:
    """A message in an instance's mailbox, as stored: ``id`` is its mailbox
    sequence number (what ``actors show`` prints as ``#id`` and
    `ActorSystem.drop_message` takes), ``signal`` its signal's name,
    ``payload`` what was sent, ``sent`` when (epoch seconds; None if not
    recorded)."""

    id: int
    signal: str
    payload: Any
    sent: float | None = None


@attrs.frozen
class DeadLetter:
    """A message dropped from an instance (`ActorSystem.drop_message`): the
    `Message`, the incarnation it was dropped from, and when."""

    message: Message
    incarnation: int
    dropped: float

    def to_stored(self) -> dict[str, Any]:
        """The map the dead-letter row holds for it."""
        m = self.message
        return {
            "id": m.id,
            "signal": m.signal,
            "payload": m.payload,
            "sent": m.sent,
            "inc": self.incarnation,
            "at": self.dropped,
        }

    @classmethod
    def from_stored(cls, value: Any) -> DeadLetter | None:
        """The dead letter a stored map holds; None if it is not one."""
        if not isinstance(value, dict):
            return None
        mid, signal, inc, at = (
            value.get("id"),
            value.get("signal"),
            value.get("inc"),
            value.get("at"),
        )
        sent = value.get("sent")
        if not (
            isinstance(mid, int)
            and isinstance(signal, str)
            and isinstance(inc, int)
            and isinstance(at, (int, float))
            and (sent is None or isinstance(sent, (int, float)))
        ):
            return None
        return cls(Message(mid, signal, value.get("payload"), sent), inc, float(at))


def _message(seq: int, stored: Any) -> Message:
    sent = stored[2] if len(stored) > 2 and isinstance(stored[2], (int, float)) else None
    return Message(seq, stored[0], stored[1], sent)


def read_mail(r: Reader, iid: bytes) -> list[Message]:
    """The instance's unread messages, oldest first."""
    return [_message(seq, stored) for seq, stored in r.mailbox(iid)]


def read_dead(r: Reader, iid: bytes) -> tuple[int, list[DeadLetter]]:
    """The version of ``iid``'s dead-letter row (0: none) and the letters it
    holds, oldest first."""
    key = _protocol.dead_key(iid)
    for row in r.states(key, 1):
        if row.key == key:
            value = row.value if isinstance(row.value, list) else []
            return row.version, [d for d in map(DeadLetter.from_stored, value) if d is not None]
    return 0, []


def dead_ids(r: Reader, iid: bytes) -> frozenset[int]:
    """The ids of the messages dropped from the instance's current incarnation."""
    row = r.instance(iid)
    if row is None:
        return frozenset()
    inc = row.record.incarnation
    return frozenset(d.message.id for d in read_dead(r, iid)[1] if d.incarnation == inc)


def handling(entries: dict[int, LogEntry]) -> tuple[int, Message] | None:
    """The message a run was handling when it stopped: the latest its log
    shows it took (by the position of the wait that took it), with that
    position; None if it took none."""
    for seq, entry in sorted(entries.items(), reverse=True):
        if entry.kind == "wait" and entry.message is not None and entry.is_outcome:
            return seq, Message(entry.message, entry.signal or entry.name, entry.value)
    return None


@attrs.frozen
class DropPlan:
    """What a drop read: the instance, the message (None: not unread), the
    message its failed run was handling (if that is the one), and the
    dead-letter row."""

    row: InstanceRow
    unread: Message | None
    handled: Message | None
    dead: tuple[int, list[DeadLetter]]


def read_for_drop(r: Reader, iid: bytes, message_id: int) -> DropPlan | None:
    """What a drop of ``message_id`` reads; None if there is no instance."""
    row = r.instance(iid)
    if row is None:
        return None
    unread = next((m for m in read_mail(r, iid) if m.id == message_id), None)
    handled = None
    if unread is None and row.status == "failed":
        found = handling(r.entries(iid, row.record.run))
        if found is not None and found[1].id == message_id:
            handled = found[1]
    return DropPlan(row, unread, handled, read_dead(r, iid))


def drop_refusal(address: str, plan: DropPlan, message_id: int) -> str | None:
    """Why the drop cannot go ahead, saying what to do; None if it can."""
    if plan.unread is not None or plan.handled is not None:
        if any(
            d.message.id == message_id and d.incarnation == plan.row.record.incarnation
            for d in plan.dead[1]
        ):
            return f"message #{message_id} of {address!r} was dropped already ('mail --dropped')"
        return None
    return (
        f"{address!r} has no unread message #{message_id}; 'actors mail {address}' lists the "
        "unread ones with their ids (a taken message is in the log, not the mailbox)"
    )


def drop_txn(plan: DropPlan, message_id: int, now: float) -> Txn:
    """Take message ``message_id`` out of the mailbox (if it is unread) and
    add it to the dead letters, on condition that the instance is the
    incarnation read and the dead-letter row is at the version read (else
    `Conflict` and nothing is written)."""
    row = plan.row
    message = plan.unread or plan.handled
    assert message is not None
    txn = Txn()
    txn.require(row.iid, None, incarnation=row.record.incarnation)
    if plan.unread is not None:
        txn.take_message(row.iid, message_id)
    version, letters = plan.dead
    key = _protocol.dead_key(row.iid)
    letters = [*letters, DeadLetter(message, row.record.incarnation, now)]
    txn.expect_state(key, version)
    txn.put_state(key, [d.to_stored() for d in letters])
    return txn


# -- the runtime's half ----------------------------------------------------------------


async def mail(system: SystemAPI, address: str) -> list[Message]:
    """`ActorSystem.mail` (see there)."""
    iid = system.router.address_iid(address, "mail's address")
    rows = await system.journal.read(lambda r: (r.instance(iid), read_mail(r, iid)))
    row, messages = rows
    if row is None:
        raise NotDelivered(
            f"no instance at {address!r}; check the address", address=address, reason="unknown"
        )
    return messages


async def poison(system: SystemAPI, address: str) -> Message | None:
    """`ActorSystem.poison` (see there)."""
    iid = system.router.address_iid(address, "poison's address")

    def read(r: Reader) -> tuple[InstanceRow | None, Message | None]:
        row = r.instance(iid)
        if row is None or row.status != "failed":
            return row, None
        found = handling(r.entries(iid, row.record.run))
        return row, None if found is None else found[1]

    row, message = await system.journal.read(read)
    if row is None:
        raise NotDelivered(
            f"no instance at {address!r}; check the address", address=address, reason="unknown"
        )
    return message


async def dropped(system: SystemAPI, address: str) -> list[DeadLetter]:
    """`ActorSystem.dropped` (see there)."""
    iid = system.router.address_iid(address, "dropped's address")
    row, letters = await system.journal.read(lambda r: (r.instance(iid), read_dead(r, iid)[1]))
    if row is None and not letters:  # (as `mail` says of an address no instance is at)
        raise NotDelivered(
            f"no instance at {address!r}; check the address", address=address, reason="unknown"
        )
    return letters


async def drop_message(system: SystemAPI, address: str, message_id: int) -> Message:
    """`ActorSystem.drop_message` (see there)."""
    _guard.refuse("system.drop_message()", "drop a message from outside a process")
    iid = system.router.address_iid(address, "drop_message's address")
    if isinstance(message_id, bool) or not isinstance(message_id, int) or message_id < 1:
        raise InvalidArguments(
            f"drop_message takes a message id (an int >= 1, as system.mail() gives it), not "
            f"{message_id!r}"
        )
    await _out_of_memory(system, iid, address)
    system.registry.activating.add(iid)  # its activation waits until the drop is in
    live = False
    try:
        while True:
            plan = await system.journal.read(lambda r: read_for_drop(r, iid, message_id))
            if plan is None:
                raise NotDelivered(
                    f"no instance at {address!r}; check the address",
                    address=address,
                    reason="unknown",
                )
            why = drop_refusal(address, plan, message_id)
            if why is not None:
                raise InvalidArguments(why)
            live = plan.row.status in LIVE_STATUSES
            try:
                await system.journal.commit(drop_txn(plan, message_id, system.epoch_now()))
            except Conflict as exc:
                if exc.reason not in _protocol.START_RACED | {"state"}:
                    raise
                continue  # another drop, or a new incarnation: read again
            message = plan.unread or plan.handled
            assert message is not None
            return message
    finally:
        system.registry.activating.discard(iid)
        if live:
            system.registry.activate(iid)  # it reads its mailbox again


async def _out_of_memory(system: SystemAPI, iid: bytes, address: str) -> None:
    """Have the instance leave this system's memory, or refuse the drop."""
    registry = system.registry
    with trio.move_on_after(_LEAVE):
        # Invariant: on return it is neither in memory nor being brought in
        # (the caller marks it as being brought in before any await).
        while (actor := registry.live.get(iid)) is not None or iid in registry.activating:
            if actor is not None:
                actor.request_passivation()
            await trio.sleep(0.01)
        return
    raise InvalidArguments(
        f"cannot drop a message of {address!r} now: it is running (a step or a child in "
        "flight); try again once it waits (suspended), or cancel it"
    )
