"""An instance's mail as an operator sees it: unread messages
(`ActorSystem.mail`), the address's dead letters (``_drop``
puts a message there: `ActorSystem.drop_message`), and the message a failed run was handling.

Each message is a `Message`: its id (the mailbox sequence number ``show``
prints as ``#id``), its signal name and its payload as stored.

Dead letters. ``drop_message`` takes an unread message out of the mailbox
and adds it to the state row ``dead/<id hex>`` (`_transactions.dead_key`), in
one transaction, on condition that the instance is still the incarnation
read (and the row at the version read). ``mail --dropped`` lists them; they
are kept until the cleanup that removes the instance removes them too
(`_transactions.cleanup_txn`), across retries and forks of the address, each
naming the incarnation it was dropped from.

The message a run was handling. A process that crashes while handling a
message (a poison message: one it cannot handle) took it with a wait whose
entry holds it (its id, signal and payload) in the run's log, and the log
of the run that ended an instance stays with it; so the message an instance
was handling when it failed — restarted past its restart limit, the last
restart's — is recorded as it failed, and `handling` finds it: the latest
message the run took. ``show`` names it. Dropping it (its id) adds it to the
dead letters, and a fork (`actors._system._fork`) then leaves it out of the mail it
puts back, so the forked run never sees it again.

Which effect failed a run. `failed_at` is the run's last log entry when it
holds an error: the effect the run stopped at (a step, a child), which
``show`` and ``mail`` name. When a crash cut that effect short after the
run took its latest message (an ``at_most_once`` step the process stopped
during: its error record counts ``crashed`` attempts), `handling` names no
message: the crash failed the run whatever the message held, and dropping
the message would lose it for nothing (retry or fork the instance).

Ids. A message's id is its incarnation's own: a retry or fork of the
address carries the mail into a new incarnation, numbered anew
(`Message.incarnation` says which one a listing read). A drop is bound to
one incarnation: the one given (``incarnation=``), else the first it reads;
if a retry or fork replaced it meanwhile, the drop is refused (list the
mail again), never applied to whatever holds that id in the new one."""

from __future__ import annotations

from typing import Any

import attrs

from storage import InstanceRow, Reader

from .._kernel import _transactions
from .._kernel._interfaces import SystemAPI
from .._kernel._log import LogEntry
from ..errors import NotDelivered

__all__ = [
    "DeadLetter",
    "FailedAt",
    "Message",
    "dead_ids",
    "dropped",
    "failed_at",
    "handling",
    "mail",
    "poison",
    "read_dead",
    "read_mail",
]


@attrs.frozen
class Message:
    """A message in an instance's mailbox, as stored: ``id`` is its mailbox
    sequence number (what ``actors show`` prints as ``#id`` and
    `ActorSystem.drop_message` takes), ``signal`` its signal's name,
    ``payload`` what was sent, ``sent`` when (epoch seconds; None if not
    recorded), ``incarnation`` the incarnation whose mailbox (or log) holds
    it: ids are an incarnation's own, a retry or fork numbers its mail
    anew."""

    id: int
    signal: str
    payload: Any
    sent: float | None = None
    incarnation: int | None = None


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
        return cls(Message(mid, signal, value.get("payload"), sent, inc), inc, float(at))


def _message(seq: int, stored: Any, incarnation: int | None) -> Message:
    sent = stored[2] if len(stored) > 2 and isinstance(stored[2], (int, float)) else None
    return Message(seq, stored[0], stored[1], sent, incarnation)


def read_mail(r: Reader, iid: bytes) -> list[Message]:
    """The instance's unread messages, oldest first."""
    row = r.instance(iid)
    incarnation = None if row is None else row.record.incarnation
    return [_message(seq, stored, incarnation) for seq, stored in r.mailbox(iid)]


def read_dead(r: Reader, iid: bytes) -> tuple[int, list[DeadLetter]]:
    """The version of ``iid``'s dead-letter row (0: none) and the letters it
    holds, oldest first."""
    key = _transactions.dead_key(iid)
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


@attrs.frozen
class FailedAt:
    """The effect a failed run stopped at: its log's last entry, which holds
    an error (a step that failed, a child that failed, ...). The process may
    have caught that error and raised another; the run's error says which."""

    seq: int
    kind: str
    name: str
    error: dict[str, Any]
    #: a crash cut its last attempt short (an ``at_most_once`` step): the
    #: process stopped during it; its code raised nothing
    crashed: bool

    def as_dict(self) -> dict[str, Any]:
        """What ``show`` and ``mail`` print (``label``) and give as JSON."""
        label = f"{self.kind} {self.name!r} (effect #{self.seq})"
        if self.crashed:
            label += ", cut short by a crash: no message it took failed it"
        return {
            "seq": self.seq,
            "kind": self.kind,
            "name": self.name,
            "crashed": self.crashed,
            "label": label,
        }


def failed_at(entries: dict[int, LogEntry]) -> FailedAt | None:
    """Where a run stopped, if its last entry is an effect that failed; None
    otherwise (its code raised, or it did not fail)."""
    if not entries:
        return None
    seq = max(entries)
    entry = entries[seq]
    if entry.error is None:
        return None
    crashed = entry.error.get("crashed")
    return FailedAt(seq, entry.kind, entry.name, entry.error, bool(crashed))


def handling(entries: dict[int, LogEntry]) -> tuple[int, Message] | None:
    """The message a run was handling when it stopped: the latest its log
    shows it took (by the position of the wait that took it), with that
    position; None if it took none, or if the run stopped at a later effect
    that a crash cut short (see `failed_at`): then the crash failed the run,
    not the message."""
    end = failed_at(entries)
    for seq, entry in sorted(entries.items(), reverse=True):
        if entry.kind == "wait" and entry.message is not None and entry.is_outcome:
            if end is not None and end.crashed and end.seq > seq:
                return None
            return seq, Message(entry.message, entry.signal or entry.name, entry.value)
    return None


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
        if found is None:
            return row, None
        return row, attrs.evolve(found[1], incarnation=row.record.incarnation)

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
