"""Retrying an instance that failed: `ActorSystem.retry` and the command
line's ``retry``.

A retry starts a new incarnation of an address whose instance failed (or
was cancelled), with the process, params and input it had (or an input
that replaces it), running at once. It is a start like any other: one
compare-and-set transaction (`_protocol.start_txn` with ``previous`` = the
row read), so of two retries (or a retry and a start) of one address, on
one node or several, exactly one commits (see "Races" below). As after a
cancel and a start, the new incarnation replaces the old one whole (log,
mailbox, timers, stream, cursors, send keys) and its step keys count on
with the incarnation number, so no key of the failed run repeats. It runs
at once, not through a queue the failed instance may have waited in.

Races. Of two retries of one incarnation, on one node or several, exactly
one commits; the other, if it read the same incarnation (it lost at the
commit), returns the winner's handle; one that reads after the commit
finds a live (or already ended) instance and is refused as for any. On one
system, retries of an address that overlap share one outcome.

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
parent starts it afresh as a new incarnation.

The record of the incarnation a retry replaces is kept: a state row
``history/<id hex>`` (`_protocol.history_key`) holds the `Kept` record of
each incarnation a retry replaced at that address, the latest
`KEPT_INCARNATIONS`, written in the retry's transaction (on condition that
the row is at the version read), and removed by the cleanup that removes
the instance (`_protocol.cleanup_txn`). ``actors show ADDRESS --incarnation
N`` prints one.

The transaction is built here (`retry_txn`), from what `read_for_retry`
read, for the runtime and the command line alike; `retry` is the runtime's
half (`ActorSystem.retry` calls it), which brings the new incarnation into
memory as `Lifecycle.start` does a fresh start.
"""

from __future__ import annotations

import weakref
from typing import Any

import attrs
import trio

from storage import (
    STATUS_WORDS,
    InstanceRecord,
    InstanceRow,
    Reader,
    Txn,
    encode,
    instance_id,
)
from storage.errors import Conflict

from . import _guard, _protocol, _tracing
from ._handles import Handle
from ._interfaces import SystemAPI
from ._log import children_named
from ._sending import commit_through
from .errors import InvalidArguments, NotDelivered

__all__ = [
    "KEPT_INCARNATIONS",
    "RETRIED",
    "Kept",
    "RetryPlan",
    "read_for_retry",
    "read_kept",
    "refusal",
    "retry_txn",
    "retry",
]

#: How many replaced incarnations an address's history keeps (the latest).
KEPT_INCARNATIONS = 10

#: The statuses a retry replaces.
RETRIED = frozenset({"failed", "cancelled"})

# `Conflict.reason`s of a retry that lost a race: a start's (the instance
# is not what it read), or a state row's (another retry kept a record first).
_RACED = _protocol.START_RACED | {"state"}


@attrs.frozen
class Kept:
    """The record of an incarnation a retry replaced, as its address's
    history keeps it: its status then, and when it was replaced."""

    incarnation: int
    process: str
    status: str
    record: InstanceRecord
    replaced: float

    def to_stored(self) -> dict[str, Any]:
        """The map the history row holds for it."""
        return {
            "inc": self.incarnation,
            "process": self.process,
            "status": self.status,
            "at": self.replaced,
            "record": self.record.to_stored(),
        }

    @classmethod
    def from_stored(cls, value: Any) -> Kept | None:
        """The kept record a stored map holds; None if it is not one."""
        if not isinstance(value, dict):
            return None
        inc, process, status = value.get("inc"), value.get("process"), value.get("status")
        at = value.get("at")
        if not (
            isinstance(inc, int)
            and isinstance(process, str)
            and isinstance(status, str)
            and isinstance(at, (int, float))
            and not isinstance(at, bool)
        ):
            return None
        try:
            record = InstanceRecord.from_stored(value.get("record"))
        except ValueError:  # (RecordShapeError: not a record)
            return None
        return cls(inc, process, status, record, float(at))


def read_kept(r: Reader, iid: bytes) -> tuple[int, list[Kept]]:
    """The version of ``iid``'s history row (0: none) and the records it
    keeps, oldest first. An entry that does not read is left out (a retry
    writes the row again without it)."""
    key = _protocol.history_key(iid)
    for row in r.states(key, 1):
        if row.key == key:
            value = row.value if isinstance(row.value, list) else []
            kept = [k for k in map(Kept.from_stored, value) if k is not None]
            return row.version, kept
    return 0, []


@attrs.frozen
class RetryPlan:
    """What a retry read: the incarnation it replaces and the history it
    adds to, and each failed descendant it resets (children first), each
    with its own history."""

    row: InstanceRow
    kept: tuple[int, list[Kept]]
    resets: list[tuple[InstanceRow, tuple[int, list[Kept]]]]


def read_for_retry(r: Reader, iid: bytes) -> tuple[RetryPlan | None, int]:
    """The plan of a retry of ``iid``, or None if there is no instance (and
    then the last incarnation a cleanup removed there, 0 if none).

    Raises:
        JournalCorrupt: a record it reads does not decode.
    """
    row, floor = _protocol.read_for_start(r, iid)
    if row is None:
        return None, floor
    resets: list[tuple[InstanceRow, tuple[int, list[Kept]]]] = []
    if row.status in RETRIED:
        _failed_descendants(r, row, resets, {iid})
    return RetryPlan(row, read_kept(r, iid), resets), 0


def _failed_descendants(
    r: Reader,
    row: InstanceRow,
    into: list[tuple[InstanceRow, tuple[int, list[Kept]]]],
    seen: set[bytes],
) -> None:
    """Add to ``into`` the failed children ``row``'s last run named, each
    after its own failed descendants."""
    for address in children_named(r.entries(row.iid, row.record.run)):
        iid = instance_id(address)
        if iid in seen:
            continue
        seen.add(iid)
        child = r.instance(iid)
        if child is None or child.record.parent != row.address or child.status != "failed":
            continue  # completed ones give their result again; cancelled ones start afresh
        _failed_descendants(r, child, into, seen)
        into.append((child, read_kept(r, iid)))


def refusal(address: str, plan: RetryPlan) -> str | None:
    """Why the instance of ``plan`` cannot be retried, as a message that
    says what to do instead; None if it can."""
    row = plan.row
    status = row.status
    cannot = f"cannot retry {address!r}"
    if row.record.parent:
        return (
            f"{cannot}: it is a child of {row.record.parent!r}, whose run decides its "
            f"children; retry {row.record.parent!r} instead (its failed children start afresh)"
        )
    if status in RETRIED:
        return None
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
) -> _protocol.Start:
    """The retry of ``plan`` (a failed or cancelled instance, no child's):
    a new incarnation, running, with the params it had and ``input`` (None:
    the input it had), over exactly the incarnation read; the replaced
    record kept in the address's history; each failed descendant reset.

    Invariant: it commits only over what it read (the instance, each reset
    descendant and each history row at the version read), else it fails with
    `Conflict` (a reason in `_protocol.START_RACED`, or ``"state"``) and
    writes nothing.

    Raises:
        EncodeError: a record or the input holds a value that cannot be stored.
    """
    row = plan.row
    record = row.record
    start = _protocol.start_txn(
        row.iid,
        address=row.address,
        process=row.process,
        params=record.params,
        input=dict(record.input or {}) if input is None else input,
        parent=None,
        previous=row,
        now=now,
        max_payload=max_payload,
        trace=trace,
        encoded_input=encoded_input,
    )
    txn = start.txn
    _keep(txn, row, plan.kept, now)
    for child, kept in plan.resets:  # each failed
        reset(txn, child, kept, now)
    return start


def reset(txn: Txn, child: InstanceRow, kept: tuple[int, list[Kept]], now: float) -> None:
    """Into ``txn``: remove ``child`` (on condition that it is as read),
    keeping its record in its address's history, so that the next start
    there (its parent's call, run again) makes the next incarnation."""
    txn.require(child.iid, frozenset({child.status}), incarnation=child.record.incarnation)
    txn.delete_instance(child.iid)
    txn.put_state(_protocol.floor_key(child.iid), child.record.incarnation)
    _keep(txn, child, kept, now)


def _keep(txn: Txn, row: InstanceRow, kept: tuple[int, list[Kept]], now: float) -> None:
    """Into ``txn``: add ``row``'s record to its history (the latest
    `KEPT_INCARNATIONS`), on condition that the row is at the version read."""
    version, entries = kept
    key = _protocol.history_key(row.iid)
    entries = [*entries, Kept(row.record.incarnation, row.process, row.status, row.record, now)]
    txn.expect_state(key, version)
    txn.put_state(key, [k.to_stored() for k in entries[-KEPT_INCARNATIONS:]])


# -- the runtime's half ----------------------------------------------------------------


def _in_doubt(system: SystemAPI, iid: bytes) -> None:
    """A new incarnation's commit whose outcome was not learned: if it is
    written, it runs once the journal answers."""
    system.registry.spawn_system_task(system.registry.reload_when_back, iid)


@attrs.define
class _Flight:
    """A retry under way on one system: those that come meanwhile share its outcome."""

    done: trio.Event = attrs.Factory(trio.Event)
    handle: Handle[Any] | None = None


# system -> instance id -> the retry of it under way there
_FLIGHTS: weakref.WeakKeyDictionary[SystemAPI, dict[bytes, _Flight]] = weakref.WeakKeyDictionary()


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
    flights = _FLIGHTS.setdefault(system, {})
    while (flight := flights.get(iid)) is not None:
        await flight.done.wait()
        if flight.handle is not None:
            return flight.handle
    flights[iid] = flight = _Flight()
    try:
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
        row = plan.row
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
            await commit_through(system.journal, start.txn, lambda _: _in_doubt(system, iid))
        except Conflict as exc:
            if exc.reason not in _RACED:
                raise
            replacing = row.record.incarnation
            continue
        break
    record = start.record
    for child, _ in plan.resets:
        system.statuses.changed(child.iid)
    await system.lifecycle.run_started(iid, address, proc, record)
    system.statuses.changed(iid)
    return Handle._create(system, iid, address, record.incarnation)
