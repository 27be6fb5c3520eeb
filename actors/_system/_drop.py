"""Dropping a message into an instance's dead letters
(`ActorSystem.drop_message`), the runtime's half and what the command line
shares with it (`read_for_drop`, `drop_refusal`, `drop_txn`). The messages,
the dead letters and their ids are `_mail`'s.

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
from ..errors import InvalidArguments, NotDelivered
from ._mail import DeadLetter, Message, handling, read_dead, read_mail

__all__ = ["DropPlan", "drop_message", "drop_refusal", "drop_txn", "read_for_drop"]


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
