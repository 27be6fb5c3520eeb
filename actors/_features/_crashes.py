"""Resuming an instance parked by a step's crash budget: the part of
`ActorSystem.retry` that serves a live instance stuck that way.

A step whose attempts kept being cut short by crashes is not run again past
its crash budget (``Retry.crashes``, see `_steps`): its instance is kept
suspended with ``held`` = `_events.held_crashed` and ``last_error`` saying
why. It has not failed, so a retry does not start a new incarnation (which
would give the step a new idempotency key and run the whole process again):
it resumes the same incarnation where it stopped. In one transaction, on
condition that the instance is still the live incarnation read, every
unfinished step attempt of the run that a crash cut short is forgiven (the
started record's ``closed`` count takes it in, as for an attempt cut short
by closing the system: it counts in no budget), and ``held`` and
``last_error`` are cleared; then the instance is brought into memory, and
the step runs again under the key it had, with its full crash budget.

Invariant: the forgiven counts are written only over the run read (a
`Conflict` otherwise: the instance changed meanwhile, and the retry reads
it again), so an attempt started after the read is never forgiven unseen.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from storage import LIVE_STATUSES, InstanceRow, LogEntry, Txn
from storage.errors import Conflict

from .._kernel import _events
from .._kernel._handles import Handle
from .._kernel._interfaces import SystemAPI
from ..errors import InvalidArguments

__all__ = ["Parked", "forgiven", "read_parked", "refuse_input", "resume_parked", "resume_txn"]

#: Seconds between looks at an instance still leaving memory.
_LEAVING_LOOK = 0.05


def forgiven(log: dict[int, LogEntry]) -> dict[int, LogEntry]:
    """The step entries of ``log`` that crashes cut short, each with those
    attempts counted as ``closed`` (so they count in no budget)."""
    out: dict[int, LogEntry] = {}
    for seq, entry in log.items():
        if entry.kind != "step" or entry.is_outcome or not entry.attempt:
            continue
        failures = entry.failures or 0
        closed = entry.closed if entry.closed is not None else entry.attempt - failures
        if entry.attempt - failures - closed > 0:
            out[seq] = attrs.evolve(entry, closed=entry.attempt - failures)
    return out


#: A live instance parked by a step's crash budget, and its run's log.
Parked = tuple[InstanceRow, dict[int, LogEntry]]


def read_parked(r: Any, iid: bytes) -> Parked | None:
    """The instance ``iid`` and its run's log, if a step's crash budget
    parked it (reader ``r``); None otherwise."""
    row = r.instance(iid)
    if row is None or row.status not in LIVE_STATUSES or not _events.is_crashed(row.record.held):
        return None
    return row, r.entries(iid, row.record.run)


def resume_txn(parked: Parked, now: float) -> Txn:
    """The resume of ``parked``, for the runtime and the command line alike:
    its crashes forgiven, ``held`` and ``last_error`` cleared, running; on
    condition that it is still the live incarnation read."""
    row, log = parked
    fixed = forgiven(log)
    record = row.record
    txn = Txn()
    txn.require(row.iid, LIVE_STATUSES, incarnation=record.incarnation)
    for seq, entry in sorted(fixed.items()):
        txn.put_log(row.iid, record.run, seq, entry.to_stored())
    txn.put_instance(
        row.iid,
        address=row.address,
        process=row.process,
        status="running",
        record=record.evolve(held=None, last_error=None, updated=now),
    )
    return txn


async def resume_parked(
    system: SystemAPI, address: str, input: dict[str, Any] | None
) -> Handle[Any] | None:
    """`ActorSystem.retry` of an instance parked by a step's crash budget:
    forgive the crashes and run it on (see the module docstring); its
    handle, or None if the instance at ``address`` is not parked that way
    (then the retry is an ordinary one).

    Raises:
        InvalidArguments: ``input`` is given: a resumed run keeps its input.
    """
    iid = system.router.address_iid(address, "retry's address")
    while True:
        parked = await system.journal.read(lambda r: read_parked(r, iid))
        if parked is None:
            return None
        if input is not None:
            raise InvalidArguments(refuse_input(address))
        if iid in system.registry.live:
            # Its actor is still leaving memory (it just parked): once it
            # has, what the journal says is all there is.
            await trio.sleep(_LEAVING_LOOK)
            continue
        try:
            await system.journal.commit(resume_txn(parked, system.epoch_now()), durable=True)
        except Conflict:
            continue  # it changed since the read: read it again
        row = parked[0]
        system.statuses.changed(iid)
        system.registry.activate(iid)
        return Handle._create(system, iid, row.address, row.record.incarnation)


def refuse_input(address: str) -> str:
    """Why a retry of a parked instance takes no new input."""
    return (
        f"{address!r} is stuck on a step's crash budget: a retry resumes it where it "
        "stopped, with the input it has; retry without input, or cancel it and retry "
        "to start afresh with new input"
    )
