"""Retrying an instance that failed: `ActorSystem.retry` and the command
line's ``retry``.

A retry is a fork from effect 0 (`actors._system._fork`), of the same address: a
new incarnation of an address whose instance failed (or was cancelled),
with the process, params and input it had (or an input that replaces it),
that keeps none of the last run's log and runs from the top, at once. One
operation: the plan is `_fork.read_for_fork`'s and the transaction
`_fork.fork_txn`'s, for the runtime and the command line alike. So, as a
fork's:

- mail: the messages the failed run took are put back, in the order they
  arrived, ahead of its unread ones (acknowledged mail is never lost to a
  retry: the new run takes them again, as it runs again the waits that
  took them); a message dropped to the dead letters (`actors._system._mail`) is
  left out, so a poison message is dropped, then the instance retried;
- stream: the values earlier runs emitted (before a continue-as-new) are
  kept; those the failed run emitted are not; consumers' cursors and send
  keys are not kept (a new incarnation);
- log, timers, compensations, exports: none (nothing of the run is kept);
  step keys count on with the incarnation number, so no key of the failed
  run repeats.

It is a start like any other: one compare-and-set transaction
(`_transactions.start_txn` with ``previous`` = the row read), so of two retries
(or a retry and a start or fork) of one address, on one node or several,
exactly one commits (see "Races" below). It runs at once, not through a
queue the failed instance may have waited in.

Races. Of two retries of one incarnation, on one node or several, exactly
one commits; the other, if it read the same incarnation (it lost at the
commit), returns the winner's handle; one that reads after the commit
finds a live (or already ended) instance and is refused as for any. On one
system, retries of an address that overlap share one outcome: a retry is
under way (in `Lifecycle.retrying`) from its call to its return, its look
whether the instance is parked on a crash budget (`_crashes.resume_parked`)
included, and one that comes meanwhile returns its handle. A drop of a
message racing a retry either commits first (the retry reads again and
leaves it out) or is refused (see `_fork.fork_txn`).

What is refused, with `InvalidArguments` saying what to do instead: an
instance that is live (running, suspended), queued, parked in
``compensation_stuck`` or completed, and a child (an instance with a
parent): a child's life belongs to its parent's run, so the parent is the
one to retry. No instance at the address is `NotDelivered` (reason
``"unknown"``), as for `ActorSystem.send`; records that do not decode are
`JournalCorrupt`.

Children of a retried parent. The parent runs again from the top and
meets its children at their addresses as any start does: a completed child
gives its recorded result again (it is not run twice), a cancelled one
starts afresh. A failed child would fail the new run at once, so the retry
resets it in the same transaction: every failed descendant the failed run
named (children first, depth first) is removed, its record kept in its own
history, its incarnation kept as its address's floor, so the retried
parent starts it afresh as a new incarnation (this is where a retry differs
from a fork from 0, which resets every ended child of the discarded part).

The record of the incarnation a retry replaces is kept in its address's
history (`actors._system._kept`); ``actors show ADDRESS --incarnation N`` prints one.
`retry` is the runtime's half (`ActorSystem.retry` calls it), which brings
the new incarnation into memory as a fork does.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from storage import STATUS_WORDS, Reader, encode
from storage.errors import Conflict

from .._features import _crashes
from .._kernel import _guard, _tracing, _transactions
from .._kernel._handles import Handle
from .._kernel._interfaces import SystemAPI
from ..errors import InvalidArguments, NotDelivered
from . import _fork
from ._fork import ForkPlan, fork_txn, in_doubt, read_for_fork
from ._kept import KEPT_INCARNATIONS, Kept, read_kept

__all__ = [
    "KEPT_INCARNATIONS",
    "RETRIED",
    "Kept",
    "RetryPlan",
    "read_for_retry",
    "read_kept",
    "refusal",
    "retry",
    "retry_txn",
]

#: The statuses a retry replaces.
RETRIED = frozenset({"failed", "cancelled"})

#: What a retry read: a fork's plan, from effect 0 to the same address.
RetryPlan = ForkPlan

# `Conflict.reason`s of a retry that lost a race: a start's (the instance
# is not what it read), or a state row's (another retry kept a record
# first, or a drop changed the dead letters).
_RACED = _transactions.START_RACED | {"state"}


def read_for_retry(r: Reader, iid: bytes) -> tuple[RetryPlan | None, int]:
    """The plan of a retry of ``iid`` (a fork's from effect 0, resetting
    the failed children only), or None if there is no instance (and then
    the last incarnation a cleanup removed there, 0 if none).

    Raises:
        JournalCorrupt: a record it reads does not decode.
    """
    return read_for_fork(r, iid, 0, None, failed_children=True)


def refusal(address: str, plan: RetryPlan) -> str | None:
    """Why the instance of ``plan`` cannot be retried, as a message that
    says what to do instead; None if it can."""
    row = plan.source
    status = row.status
    cannot = f"cannot retry {address!r}"
    if row.record.parent:
        return (
            f"{cannot}: it is a child of {row.record.parent!r}, whose run decides its "
            f"children; retry {row.record.parent!r} instead (its failed children start afresh)"
        )
    if status in RETRIED:
        # What a fork from 0 refuses besides (a child of its run still live).
        return _fork.refusal(address, plan, None, doing="retry")
    words = STATUS_WORDS.get(status, f"it is {status}")
    only = "only a failed or cancelled instance is retried"
    if status == "completed":
        return (
            f"{cannot}: {words}, and a completed instance is never run again; read its "
            "result (handle.result(), 'actors show'), or start one at another address"
        )
    if status == "queued":
        return (
            f"{cannot}: {words}; {only}: it starts when its queue has room (cancel it to "
            "take it out)"
        )
    if status == "compensation_stuck":
        return (
            f"{cannot}: {words}; {only}: resume its compensation (resume_compensation), or "
            "abandon it (abandon_compensation), which ends it failed, then retry"
        )
    return f"{cannot}: it is {status}; {only}: wait for it to end, or cancel it first"


def retry_txn(
    plan: RetryPlan,
    *,
    input: dict[str, Any] | None,
    now: float,
    max_payload: int | None = None,
    trace: str | None = None,
    encoded_input: bytes | None = None,
) -> _transactions.Start:
    """The retry of ``plan`` (a failed or cancelled instance, no child's):
    the fork of it from effect 0 (`_fork.fork_txn`): a new incarnation,
    running, with the params it had and ``input`` (None: the input it had)
    and the mail described in the module doc, over exactly the incarnation
    read; the replaced record kept in the address's history; each failed
    descendant reset.

    Invariant: it commits only over what it read (the instance, each reset
    descendant, each history row and the dead letters at the version read),
    else it fails with `Conflict` (a reason in `_transactions.START_RACED`, or
    ``"state"``) and writes nothing.

    Raises:
        EncodeError: a record or the input holds a value that cannot be stored.
    """
    return fork_txn(
        plan,
        input=input,
        now=now,
        max_payload=max_payload,
        trace=trace,
        encoded_input=encoded_input,
    )


# -- the runtime's half ----------------------------------------------------------------


@attrs.define
class _Flight:
    """A retry under way on one system: those that come meanwhile share its outcome."""

    done: trio.Event = attrs.Factory(trio.Event)
    handle: Handle[Any] | None = None


async def retry(system: SystemAPI, address: str, input: dict[str, Any] | None) -> Handle[Any]:
    """`ActorSystem.retry` (see there)."""
    _guard.refuse(
        "system.retry()", "retry from a step (ctx.step); a failed child is retried with its parent"
    )
    iid = system.router.address_iid(address, "retry's address")
    if input is not None and not isinstance(input, dict):
        raise InvalidArguments(
            f"retry(input=...) takes a dict of keyword input or None, not {input!r}"
        )
    encoded_input = encode(input, what="input") if input else None  # refused before a read
    # Retries of one address at once on this system make one incarnation,
    # and each returns its handle (as two nodes' do: see `_retry`).
    # Invariant: a retry is in `retrying` from its first checkpoint to its
    # return, its look whether the instance is parked included: a look
    # outside it (a journal read, slow under load) that ended after
    # another retry's commit had the second refused, "it is running".
    flights: dict[bytes, _Flight] = system.lifecycle.retrying
    while (flight := flights.get(iid)) is not None:
        await flight.done.wait()
        if flight.handle is not None:
            return flight.handle
    flights[iid] = flight = _Flight()
    try:
        flight.handle = await _crashes.resume_parked(system, address, input)
        if flight.handle is None:
            async with system.lifecycle.deciding(iid):  # a start of the address
                flight.handle = await _retry(system, iid, address, input, encoded_input)
        return flight.handle
    finally:
        del flights[iid]
        flight.done.set()


async def _retry(
    system: SystemAPI,
    iid: bytes,
    address: str,
    input: dict[str, Any] | None,
    encoded_input: bytes | None,
) -> Handle[Any]:
    replacing: int | None = None  # the incarnation a commit of ours lost a race over
    while True:  # once more each time another start (another node's) commits first
        plan, floor = await system.journal.read(lambda r: read_for_retry(r, iid))
        if plan is None:
            gone = f" (incarnation {floor} was cleaned up)" if floor else ""
            raise NotDelivered(
                f"no instance at {address!r} to retry{gone}; start one (system.start) or "
                "check the address",
                address=address,
                reason="unknown",
            )
        row = plan.source
        if row.address != address:
            raise InvalidArguments(
                f"address {address!r} collides with {row.address!r} in the journal"
            )
        if replacing is not None and row.record.incarnation > replacing:
            # Another retry (or start) replaced it first: that incarnation is the retry.
            return Handle._create(system, iid, address, row.record.incarnation)
        if row.status == "corrupt":
            raise system.corruption.error(iid, address)
        why = refusal(address, plan)
        if why is not None:
            raise InvalidArguments(why)
        if iid in system.registry.live:
            # Its actor is still leaving memory (it just ended): once it has,
            # what the journal says is all there is.
            with trio.move_on_after(0.05):
                await system.statuses.event(iid).wait()
            continue
        proc = system.registry.definition(row.process)
        params = tuple(row.record.params)
        proc.check_input(params, dict(row.record.input or {}) if input is None else input)
        start = retry_txn(
            plan,
            input=input,
            now=system.epoch_now(),
            max_payload=system.max_payload,
            trace=_tracing.traceparent(system),
            encoded_input=encoded_input,
        )
        try:
            start.txn.in_doubt = lambda _: in_doubt(system, iid)
            await system.journal.commit(start.txn)
        except Conflict as exc:
            if exc.reason not in _RACED:
                raise
            replacing = row.record.incarnation
            continue
        break
    return await _fork.started(system, plan, proc, start.record)
