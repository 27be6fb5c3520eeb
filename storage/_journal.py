"""The `Journal` interface: the one boundary between the runtime and a store.

A journal keeps, per instance (a 16-byte id, see `instance_id`):

- a record (address, process template, status, and the runtime's snapshot);
- an effect log per run, keyed by effect number, dropped as a whole when a run
  ends with continue-as-new;
- a mailbox of unread messages in arrival order (appended by anyone, taken by
  the owner);
- durable timers, indexed by due time for the whole journal;
- an emitted-value stream and named consumer cursors into it;
- a status index for queries.

Writes go through a `Txn`: a list of operations applied atomically (all or
nothing) after its preconditions hold. Values are encoded when the operation
is added, so an `EncodeError` happens at the call, before anything is
written. Journals group many concurrent transactions into one commit.

Reads go through a `Reader` (``with journal.reader() as r:``), a consistent
snapshot that must not be held across an ``await``. ``await journal.read(fn)``
runs ``fn(reader)`` without blocking the event loop for a backend whose reads
are remote.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import attrs
import trio

from ._codec import encode
from ._records import InstanceRecord, LogEntry
from ._states import StateOps, StateRow
from .errors import Conflict, EncodeError, JournalCorrupt

__all__ = [
    "Journal",
    "Reader",
    "Txn",
    "Ticket",
    "InstanceRow",
    "TimerRow",
    "CorruptRecord",
    "STATUSES",
    "LIVE_STATUSES",
    "TERMINAL_STATUSES",
    "UNFINISHED_STATUSES",
    "STATUS_WORDS",
    "instance_id",
    "MAX_ADDRESS_BYTES",
]

# Invariant: a status's code never changes (codes are stored in journals).
STATUSES: tuple[str, ...] = (
    "running",
    "suspended",
    "completed",
    "failed",
    "cancelled",
    "compensation_stuck",
    "corrupt",
    "queued",  # waiting in a queue for a slot (see actors._queues); not yet run
)
STATUS_CODE: dict[str, int] = {name: i + 1 for i, name in enumerate(STATUSES)}
STATUS_NAME: dict[int, str] = {i + 1: name for i, name in enumerate(STATUSES)}
# Live: the instance runs (or waits) and takes messages.
LIVE_STATUSES: frozenset[str] = frozenset({"running", "suspended"})
# Terminal: the instance ended and never runs again (a cancelled address may
# be started afresh, as a new incarnation).
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
# Unfinished: live, queued, or parked until compensation is resumed or
# abandoned; what a cancel can still end. (Queued is not live: it has not
# run yet and takes no messages.)
UNFINISHED_STATUSES: frozenset[str] = LIVE_STATUSES | {"compensation_stuck", "queued"}
# How messages say why an instance takes no more messages ("no live instance
# at 'orders/o-17' (it completed)").
STATUS_WORDS: dict[str, str] = {
    "completed": "it completed",
    "failed": "it failed",
    "cancelled": "it was cancelled",
    "compensation_stuck": "it is parked in compensation_stuck",
    "corrupt": "its records are corrupt",
    "queued": "it is queued and takes messages once it starts",
}

T = TypeVar("T")

# Invariant: an instance's address and its process template are each at most
# this many bytes of utf-8, so an instance record's header (both of them)
# always fits a journal's length field (LMDB's is 2 bytes). `Txn.put_instance`
# checks it; the runtime checks addresses before it builds a transaction.
MAX_ADDRESS_BYTES = 16 * 1024


def instance_id(address: str) -> bytes:
    """The fixed-size key of the instance at ``address``.

    A 128-bit BLAKE2b hash, so keys stay short however deep an address
    nests (LMDB keys are at most 511 bytes), every node computes the same id
    without coordination, and a collision is as likely as a random UUID's.
    """
    return hashlib.blake2b(address.encode(), digest_size=16).digest()


# status names -> their codes, for Txn.require
_CODES: dict[frozenset[str], frozenset[int]] = {}


@attrs.frozen(slots=True)
class InstanceRow:
    """An instance's record as stored: identity, status and the runtime's snapshot."""

    iid: bytes
    address: str
    process: str
    status: str
    record: InstanceRecord


@attrs.frozen(slots=True)
class CorruptRecord:
    """An instance whose record does not decode, as far as what survives tells.

    `Reader.instances` gives these (with ``corrupt=[...]``) instead of
    stopping at them. ``status`` and ``process`` come from the status index;
    ``address`` from the record's header when that still reads (else None);
    ``error`` is the `JournalCorrupt` naming the database and key.
    """

    iid: bytes
    address: str | None
    process: str
    status: str
    error: JournalCorrupt


@attrs.frozen(slots=True)
class TimerRow:
    """A durable timer: effect ``seq`` of run ``run`` of instance ``iid``, due at ``due``."""

    due: float
    iid: bytes
    run: int
    seq: int


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
    row operations (`put_state`, `delete_state`, `expect_state`) come from
    its base `StateOps`.
    """

    ops: list[tuple[Any, ...]] = attrs.field(factory=list)
    # The parts many transactions never use start as a shared empty tuple
    # and become a list at their first entry: a Txn is made per send, and
    # each live instance holds one.
    # (iid, allowed status codes or None for "any existing", message)
    requires: Sequence[tuple[bytes, frozenset[int] | None, str]] = ()
    # (iid, epoch): this node must still own the instance at that epoch
    fences: Sequence[tuple[bytes, int]] = ()
    results: int = 0  # how many ops give a result (appends)
    # (state key, version): see `StateOps.expect_state`
    expects: Sequence[tuple[str, int]] = ()
    # (iid, node): tell that node, once this commits, that iid has new mail
    wakes: Sequence[tuple[bytes, str]] = ()

    def __bool__(self) -> bool:
        return bool(self.ops)

    def require(self, iid: bytes, statuses: frozenset[str] | None = None) -> None:
        """Fail the whole transaction with `Conflict` unless the instance
        exists (and, if given, has one of ``statuses``) when it is applied."""
        codes = None
        if statuses is not None:
            statuses = frozenset(statuses)  # (no copy of a frozenset)
            codes = _CODES.get(statuses)  # every send requires one of a few sets
            if codes is None:
                codes = _CODES[statuses] = frozenset(STATUS_CODE[s] for s in statuses)
        entry = (iid, codes, "")
        if isinstance(self.requires, list):  # (send_many requires thousands)
            self.requires.append(entry)
        else:
            self.requires = [entry]

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
        self.put_instance_encoded(
            iid, address=address, process=process, status=status,
            record=encode(record.to_stored(), what="record"),
        )  # fmt: skip

    def put_instance_encoded(
        self, iid: bytes, *, address: str, process: str, status: str, record: bytes
    ) -> None:
        """`put_instance` with a record already encoded by `storage.encode`."""
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
        return self._result_slot()

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
        return self._result_slot()

    def set_cursor(self, iid: bytes, consumer: str, position: int) -> None:
        """Record that ``consumer`` has consumed every value before ``position``."""
        self.ops.append((SET_CURSOR, iid, consumer, position))

    def delete_cursor(self, iid: bytes, consumer: str) -> None:
        """Forget ``consumer``'s cursor (a missing one is ignored): the name
        starts afresh, as a new consumer, next time."""
        self.ops.append((DELETE_CURSOR, iid, consumer))

    def _expect(self, key: str, version: int) -> None:
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
        if other.wakes:
            self.wakes = [*self.wakes, *other.wakes]
        self.results += other.results
        return offset

    def _result_slot(self) -> int:
        self.results += 1
        return self.results - 1


class Ticket(abc.ABC):
    """A submitted transaction; ``await ticket.wait()`` for its outcome."""

    @abc.abstractmethod
    async def wait(self) -> list[int]:
        """Wait until the transaction is durable (or, for an "async" journal,
        applied), then return its results (sequence numbers from
        `Txn.append_message` / `Txn.append_stream`, in order).

        Raises:
            Conflict: a precondition did not hold; nothing was written.
            JournalFull: there was no room; nothing was written.
        """

    @property
    @abc.abstractmethod
    def done(self) -> bool:
        """Whether the outcome is known."""


class Settled(Ticket):
    """The ticket of a transaction whose outcome is known when it is made:
    its results, or the exception it failed with."""

    __slots__ = ("_outcome",)

    def __init__(self, outcome: list[int] | BaseException) -> None:
        self._outcome = outcome

    @property
    def done(self) -> bool:
        return True

    async def wait(self) -> list[int]:
        await trio.lowlevel.checkpoint()
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome


class Reader(abc.ABC):
    """A consistent read view of a journal. Never hold one across an ``await``.

    A read that meets a damaged record (bytes that do not decode, a number of
    the wrong size, with `Journal.check_shapes` a value of another shape)
    raises `JournalCorrupt` naming its database and key.
    """

    @abc.abstractmethod
    def instance(self, iid: bytes) -> InstanceRow | None:
        """The instance's row, or None."""

    @abc.abstractmethod
    def instances(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        corrupt: list[CorruptRecord] | None = None,
    ) -> Iterator[InstanceRow]:
        """Rows matching the filters (None means any), by status then id.

        A record that does not decode raises `JournalCorrupt`, which ends the
        scan; given a ``corrupt`` list, the scan instead appends a
        `CorruptRecord` for it there and goes on with the next.
        """

    @abc.abstractmethod
    def count_by_status(self) -> dict[str, int]:
        """How many instances each status has (statuses with none are left out)."""

    @abc.abstractmethod
    def log(self, iid: bytes, run: int) -> dict[int, Any]:
        """The effect log of one run: ``{seq: entry}``."""

    @abc.abstractmethod
    def entries(self, iid: bytes, run: int) -> dict[int, LogEntry]:
        """`log`, typed: each entry read and checked in one pass (an entry of
        the wrong shape is `JournalCorrupt` naming its key, whatever
        `Journal.check_shapes` says). What the runtime replays from."""

    @abc.abstractmethod
    def log_runs(self, iid: bytes) -> list[int]:
        """The runs that have log entries, ascending."""

    @abc.abstractmethod
    def mailbox(self, iid: bytes) -> list[tuple[int, Any]]:
        """Unread messages as ``(seq, message)``, oldest first."""

    def mailboxes(self, iids: list[bytes]) -> dict[bytes, list[tuple[int, Any]]]:
        """`mailbox` of each of ``iids`` (a remote journal reads them at once)."""
        return {iid: self.mailbox(iid) for iid in iids}

    @abc.abstractmethod
    def last_message_seq(self, iid: bytes) -> int:
        """The highest sequence number ever given to a message for that
        instance (0 if none): messages at or below it that are not unread
        were taken."""

    @abc.abstractmethod
    def instances_with_mail(self) -> Iterator[bytes]:
        """Ids of instances that have unread messages."""

    @abc.abstractmethod
    def timers(self, iid: bytes) -> list[TimerRow]:
        """That instance's timers, by due time."""

    @abc.abstractmethod
    def due_timers(
        self, now: float, limit: int = 1000, after: float | None = None
    ) -> list[TimerRow]:
        """Timers due at or before epoch ``now`` (and strictly after
        ``after``, if given), earliest first."""

    @abc.abstractmethod
    def next_due(self, after: float | None = None) -> float | None:
        """The earliest due time (strictly after ``after``, if given), or None."""

    @abc.abstractmethod
    def stream(self, iid: bytes, start: int = 0, limit: int = 1000) -> list[tuple[int, Any]]:
        """Emitted values from index ``start``: ``[(index, value), ...]``.

        Indexes run without a gap; a value missing below the stream's length
        raises `JournalCorrupt` naming it, so no consumer skips it unawares.
        """

    @abc.abstractmethod
    def stream_length(self, iid: bytes) -> int:
        """How many values the instance has emitted."""

    @abc.abstractmethod
    def cursors(self, iid: bytes) -> dict[str, int]:
        """Each consumer's position (index of its next value)."""

    def cursor(self, iid: bytes, consumer: str) -> int | None:
        """``consumer``'s position in that instance's stream, or None if it has none."""
        return self.cursors(iid).get(consumer)

    def states(self, prefix: str, limit: int | None = None) -> list[StateRow]:
        """State rows whose key starts with ``prefix``, by key, at most
        ``limit`` of them (see `storage._states`)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no state rows")

    @abc.abstractmethod
    def has_records(self, iid: bytes) -> bool:
        """Whether anything at all is stored for that id (record, log, mail,
        timers, stream or cursors); for checking cleanup."""


class Journal(abc.ABC):
    """A durable (or in-memory) store behind the runtime. See the module doc.

    Use it as ``async with journal:`` or let `actors.open_system` open and
    close it. ``durability`` is ``"sync"`` (an awaited commit returns once
    the data is durable) or ``"async"`` (once it is queued).
    """

    durability: str = "sync"

    check_shapes: bool = False
    """Whether reads check that instance records, log entries and messages
    have the shape the runtime writes (its fields of the types it reads), so
    that valid msgpack of another shape raises `JournalCorrupt` naming the
    database and key like bytes that do not decode. `actors.open_system` and
    the command line turn it on; a journal used on its own stores any value."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Open the store and take ownership of it.

        Raises:
            JournalLocked: another system owns it.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Drain pending writes, then release the store. Idempotent."""

    @abc.abstractmethod
    def submit(self, txn: Txn) -> Ticket:
        """Queue ``txn`` for the next commit without waiting.

        Transactions are applied in the order they were submitted.
        """

    def defer(self, txn: Txn) -> Ticket:
        """Queue ``txn`` to go with the next transaction anyone submits or
        commits, in the same commit (or at `submit_deferred`, `flush`,
        ``ticket.wait()`` or close, whichever comes first).

        For writes nobody waits for, that would otherwise start a commit of
        their own just before someone else's. Order is kept: a deferred
        transaction is applied before everything submitted after it. A
        journal that cannot hold one back submits it at once (the default).
        """
        return self.submit(txn)

    def submit_deferred(self) -> None:
        """Submit what `defer` holds back, now, without waiting."""

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        """Submit ``txn`` and wait for it, as the journal's durability says
        (or always until durable, with ``durable=True``).

        Returns:
            The results of `Txn.append_message` / `Txn.append_stream`.

        Raises:
            Conflict, JournalFull: see `Ticket.wait`; nothing was written.
        """
        ticket = self.submit(txn)
        if durable or self.durability == "sync" or txn.requires or txn.expects:
            return await ticket.wait()
        return []

    async def flush(self) -> None:
        """Wait until everything submitted so far is durable."""
        await self.submit(Txn()).wait()

    @abc.abstractmethod
    def reader(self) -> AbstractContextManager[Reader]:
        """A read view: ``with journal.reader() as r: ...``."""

    async def read(self, fn: Callable[[Reader], T]) -> T:
        """Run ``fn(reader)`` and return its result, without blocking the
        event loop for long (remote backends run it in a worker thread)."""
        with self.reader() as r:
            return fn(r)

    def describe(self) -> str:
        """A short human description for messages and the CLI."""
        return type(self).__name__

    # -- sharing one store between nodes -------------------------------------
    #
    # A journal that several systems (nodes) open at once gives each instance
    # one owner at a time. The runtime claims an instance before running it
    # and fences every write with the epoch the claim returned, so a node
    # that lost an instance (it froze past its lease, say) can never write to
    # it again. Single-owner journals (LMDB, memory) keep these defaults.

    shared: bool = False
    """Whether several nodes may open this store at once."""

    node: str | None = None
    """This journal's node name, set by `set_node` before `open`."""

    def set_node(self, node: str) -> None:
        """Name the node this journal serves (before `open`).

        Raises:
            ValueError: the journal cannot be shared between nodes.
        """
        if not self.shared:
            raise ValueError(
                f"{self.describe()} has a single owner; node= needs a journal that "
                "several nodes can share (storage.PostgresJournal)"
            )
        self.node = node

    async def claim(self, iid: bytes) -> int | None:
        """Make this node the instance's owner, if no other live node is.

        Returns the fencing epoch to pass to `Txn.fence` (bumped on every
        change of owner), or None if another live node owns it."""
        return 0

    async def orphans(self, limit: int = 1000) -> list[bytes]:
        """Live instances (running, suspended) whose owner node is gone."""
        return []

    def lease_term(self) -> int | None:
        """Which unbroken term of this node's lease holds now, or None while
        the lease is not known to be held (lost, or not confirmed within its
        timeout: the process may have been frozen). The term grows each time
        the lease is taken again after a loss; an instance claimed in an
        earlier term may belong to another node now, so what this node holds
        of it in memory is not to be trusted. Single-owner journals: 0."""
        return 0

    def on_mail(self, callback: Callable[[bytes], None]) -> None:
        """Call ``callback(iid)`` in the trio thread whenever another node
        adds a message for an instance this node owns (and, after a lost
        connection, for every owned instance with mail, since notices sent
        meanwhile are lost)."""

    def size_bytes(self) -> int | None:
        """Bytes the store occupies, when the backend can tell."""
        return None

    async def __aenter__(self) -> Journal:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def check_requires(
    requires: Sequence[tuple[bytes, frozenset[int] | None, str]],
    status_of: Callable[[bytes], int | None],
) -> None:  # Single-owner journals ignore Txn.fences: there is no other owner.
    """Raise `Conflict` for the first precondition that does not hold."""
    for iid, codes, _ in requires:
        code = status_of(iid)
        if code is None:
            raise Conflict(f"no instance with id {iid.hex()}", reason="missing")
        if codes is not None and code not in codes:
            name = STATUS_NAME.get(code, "unknown")
            raise Conflict(f"instance {iid.hex()} is {name}", reason="status", status=name)
