"""The journal transactions that change an instance's life, built in one
place for the runtime (`ActorSystem`) and the command line alike (not named
"protocol": in `actors` that is a typing Protocol, as in `_interfaces`).

Each builder takes what the caller read (rows, timers) and the time, and
returns a `storage.Txn` plus what the caller needs once it commits (which
result slot holds a message's sequence number, which end notices to route).
Builders never read or commit themselves: the runtime commits with its
fences and routes what it committed to live instances; the CLI commits to a
journal no system holds. So the two cannot drift apart on what a start, a
send, a cancel or a cleanup writes.

The transactions that add messages are in `_message_txns`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from storage import (
    UNFINISHED_STATUSES,
    InstanceRecord,
    InstanceRow,
    Reader,
    TimerRow,
    Txn,
    decode,
    encode,
    instance_id,
)

from ._effects import end_signal
from ._failures import ErrorRecord
from ._identity import index_instance
from ._message_txns import Notice, add_message

__all__ = [
    "START_RACED",
    "STUCK",
    "Cancel",
    "Start",
    "abandon_compensation_txn",
    "cancel_txn",
    "cleanup_txn",
    "dead_key",
    "end_notice",
    "end_of_run",
    "end_payload",
    "floor_key",
    "floor_of",
    "history_key",
    "next_run",
    "read_for_start",
    "resume_compensation_txn",
    "start_txn",
]


@attrs.frozen
class Start:
    """A start's transaction, the record it writes (decoded from what was
    encoded, never the caller's objects), and the accompanying message for
    ``signal_with_start`` (None without one)."""

    txn: Txn
    record: InstanceRecord
    message: Notice | None


@attrs.frozen
class Cancel:
    """One instance to cancel: its row and timers as read, and why.

    ``epoch`` fences the write on a shared journal (`Journal.claim`); None
    writes unfenced (single-owner journals, the CLI). ``states``: state rows
    that go with it (a queued instance's waiting entry, see `_queue_state.waiting_rows`).
    ``compensate``: a live instance with saga compensations pending runs
    them first (see `cancel_txn`); the caller has checked that it has some.
    """

    row: InstanceRow
    timers: Sequence[TimerRow]
    reason: str
    epoch: int | None = None
    states: Sequence[str] = ()
    compensate: bool = False


# -- start ---------------------------------------------------------------------------

# `Conflict.reason`s of a start that lost a race: the instance it read is not
# what is there now (another start or an end committed first). Read again.
START_RACED = frozenset({"exists", "incarnation", "status", "missing"})


def start_txn(
    iid: bytes,
    *,
    address: str,
    process: str,
    params: Sequence[Any],
    input: dict[str, Any],
    parent: str | None,
    previous: InstanceRow | None,
    now: float,
    floor: int = 0,
    message: tuple[str, Any] | None = None,
    max_payload: int | None = None,
    child: dict[str, Any] | None = None,
    trace: str | None = None,
    status: str = "running",
    encoded_input: bytes | None = None,
    fields: dict[str, Any] | None = None,
    index: bool = True,
    fresh: bool = False,
) -> Start:
    """Record a new instance (a new incarnation over a cancelled
    ``previous``, or the first after a cleanup that left ``floor``: see
    `read_for_start`), with a first message for ``signal_with_start``; for a
    child of ``parent``, ``child`` holds its supervision fields (``restart``
    type, ``awaited``, ``restarts`` history). ``encoded_input`` is
    ``input``'s encoding, if the caller made it already; ``fields``, other
    record fields the new incarnation starts with (a fork's kept
    compensations, see `_fork`). ``index``: put it in the identity index
    (`_identity`), which a process that listens to no signal may skip.
    ``fresh``: a start over nothing that read nothing (see "A fresh start"
    in `_system._lifecycle`): it also requires the address's floor row
    absent, so that it commits only as the first incarnation.

    Invariant: an address has one incarnation at a time; a new one replaces
    a cancelled one whole (log, mailbox, timers, stream) and counts on from
    its incarnation number.
    """
    # The process runs on what was stored, never on the caller's objects:
    # its input is a decoded copy of the encoding (params are strs).
    if input:
        stored_input = decode(encoded_input or encode(input, what="input"))
    else:
        stored_input = {}  # what an empty map decodes to, without the codec
    record = InstanceRecord.new(
        params=list(params),
        input=stored_input,
        run=0,
        incarnation=(previous.record.incarnation if previous is not None else floor) + 1,
        created=now,
        updated=now,
        parent=parent,
        trace=trace,  # the starter's traceparent
        **(child or {}),
        **(fields or {}),
    )
    stored = encode(record.to_stored(), what="record")
    txn = Txn()
    # Invariant: a start commits only over what it read (nothing, or the
    # ended incarnation it replaces), on every journal; else it fails with
    # `Conflict` (a reason in START_RACED) and writes nothing, so a start
    # racing another (a second node, the command line) never overwrites or
    # deletes what the other's acknowledged.
    if previous is not None:
        txn.require(iid, frozenset({previous.status}), incarnation=previous.record.incarnation)
        txn.delete_instance(iid)
    else:
        txn.require_absent(iid)
        if fresh:  # (the key is `floor_key(iid)`'s, written out: a start pays no call for it)
            txn.expect_state(f"floor/{iid.hex()}", 0)
    txn.put_instance_encoded(iid, address=address, process=process, status=status, record=stored)
    # Invariant: an instance is in the identity index from the transaction
    # that makes it (see `_identity`), so a signal routed by identity
    # either reaches it or committed before it.
    if index:
        index_instance(txn, iid, process, record.params)
    # The first of the instance's own writes (storage.Chain): acknowledged
    # and then lost ("async"), it takes its run's later writes down with it.
    txn.chain = iid
    notice = None
    if message is not None:
        notice = add_message(
            txn, iid, message[0], message[1], now, max_payload=max_payload, trace=trace
        )
    return Start(txn, record, notice)


# -- ends ----------------------------------------------------------------------------


def end_payload(status: str, record: InstanceRecord) -> dict[str, Any]:
    """What an awaited child's end message carries."""
    payload: dict[str, Any] = {"status": status}
    if status == "completed":
        payload["result"] = record.result
    elif status == "failed":
        payload["error"] = record.error
    else:
        payload["reason"] = record.reason
    return payload


def end_notice(
    txn: Txn, address: str, record: InstanceRecord, status: str, now: float
) -> Notice | None:
    """Add the end message of an awaited child to ``txn`` (in the same
    transaction as its terminal record, so the parent misses nothing);
    None for an instance no parent awaits."""
    parent = record.parent
    if not parent or not record.awaited:
        return None
    name, payload = end_signal(address).name, end_payload(status, record)
    return add_message(txn, instance_id(parent), name, payload, now)


def end_of_run(
    txn: Txn,
    iid: bytes,
    *,
    address: str,
    record: InstanceRecord,
    status: str,
    timers: Iterable[tuple[int, int]],
    now: float,
) -> Notice | None:
    """Into ``txn``, beside the terminal record the caller put (the caller
    handles a record that cannot be encoded): cancel the run's ``timers``
    (``(run, seq)`` pairs) and add the end message to an awaiting parent.

    Invariant: an end is recorded in one transaction with everything that
    goes with it, so no timer outlives its run and no awaiting parent
    misses the end of its child.
    """
    for run, seq in timers:
        txn.cancel_timer(iid, run, seq)
    if not record.parent or not record.awaited:
        return None  # (`end_notice`'s own check, first: most runs have no parent waiting)
    return end_notice(txn, address, record, status, now)


def next_run(
    txn: Txn,
    iid: bytes,
    *,
    address: str,
    process: str,
    record: InstanceRecord,
    timers: Iterable[tuple[int, int]],
) -> InstanceRecord:
    """Into ``txn``: end the run ``record.run`` (its log dropped, its
    ``timers``, ``(run, seq)`` pairs, cancelled) and record the next one,
    running; returns the record written (``run`` one on). Used for a
    restart (from inside or outside the instance) and for continue-as-new.

    Invariant: a run's log and timers go in the transaction that records
    the next run, so a replay never reads another run's history.
    """
    run = record.run
    txn.drop_log(iid, run)
    for timer_run, seq in timers:
        txn.cancel_timer(iid, timer_run, seq)
    following = record.evolve(run=run + 1)
    txn.put_instance(iid, address=address, process=process, status="running", record=following)
    return following


def cancel_txn(cancels: Iterable[Cancel], now: float) -> tuple[Txn, list[Notice]]:
    """Record each instance as cancelled, in the order given (children before
    their parent), each on condition that it is still unfinished.

    Per instance: the cancelled record (with the reason), its timers
    removed, and the end message to its parent if one awaits it. One that
    compensates (`Cancel.compensate`) is recorded compensating instead:
    running, with the cancel as its ``failure`` and ``failure_end``
    "cancelled", as `_saga.compensate` records it, so whichever system runs
    it next runs its pending compensations, newest first, then ends it
    cancelled and tells its parent (see `Actor.main`).

    Raises:
        EncodeError: a record holds a value this process cannot encode.
    """
    txn = Txn()
    notices: list[Notice] = []
    for cancel in cancels:
        row = cancel.row
        record = row.record.evolve(reason=cancel.reason, updated=now, last_error=None, held=None)
        txn.require(row.iid, UNFINISHED_STATUSES)
        if cancel.epoch is not None:
            txn.fence(row.iid, cancel.epoch)
        for timer in cancel.timers:
            txn.cancel_timer(row.iid, timer.run, timer.seq)
        for key in cancel.states:  # a queued instance leaves its queue
            txn.delete_state(key)
        if cancel.compensate:
            record = record.evolve(
                failure=ErrorRecord.cancelled(cancel.reason).to_stored(), failure_end="cancelled"
            )
            txn.put_instance(
                row.iid,
                address=row.address,
                process=row.process,
                status="running",
                record=record,
            )
            continue
        txn.put_instance(
            row.iid, address=row.address, process=row.process, status="cancelled", record=record
        )
        notice = end_notice(txn, row.address, record, "cancelled", now)
        if notice is not None:
            notices.append(notice)
    return txn, notices


def cleanup_txn(
    victims: Iterable[tuple[bytes, int]], statuses: Iterable[str], absent: Iterable[bytes] = ()
) -> Txn:
    """Remove each instance and every record it owns, on condition that it
    still has one of ``statuses`` (finished ones: see `ActorSystem.cleanup`)
    and is the incarnation given, and that no instance is at any of
    ``absent`` (the gone parents of children removed: see `_cleanup`); keep
    its incarnation as the address's floor.

    Invariant: an address's incarnations only ever go up, cleanup or not
    (see `read_for_start`), so a step's idempotency key, which names the
    incarnation, never repeats for an address.
    """
    wanted = frozenset(statuses)
    txn = Txn(frees=True)  # a floor row is far smaller than what it replaces
    for parent in absent:
        txn.require_absent(parent)
    for iid, incarnation in victims:
        txn.require(iid, wanted, incarnation=incarnation)
        txn.delete_instance(iid)
        txn.put_state(floor_key(iid), incarnation)
        txn.delete_state(history_key(iid))  # earlier incarnations a retry kept (see _retry)
        txn.delete_state(dead_key(iid))  # messages dropped from it (see _mail)
    return txn


def floor_key(iid: bytes) -> str:
    """The state row that keeps the last incarnation a cleanup removed at
    ``iid`` (`start_txn` writes the key out for a fresh start)."""
    return f"floor/{iid.hex()}"


def history_key(iid: bytes) -> str:
    """The state row that keeps the records of the incarnations at ``iid``
    that a retry replaced (see `_retry`); a cleanup removes it with the instance."""
    return f"history/{iid.hex()}"


def dead_key(iid: bytes) -> str:
    """The state row that keeps the messages dropped from the instances at
    ``iid`` (see `_mail`); a cleanup removes it with the instance."""
    return f"dead/{iid.hex()}"


def read_for_start(r: Reader, iid: bytes) -> tuple[InstanceRow | None, int]:
    """The instance at ``iid`` as a start reads it, and, where there is
    none, the last incarnation a cleanup removed there (0 if none): a new
    start counts on from it."""
    row = r.instance(iid)
    if row is not None:
        return row, 0
    return None, floor_of(r, iid)


def floor_of(r: Reader, iid: bytes) -> int:
    """The last incarnation at ``iid`` that a cleanup removed (0 if none)."""
    key = floor_key(iid)
    for found in r.states(key, 1):
        if found.key == key and isinstance(found.value, int):
            return found.value
    return 0


# -- stuck compensations ------------------------------------------------------------

STUCK = frozenset({"compensation_stuck"})


def resume_compensation_txn(row: InstanceRow, now: float) -> Txn:
    """Put a ``compensation_stuck`` instance back to running, so that its
    next activation retries the compensation where it stopped; on condition
    that it is still stuck."""
    record = row.record.evolve(last_error=None, stuck=None, updated=now)
    txn = Txn()
    txn.require(row.iid, STUCK)
    txn.put_instance(
        row.iid, address=row.address, process=row.process, status="running", record=record
    )
    return txn


def abandon_compensation_txn(row: InstanceRow, now: float) -> Txn:
    """End a ``compensation_stuck`` instance as failed, keeping its record
    (which compensations ran, which did not, and why); on condition that it
    is still stuck."""
    record = row.record.evolve(error=row.record.failure, abandoned=True, updated=now)
    txn = Txn()
    txn.require(row.iid, STUCK)
    txn.put_instance(
        row.iid, address=row.address, process=row.process, status="failed", record=record
    )
    return txn
