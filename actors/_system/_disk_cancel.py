"""A cancel of an instance that is not in memory here (`cancel_on_disk`,
the caller holding off its activation): written on disk, with its children
first; a queued one leaves its queue in the same transaction; one another
live node owns is asked of its owner (`cancel_remote`), and taken over here
if the owner dies or freezes meanwhile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from storage import LIVE_STATUSES, UNFINISHED_STATUSES
from storage.errors import Conflict

from .._features import _saga, _supervision as _sup
from .._features._queue_state import cancel_queued
from .._kernel import _transactions
from .._kernel._log import children_named, read_state
from ..errors import UnknownProcess

if TYPE_CHECKING:
    from .._kernel._interfaces import SystemAPI

__all__ = ["REMOTE_CANCEL_WAIT", "REMOTE_CLAIM_EVERY", "cancel_on_disk", "cancel_remote"]

# A cancel of an instance another live node owns waits this long for it to
# end (its owner may be in a long step), and meanwhile tries to claim it
# this often (times `Journal.poll_scale`), as the takeover scan does: once
# the owner's lease lapses, the cancel is written here within that time.
REMOTE_CANCEL_WAIT = 10.0
REMOTE_CLAIM_EVERY = 0.25


async def cancel_remote(
    system: SystemAPI, iid: bytes, address: str, reason: str, compensate: bool = False
) -> bool | None:
    """Cancel an instance another live node owns: ask it, and wait (a
    while) for it to end. None: its owner died or froze meanwhile and
    this node claimed it (the caller cancels it here, holding off its
    activation as before: so a node left alone with it never waits for
    a takeover that its own cancel holds off)."""
    payload: dict[str, Any] = {"reason": reason}
    if compensate:
        payload["compensate"] = True
    await system.router.send_system(iid, address, _sup.CANCEL, payload)
    claim_every = REMOTE_CLAIM_EVERY * system.journal.poll_scale
    with trio.move_on_after(REMOTE_CANCEL_WAIT):
        next_claim = trio.current_time() + claim_every
        while True:
            row = await system.journal.read(lambda r: r.instance(iid))
            if row is None or row.status not in LIVE_STATUSES:
                return row is not None and row.status == "cancelled"
            if trio.current_time() >= next_claim:
                # Invariant: a claim succeeds only once the owner's lease
                # has lapsed, so the owner cannot be cancelling it too.
                if await system.journal.claim(iid) is not None:
                    return None
                next_claim = trio.current_time() + claim_every
            await trio.sleep(0.02)
    return False


async def cancel_on_disk(
    system: SystemAPI, iid: bytes, address: str, reason: str, compensate: bool = False
) -> bool | None:
    """Cancel an instance that is not in memory here (the caller holds
    off its activation). None: it runs its compensations first, as
    recorded now (or before), once activated."""
    row, log, mail, timers, _ = await system.journal.read(lambda r: read_state(r, iid))
    if row is None or row.status not in UNFINISHED_STATUSES:
        return False
    if row.status == "queued":
        if await cancel_queued(system, row, reason):
            return True
        # (A queue started it meanwhile: its owner cancels it, as any other.)
        return await cancel_on_disk(system, iid, address, reason, compensate)
    compensating = _compensates(system, row, compensate)
    epoch = await system.journal.claim(iid)
    if epoch is None:
        ended = await cancel_remote(system, iid, address, reason, compensate)
        if ended is not None:
            return ended
        # Its owner is gone and this node took it: cancel it here (what
        # the owner left, read again; its CANCEL mail is taken with it).
        return await cancel_on_disk(system, iid, address, reason, compensate)
    if compensating and row.record.failure is not None:
        return None  # compensating already: it ends once they have run
    fence = epoch if system.journal.shared else None
    # Depth first: its children go before it records its own end; and
    # before them, that its cancel has begun (unless a CANCEL in its
    # mailbox says so already): see _supervision's cascade.
    children = children_named(log)
    if children and not _sup.cancel_marks(mail):
        try:
            await _sup.record_cancel(system, iid, reason, compensate=compensate, epoch=fence)
        except Conflict:
            return False  # it ended meanwhile (or is owned elsewhere now)
    await _sup.cancel_children(system, children, f"parent {row.address} cancelled")
    txn, notices = _transactions.cancel_txn(
        [_transactions.Cancel(row, timers, reason, fence, compensate=compensating)],
        system.epoch_now(),
    )
    mail = await system.journal.read(lambda r: r.mailbox(iid))
    # The cancel it records is the one each CANCEL asked for.
    for seq in _sup.cancel_marks(mail):
        txn.take_message(iid, seq)
    # Every ask it owes an answer hears that it ended without one (one
    # that compensates first: those its run took; its end, the unread).
    answers = system.wiring.ended_on_disk(
        system, txn, "cancelled", log, () if compensating else mail
    )
    try:
        results = await system.journal.commit(txn)
    except Conflict:
        return False
    system.statuses.changed(iid)
    for notice in notices:
        system.router.route(notice, results)
    for after in answers:
        after(results)
    return None if compensating else True


def _compensates(system: SystemAPI, row: Any, compensate: bool) -> bool:
    """Whether cancelling the live instance of ``row`` runs its pending
    saga compensations first: asked for, its process says so
    (``compensate_on_cancel``), or it is compensating already. Only a
    system that registers its process can run them.

    Raises:
        UnknownProcess: they were asked for, but its process is not registered here.
    """
    if row.status not in LIVE_STATUSES or not _saga.pending(row.record):
        return False
    proc = system.registry.procs.get(row.process)
    if proc is None:
        if compensate:
            raise UnknownProcess(
                f"cannot run the compensations of {row.address!r} here: its process "
                f"{row.process!r} is not registered by this system; pass it in "
                "open_system(processes=[...]), or cancel without compensate=True"
            )
        return False
    return compensate or proc.compensate_on_cancel or row.record.failure is not None
