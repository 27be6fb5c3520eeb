"""`Txn`, the write transaction every journal applies: its preconditions,
its operations (each a tuple whose first item is one of the codes below),
and the check of its preconditions that single-owner journals share."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ._codec import encode
from ._reading import corrupt, decode_record
from ._records import InstanceRecord
from ._states import StateOps
from ._statuses import STATUS_CODE, STATUS_NAME
from .errors import Conflict, EncodeError

__all__ = [
    "ABSENT",
    "MAX_ADDRESS_BYTES",
    "Txn",
    "check_fresh_cursors",
    "check_requires",
    "due_us",
    "stored_incarnation",
]

# Invariant: an instance's address and its process template are each at most
# this many bytes of utf-8, so an instance record's header (both of them)
# always fits a journal's length field (LMDB's is 2 bytes). `Txn.put_instance`
# checks it; the runtime checks addresses before it builds a transaction.
MAX_ADDRESS_BYTES = 16 * 1024


def _refuse_sizes(address: str, process: str) -> None:
    """Raise `EncodeError` for an address or process template over
    `MAX_ADDRESS_BYTES` (called once one of them is)."""
    for what, name in (("address", address), ("process template", process)):
        size = len(name.encode())
        if size > MAX_ADDRESS_BYTES:
            raise EncodeError(
                f"the instance's {what} is {size} bytes, over the journal's limit of "
                f"{MAX_ADDRESS_BYTES} (MAX_ADDRESS_BYTES); use short ids in addresses "
                "and put the data in the input",
                path=what,
                value_type="str",
            )


@functools.cache  # every send requires one of a few sets
def _codes(statuses: frozenset[str]) -> frozenset[int]:
    """Status names -> their codes, for Txn.require."""
    return frozenset(STATUS_CODE[s] for s in statuses)


# In a precondition's status codes: "or there is no instance" (no status has
# this code). `Txn.require_absent` requires exactly this.
ABSENT = 0
_ABSENT_ONLY = frozenset({ABSENT})


# Operation codes of a Txn. Each op is a tuple whose first item is the code.
PUT_INSTANCE = 1  # (op, iid, status_code, process, address, record_bytes)
DELETE_INSTANCE = 2  # (op, iid)  -- the instance and every record it owns
PUT_LOG = 3  # (op, iid, run, seq, entry_bytes)
DROP_LOG = 4  # (op, iid, run)
APPEND_MESSAGE = 5  # (op, iid, message_bytes) -> result: the message's seq
TAKE_MESSAGE = 6  # (op, iid, seq)
ADD_TIMER = 7  # (op, iid, run, seq, due_us)
CANCEL_TIMER = 8  # (op, iid, run, seq)
APPEND_STREAM = 9  # (op, iid, value_bytes) -> result: the value's index
SET_CURSOR = 10  # (op, iid, consumer, position)
SET_STATUS = 11  # (op, iid, status_code)  -- status only, record kept
DELETE_CURSOR = 12  # (op, iid, consumer)


def due_us(due: float) -> int:
    """Epoch seconds as the integer microseconds journals store timers under."""
    return max(0, round(due * 1_000_000))


@attrs.define(slots=True)
class Txn(StateOps):
    """A write transaction: preconditions, then operations, applied atomically.

    Every method encodes its values at once, so a bad value raises
    `EncodeError` here and the journal never sees the transaction. The state
    row writes (`put_state`, `delete_state`) come from its base `StateOps`.
    """

    ops: list[tuple[Any, ...]] = attrs.field(factory=list)
    # The parts many transactions never use start as a shared empty tuple
    # and become a list at their first entry: a Txn is made per send, and
    # each live instance holds one.
    # (iid, allowed status codes or None for "any existing", incarnation or
    # None for "any"); codes holding ABSENT also accept no instance at all
    requires: Sequence[tuple[bytes, frozenset[int] | None, int | None]] = ()
    # (iid, epoch): this node must still own the instance at that epoch
    fences: Sequence[tuple[bytes, int]] = ()
    results: int = 0  # how many ops give a result (appends)
    # (state key, version): see `expect_state`
    expects: Sequence[tuple[str, int]] = ()
    # (iid, consumer): that cursor must not exist (see `require_no_cursor`)
    fresh_cursors: Sequence[tuple[bytes, str]] = ()
    # (iid, node): tell that node, once this commits, that iid has new mail
    wakes: Sequence[tuple[bytes, str]] = ()
    # how many of ``requires`` are a start's compare-and-set (`require_absent`,
    # or `require` with an incarnation): see `Txn.must_wait`
    starts: int = 0
    # Its appends' numbers are handed on once it commits (a message to a live
    # receiver): its caller waits for them, whatever the durability.
    routed: bool = False
    # The writer's own ordered sequence of transactions this one belongs to
    # (an instance's id, for its own writes), or None: see `Chain`.
    chain: bytes | None = None
    # It removes instances and writes only small state rows beside them (a
    # cleanup and its incarnation floors): on a full map it may use the room
    # kept for freeing (see storage._lmdb._writer).
    frees: bool = False
    # The instance this transaction creates and claims for the committing
    # node in the same commit (see `claim_created`), or None.
    claims: bytes | None = None
    # Nobody waits for its commit ("async" durability's acknowledgment, a
    # submitted or deferred write). Set by `SimulatedJournal`, whose checker
    # allows an acknowledged write lost only after such a one failed.
    unawaited: bool = False
    # What its committer does with its results once it commits (hand a
    # message to its live receiver): called once, by the journal as soon as
    # it learns the outcome, before it wakes the committer (so the receiver
    # runs in the same scheduling round as the sender). Every journal's
    # `commit` and `submit` hands the results on so (`hand_on`).
    then: Callable[[list[int]], None] | None = None
    # What its committer does if it may never learn the outcome: called
    # (once, with this transaction) by the journal's `commit` when the
    # committer is cancelled while the transaction may be written, or the
    # outcome is unknown (`CommitOutcomeUnknown`), before the error goes on
    # (`doubt`). It has what follows done from the journal once it answers:
    # a receiver reads its mailbox again, a started instance is loaded.
    # A field, not a wrapper around each commit: a coroutine frame per
    # commit costs two calls of every send and six of every start.
    in_doubt: Callable[[Txn], None] | None = None

    def __bool__(self) -> bool:
        return bool(self.ops)

    def hand_on(self, outcome: list[int] | BaseException) -> list[int] | BaseException:
        """Run ``then`` (once) with the results of this transaction, which
        committed with ``outcome``; return what its committer gets: the
        outcome, or what ``then`` raised (the transaction stays committed).
        A failed transaction drops ``then``: nothing was written to hand on."""
        then, self.then = self.then, None
        if then is None or isinstance(outcome, BaseException):
            return outcome
        try:
            then(outcome)
        except Exception as exc:  # noqa: BLE001 - its committer learns of it, as it would have
            return exc
        return outcome

    def doubt(self) -> None:
        """Its committer will not learn whether it was written: run
        ``in_doubt`` (once; see the field). Called by journals' `commit`."""
        in_doubt, self.in_doubt = self.in_doubt, None
        if in_doubt is not None:
            in_doubt(self)

    def receivers(self) -> set[bytes]:
        """The instances this transaction appends messages to."""
        return {op[1] for op in self.ops if op[0] == APPEND_MESSAGE}

    def require(
        self, iid: bytes, statuses: frozenset[str] | None = None, *, incarnation: int | None = None
    ) -> None:
        """Fail the whole transaction with `Conflict` unless the instance
        exists (and, if given, has one of ``statuses``, and is incarnation
        ``incarnation``) when it is applied."""
        codes = None
        if statuses is not None:
            statuses = frozenset(statuses)  # (no copy of a frozenset)
            codes = _codes(statuses)
        if incarnation is not None:
            self.starts += 1
        # A list of its own from the first entry (see ``requires``); written
        # out here and in `require_absent`, not called: every send requires
        # its receiver, every start its address.
        if isinstance(self.requires, list):  # (send_many requires thousands)
            self.requires.append((iid, codes, incarnation))
        else:
            self.requires = [(iid, codes, incarnation)]

    def require_absent(self, iid: bytes) -> None:
        """Fail the whole transaction with `Conflict` (reason ``"exists"``)
        if the instance exists when it is applied.

        With `require` and its ``incarnation``, this is a start's
        compare-and-set: a start commits only over what it read (nothing, or
        the incarnation it replaces), so of two starts that read the same,
        one commits and the other learns of the winner, on every journal,
        however many nodes share it."""
        self.starts += 1
        if isinstance(self.requires, list):  # (as in `require`)
            self.requires.append((iid, _ABSENT_ONLY, None))
        else:
            self.requires = [(iid, _ABSENT_ONLY, None)]

    def must_wait(self, shared: bool) -> bool:
        """Whether a caller must learn this transaction's outcome before it
        goes on, whatever the journal's durability: it has preconditions
        that can fail, or appends whose numbers the caller routes (`routed`:
        a message is handed to its live receiver by number). On a journal with one
        owner (``shared`` False) a start's compare-and-set cannot fail: that
        owner makes one start of an address at a time and nobody else
        writes, so it is checked (and would write nothing if it failed) but
        need not be awaited."""
        if self.expects or self.routed or self.claims is not None:
            return True
        if shared:
            return bool(self.requires)
        return len(self.requires) > self.starts

    def claim_created(self, iid: bytes) -> int:
        """Claim the instance this transaction creates at ``iid`` (after
        `require_absent`) for the node that commits it, in the same commit,
        as `Journal.claim` would just after it; the commit's results hold
        its fencing epoch at the index returned here. Call it after the
        transaction's appends: the epoch is its last result.

        A shared journal draws the epoch as a claim does (a new one, never
        given before); a single-owner one gives 0, as its `claim` does. Only
        journals that do not read at once (`Journal.reads_at_once` False)
        are given one: the runtime claims after the commit on the others
        (the LMDB journal does not know this field).
        """
        assert self.claims is None, "a transaction claims one instance it creates"
        self.claims = iid
        return self._result_slot()

    def require_no_cursor(self, iid: bytes, consumer: str) -> None:
        """Fail the whole transaction with `Conflict` (reason ``"cursor"``)
        if instance ``iid`` has a cursor named ``consumer`` when it is
        applied (a send key, say, that the transaction sets: of two
        transactions that set it, on any node, one commits). ``iid`` must
        also be named by `require` (whose row lock makes the check atomic on
        a shared journal)."""
        self.fresh_cursors = [*self.fresh_cursors, (iid, consumer)]

    def fence(self, iid: bytes, epoch: int) -> None:
        """Fail the whole transaction with `Conflict` (reason ``"epoch"``)
        unless this node still owns the instance at ``epoch`` (see
        `Journal.claim`). Journals with a single owner accept every fence."""
        self.fences = [*self.fences, (iid, epoch)]

    def wake(self, iid: bytes, node: str) -> None:
        """On a journal shared between nodes, tell ``node`` once this commits
        (and only if it does) that ``iid`` has new mail, as an append to an
        instance that node owns does (`Journal.on_mail`); for mail under an
        id no node owns. Single-owner journals ignore it."""
        self.wakes = [*self.wakes, (iid, node)]

    def put_instance(
        self, iid: bytes, *, address: str, process: str, status: str, record: InstanceRecord
    ) -> None:
        """Create or replace the instance's record and index it under ``status``.

        Raises:
            EncodeError: the address or template is over `MAX_ADDRESS_BYTES`.
        """
        if len(address.encode()) > MAX_ADDRESS_BYTES or len(process.encode()) > MAX_ADDRESS_BYTES:
            _refuse_sizes(address, process)
        encoded = encode(record.to_stored(), what="record")
        self.ops.append((PUT_INSTANCE, iid, STATUS_CODE[status], process, address, encoded))

    def put_instance_encoded(
        self, iid: bytes, *, address: str, process: str, status: str, record: bytes
    ) -> None:
        """`put_instance` with a record already encoded by `storage.encode`."""
        if len(address.encode()) > MAX_ADDRESS_BYTES or len(process.encode()) > MAX_ADDRESS_BYTES:
            _refuse_sizes(address, process)
        self.ops.append((PUT_INSTANCE, iid, STATUS_CODE[status], process, address, record))

    def set_status(self, iid: bytes, status: str) -> None:
        """Change only the status (and its index entry) of an existing instance."""
        self.ops.append((SET_STATUS, iid, STATUS_CODE[status]))

    def delete_instance(self, iid: bytes) -> None:
        """Remove the instance and everything it owns: log, mailbox, timers,
        stream, cursors and index entries."""
        self.ops.append((DELETE_INSTANCE, iid))

    def put_log(self, iid: bytes, run: int, seq: int, entry: Any) -> None:
        """Write (or overwrite) effect ``seq`` of run ``run``."""
        self.ops.append((PUT_LOG, iid, run, seq, encode(entry, what="log entry")))

    def put_log_encoded(self, iid: bytes, run: int, seq: int, entry: bytes) -> None:
        """`put_log` with an entry already encoded."""
        self.ops.append((PUT_LOG, iid, run, seq, entry))

    def drop_log(self, iid: bytes, run: int) -> None:
        """Delete every log entry of run ``run``."""
        self.ops.append((DROP_LOG, iid, run))

    def append_message(self, iid: bytes, message: Any) -> int:
        """Append to the mailbox; the commit's results hold the new message's
        sequence number at the index returned here. A message is never
        written over another: if the number is taken (a damaged counter),
        the transaction fails alone with `JournalCorrupt`."""
        self.ops.append((APPEND_MESSAGE, iid, encode(message, what="payload")))
        self.results += 1  # (`_result_slot`, written out: every send appends)
        return self.results - 1

    def take_message(self, iid: bytes, seq: int) -> None:
        """Remove message ``seq`` from the mailbox (a missing one is ignored)."""
        self.ops.append((TAKE_MESSAGE, iid, seq))

    def add_timer(self, iid: bytes, run: int, seq: int, due: float) -> None:
        """Add the timer of effect ``seq`` of run ``run``, due at epoch ``due``."""
        self.ops.append((ADD_TIMER, iid, run, seq, due_us(due)))

    def cancel_timer(self, iid: bytes, run: int, seq: int) -> None:
        """Remove that timer (a missing one is ignored)."""
        self.ops.append((CANCEL_TIMER, iid, run, seq))

    def append_stream(self, iid: bytes, value: Any) -> int:
        """Append to the stream; results hold the value's index (from 0)."""
        self.ops.append((APPEND_STREAM, iid, encode(value, what="emitted value")))
        self.results += 1
        return self.results - 1

    def set_cursor(self, iid: bytes, consumer: str, position: int) -> None:
        """Record that ``consumer`` has consumed every value before ``position``."""
        self.ops.append((SET_CURSOR, iid, consumer, position))

    def delete_cursor(self, iid: bytes, consumer: str) -> None:
        """Forget ``consumer``'s cursor (a missing one is ignored): the name
        starts afresh, as a new consumer, next time."""
        self.ops.append((DELETE_CURSOR, iid, consumer))

    def expect_state(self, key: str, version: int) -> None:
        """Fail the whole transaction with `Conflict` (reason ``"state"``)
        unless state row ``key`` (see `storage._states`) is at ``version``
        when it is applied (0: the row must be absent)."""
        self.expects = [*self.expects, (key, version)]

    def extend(self, other: Txn) -> int:
        """Add everything of ``other`` after what this holds, as one
        transaction; returns how many results come before ``other``'s, so
        ``other``'s slot ``k`` is slot ``offset + k`` of this one."""
        offset = self.results
        self.ops.extend(other.ops)
        if isinstance(self.requires, list):
            self.requires.extend(other.requires)
        elif other.requires:
            self.requires = list(other.requires)  # a list of its own, not other's
        if other.fences:
            self.fences = [*self.fences, *other.fences]
        if other.expects:
            self.expects = [*self.expects, *other.expects]
        if other.fresh_cursors:
            self.fresh_cursors = [*self.fresh_cursors, *other.fresh_cursors]
        if other.wakes:
            self.wakes = [*self.wakes, *other.wakes]
        if other.claims is not None:  # (its epoch stays the last result)
            assert self.claims is None, "a transaction claims one instance it creates"
            self.claims = other.claims
        self.starts += other.starts
        self.routed = self.routed or other.routed
        self.results += other.results
        return offset

    def _result_slot(self) -> int:
        self.results += 1
        return self.results - 1


def check_requires(
    requires: Sequence[tuple[bytes, frozenset[int] | None, int | None]],
    status_of: Callable[[bytes], int | None],
    incarnation_of: Callable[[bytes], int] | None = None,
) -> None:  # Single-owner journals ignore Txn.fences: there is no other owner.
    """Raise `Conflict` for the first precondition that does not hold.

    ``incarnation_of`` reads an existing instance's incarnation; it is
    called only for a precondition that names one (a start over an ended
    incarnation), so the common checks read statuses alone."""
    for iid, codes, incarnation in requires:
        code = status_of(iid)
        if code is None:
            if codes is not None and ABSENT in codes:
                continue
            raise Conflict(f"no instance with id {iid.hex()}", reason="missing")
        if codes is not None and code not in codes:
            name = STATUS_NAME.get(code, "unknown")
            reason = "exists" if codes is _ABSENT_ONLY else "status"
            raise Conflict(f"instance {iid.hex()} is {name}", reason=reason, status=name)
        if incarnation is not None:
            assert incarnation_of is not None, "this journal cannot check incarnations"
            found = incarnation_of(iid)
            if found != incarnation:
                name = STATUS_NAME.get(code, "unknown")
                raise Conflict(
                    f"instance {iid.hex()} is incarnation {found}, not {incarnation}",
                    reason="incarnation",
                    status=name,
                )


def check_fresh_cursors(
    fresh: Sequence[tuple[bytes, str]], has_cursor: Callable[[bytes, str], bool]
) -> None:
    """Raise `Conflict` (reason ``"cursor"``) for the first cursor of
    ``fresh`` (`Txn.require_no_cursor`) that exists."""
    for iid, consumer in fresh:
        if has_cursor(iid, consumer):
            raise Conflict(
                f"instance {iid.hex()} has a cursor named {consumer!r} already", reason="cursor"
            )


def stored_incarnation(record: bytes, iid: bytes) -> int:
    """The incarnation of an instance's stored record (`JournalCorrupt` if
    it does not read)."""
    value = decode_record(record, "instances", iid)
    incarnation = value.get("inc", 1) if isinstance(value, dict) else None
    if not isinstance(incarnation, int):
        raise corrupt("instances", iid, f"has the wrong shape: incarnation {incarnation!r}")
    return incarnation
