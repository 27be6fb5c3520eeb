"""An instance's mail as an operator sees it: unread messages
(`ActorSystem.mail`), dropping one into the address's dead letters
(`ActorSystem.drop_message`), and the message a failed run was handling.

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
mail again), never applied to whatever holds that id in the new one.

A drop and a fork (or retry) serialize on the instance: the fork commits
only over the dead letters it read (`_fork.fork_txn`), so either the drop
commits first (the fork reads again and does not put the message back) or
the fork does, and the drop, bound to the replaced incarnation, is refused.

An instance in this system's memory holds its unread mail there too. A
drop does not wait for it to leave memory (an instance whose mail keeps
coming may never be idle long): it holds the message back from the actor
first (`Mailbox.withhold`: no wait takes it, no hand-over or re-read makes
it unread again), then, if the actor did not hold it unread, waits until
what the actor wrote before is committed (`Writes.landed`: its ridden
writes, and its commits in flight), so that the journal read next says
whether the actor took it; and the instance's activation waits until the
drop is in. So a message the actor took is refused ("no unread message"),
and one it did not is never taken after. If the drop is not written, the
message is unread again.

On a journal shared by several nodes, the node that owns a live instance
may hold its mail in memory and take the message at any moment, so a drop
of a live (running or suspended) instance is written only under this
node's ownership, fenced with its epoch: the epoch of its own actor, or a
claim the drop makes (`Journal.claim`), which it gets only if no live node
owns the instance. A drop on a node that does not own it is therefore
refused ("another node runs it": drop it on that node), and one whose
ownership was taken over before it committed is refused too (the fence
fails). An ended instance (a failed one's poison message) is dropped from
any node. A queued instance is not in any node's memory; its mailbox is
read when it is admitted.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from storage import LIVE_STATUSES, InstanceRow, Reader, Txn
from storage.errors import Conflict

from .._kernel import _guard, _transactions
from .._kernel._interfaces import ActorAPI, SystemAPI
from .._kernel._log import LogEntry
from ..errors import InvalidArguments, NotDelivered

__all__ = [
    "DeadLetter",
    "FailedAt",
    "Message",
    "dead_ids",
    "drop_message",
    "drop_txn",
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
            handled = attrs.evolve(found[1], incarnation=row.record.incarnation)
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
    key = _transactions.dead_key(row.iid)
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


async def drop_message(
    system: SystemAPI, address: str, message_id: int, incarnation: int | None = None
) -> Message:
    """`ActorSystem.drop_message` (see there)."""
    _guard.refuse("system.drop_message()", "drop a message from outside a process")
    iid = system.router.address_iid(address, "drop_message's address")
    if isinstance(message_id, bool) or not isinstance(message_id, int) or message_id < 1:
        raise InvalidArguments(
            f"drop_message takes a message id (an int >= 1, as system.mail() gives it), not "
            f"{message_id!r}"
        )
    if incarnation is not None and (
        isinstance(incarnation, bool) or not isinstance(incarnation, int)
    ):
        raise InvalidArguments(
            f"drop_message(incarnation=...) takes an incarnation number (Message.incarnation) "
            f"or None, not {incarnation!r}"
        )
    registry = system.registry
    # One at a time with its activation, a cancel or another drop of it here.
    while iid in registry.activating:
        await registry.activating.wait_released(iid)
    registry.activating.add(iid)  # its activation waits until the drop is in
    live = dropped = False
    actor: ActorAPI | None = None
    held: tuple[str, Any] | None = None
    # The ownership the drop is written under, on a shared journal (None:
    # unfenced; a single owner's journal, or an instance no node runs).
    epoch: int | None = None
    try:
        actor = await _in_memory(system, iid)
        if actor is not None:
            # Invariant: from here the actor in memory takes no message
            # ``message_id``; and what it took before is written before the
            # journal is read, so the read says whether it was taken.
            held = actor.arrivals.withhold(message_id)
            if actor.fenced:
                epoch = actor.epoch
            if held is None:
                # Taken here, or not handed over yet: the journal says which
                # once the actor's takes are in, ridden or in a commit in
                # flight (which may not be submitted yet).
                await actor.writes.landed()
        while True:
            plan = await system.journal.read(lambda r: read_for_drop(r, iid, message_id))
            if plan is None:
                raise NotDelivered(
                    f"no instance at {address!r}; check the address",
                    address=address,
                    reason="unknown",
                )
            if incarnation is not None and plan.row.record.incarnation != incarnation:
                # Ids are an incarnation's own: #id there is another message.
                raise InvalidArguments(
                    f"cannot drop message #{message_id} of incarnation {incarnation} of "
                    f"{address!r}: it is incarnation {plan.row.record.incarnation} now (a fork "
                    "or retry made it, numbering the mail it carried anew); list its mail "
                    f"again (system.mail, 'actors mail {address}') and drop by the new id"
                )
            incarnation = plan.row.record.incarnation
            if epoch is None and system.journal.shared and plan.row.status in LIVE_STATUSES:
                # Invariant: a drop of a live instance is written only while
                # this node owns it (fenced with its claim): a node that runs
                # it holds its mail in memory and would take the message. So
                # the drop claims it, which it may only if no live node owns
                # it; else it is refused. Once claimed, what an earlier owner
                # still writes (a take) meets the fence; read again.
                epoch = await _claim(system, iid, address, message_id)
                live = True  # this node's now: it runs it once the drop is over
                continue
            why = drop_refusal(address, plan, message_id)
            if why is not None:
                raise InvalidArguments(why)
            live = live or plan.row.status in LIVE_STATUSES
            txn = drop_txn(plan, message_id, system.epoch_now())
            if epoch is not None:
                txn.fence(iid, epoch)
            try:
                await system.journal.commit(txn)
            except Conflict as exc:
                if exc.reason == "epoch":
                    raise InvalidArguments(
                        f"cannot drop message #{message_id} of {address!r}: another node took "
                        "the instance over meanwhile (it runs there now); drop it on that node"
                    ) from None
                if exc.reason not in _transactions.START_RACED | {"state"}:
                    raise
                continue  # another drop, or a new incarnation: read again
            dropped = True
            message = plan.unread or plan.handled
            assert message is not None
            return message
    finally:
        if actor is not None:
            actor.arrivals.release(message_id, held, dropped=dropped)
        registry.activating.discard(iid)
        if live:
            registry.activate(iid)  # on disk meanwhile: it reads its mailbox again


async def _claim(system: SystemAPI, iid: bytes, address: str, message_id: int) -> int:
    """Claim the live instance at ``iid`` for the drop (see `drop_message`);
    its epoch, or `InvalidArguments` if another live node owns it."""
    epoch = await system.journal.claim(iid)
    if epoch is None:
        system.nodes.claimed(iid, None)  # (its mail goes to that node)
        raise InvalidArguments(
            f"cannot drop message #{message_id} of {address!r} from this node: another node "
            "runs it (it owns the instance and its lease is held), and could take the message "
            "meanwhile; drop it on that node (system.drop_message there, or 'actors mail "
            f"{address} --drop {message_id}' beside it)"
        )
    return epoch


async def _in_memory(system: SystemAPI, iid: bytes) -> ActorAPI | None:
    """The instance's actor in this system's memory, if it runs here; None
    if it does not (one that is ending is waited for until it has left)."""
    registry = system.registry
    while (actor := registry.live.get(iid)) is not None and actor.done:
        # Its end is being written: once it has left, the journal says all.
        with trio.move_on_after(0.05):
            await system.statuses.event(iid).wait()
    return actor
