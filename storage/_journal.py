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

Writes go through a `Txn` (in `_txn`): a list of operations applied
atomically (all or nothing) after its preconditions hold. Values are encoded
when the operation is added, so an `EncodeError` happens at the call, before
anything is written. Journals group many concurrent transactions into one
commit. The status vocabulary is in `_statuses`; both are re-exported here,
where the backends read them (``_journal.PUT_LOG``, ``STATUS_CODE``, ...).

Reads go through a `Reader` (``with journal.reader() as r:``), a consistent
snapshot that must not be held across an ``await``. ``await journal.read(fn)``
runs ``fn(reader)`` without blocking the event loop for a backend whose reads
are remote.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Literal, TypeVar

import attrs
import trio

from ._records import InstanceRecord, LogEntry
from ._states import StateRow
from ._statuses import (
    LIVE_STATUSES as LIVE_STATUSES,
    MAIL_STATUSES as MAIL_STATUSES,
    STATUS_CODE as STATUS_CODE,
    STATUS_NAME as STATUS_NAME,
    STATUS_WORDS as STATUS_WORDS,
    STATUSES as STATUSES,
    TERMINAL_STATUSES as TERMINAL_STATUSES,
    UNFINISHED_STATUSES as UNFINISHED_STATUSES,
    Status as Status,
)
from ._txn import (
    ABSENT as ABSENT,
    ADD_TIMER as ADD_TIMER,
    APPEND_MESSAGE as APPEND_MESSAGE,
    APPEND_STREAM as APPEND_STREAM,
    CANCEL_TIMER as CANCEL_TIMER,
    DELETE_CURSOR as DELETE_CURSOR,
    DELETE_INSTANCE as DELETE_INSTANCE,
    DROP_LOG as DROP_LOG,
    MAX_ADDRESS_BYTES as MAX_ADDRESS_BYTES,
    PUT_INSTANCE as PUT_INSTANCE,
    PUT_LOG as PUT_LOG,
    SET_CURSOR as SET_CURSOR,
    SET_STATUS as SET_STATUS,
    TAKE_MESSAGE as TAKE_MESSAGE,
    Chain as Chain,
    LostChains as LostChains,
    Txn as Txn,
    check_fresh_cursors as check_fresh_cursors,
    check_requires as check_requires,
    due_us as due_us,
    stored_incarnation as stored_incarnation,
)
from .errors import JournalCorrupt

__all__ = [
    "LIVE_STATUSES",
    "MAIL_STATUSES",
    "MAX_ADDRESS_BYTES",
    "STATUSES",
    "STATUS_WORDS",
    "TERMINAL_STATUSES",
    "UNFINISHED_STATUSES",
    "CorruptRecord",
    "Durability",
    "InstanceRow",
    "Journal",
    "Reader",
    "Status",
    "Ticket",
    "TimerRow",
    "Txn",
    "instance_id",
]

T = TypeVar("T")


def instance_id(address: str) -> bytes:
    """The fixed-size key of the instance at ``address``.

    A 128-bit BLAKE2b hash, so keys stay short however deep an address
    nests (LMDB keys are at most 511 bytes), every node computes the same id
    without coordination, and a collision is as likely as a random UUID's.
    """
    return hashlib.blake2b(address.encode(), digest_size=16).digest()


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
        return unwrap(self._outcome)


def unwrap(outcome: list[int] | BaseException) -> list[int]:
    """A transaction's results, or raise the exception it failed with."""
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


# One instance as `Reader.listing` gives it: (-updated, address, iid, status,
# process), ``updated`` 0.0 when unknown; so sorted tuples list the most
# recently updated first, then by address.
Listed = tuple[float, str, bytes, str, str]


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

    def mailbox_page(self, iid: bytes, start: int, limit: int) -> tuple[int, list[tuple[int, Any]]]:
        """How many unread messages the instance has, and ``limit`` of them
        from the ``start``-th (0-based), oldest first: a backend that can
        decodes only those (the inspector pages a mailbox of big messages)."""
        box = self.mailbox(iid)
        return len(box), box[start : start + limit]

    def listing(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        memo: dict[bytes, Any] | None = None,
    ) -> list[Listed]:
        """Each instance matching the filters as a `Listed` tuple, in no set
        order (sorted, the tuples list the instances most recently updated
        first): what a list of instances sorts and pages by, read as cheaply
        as the backend can. A record that does not decode is listed too (the
        address its header gives, or ``"? <id>"``, and no updated time):
        reading it with `instance` says what is wrong.

        ``memo`` is a dict the caller keeps between calls (empty at first; it
        keeps no reader's snapshot): a backend may keep in it what lets a
        later call give the same tuple, unread, for a record unchanged since.
        """
        broken: list[CorruptRecord] = []
        rows: list[Listed] = [
            (-(row.record.updated or 0.0), row.address, row.iid, row.status, row.process)
            for row in self.instances(status, process, corrupt=broken)
        ]
        rows += [
            (-0.0, c.address or f"? {c.iid.hex()}", c.iid, c.status, c.process) for c in broken
        ]
        return rows

    def owner(self, iid: bytes) -> str | None:
        """The name of the node that owns the instance now, on a journal that
        several nodes share (`PostgresJournal`); None where the backend has no
        owners, the instance has none (no node claimed it, or it ended and
        was let go), or there is no such instance. What `show` and the
        inspector print; the owner may change as soon as it is read."""
        return None

    def change_marker(self) -> int | None:
        """A number that differs between this snapshot and any earlier one
        that misses a commit this one sees (LMDB: the transaction id), or
        None when the backend has none (then no read may be reused)."""
        return None

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


Durability = Literal["sync", "async"]
"""When an awaited commit returns, as a type: ``"sync"``, once the data is
durable; ``"async"``, once it is queued (see `Journal`)."""


class Journal(abc.ABC):
    """A durable (or in-memory) store behind the runtime. See the module doc.

    Use it as ``async with journal:`` or let `actors.open_system` open and
    close it. ``durability`` is ``"sync"`` (an awaited commit returns once
    the data is durable) or ``"async"`` (once it is queued).
    """

    durability: Durability = "sync"

    check_shapes: bool = False
    """Whether reads check that instance records, log entries and messages
    have the shape the runtime writes (its fields of the types it reads), so
    that valid msgpack of another shape raises `JournalCorrupt` naming the
    database and key like bytes that do not decode. `actors.open_system` and
    the command line turn it on; a journal used on its own stores any value."""

    #: Called in the trio thread as ``on_write_lost(chain, error)`` when a
    #: transaction of ``chain`` failed (see `LostChains`): its writer must
    #: reload from the journal, then call `resume_chain`.
    on_write_lost: Callable[[bytes, BaseException], None] | None = None

    #: The chains whose write failed: each journal makes its own in
    #: ``__init__``, and one that can fail a write its writer went on from
    #: applies its transactions through ``Chain(self.lost_chains)``.
    lost_chains: LostChains

    def resume_chain(self, chain: bytes) -> None:
        """The writer of ``chain`` reloaded from what is committed: take its
        transactions again (see `LostChains`)."""
        failed = self.lost_chains.failed
        if failed:
            failed.pop(chain, None)

    def _tell_lost(self) -> None:
        """Tell `on_write_lost` of the chains lost since the last call (in
        the trio thread, after a batch's outcomes are known)."""
        news = self.lost_chains.news
        while news:
            chain, error = news.popleft()
            if self.on_write_lost is not None:
                self.on_write_lost(chain, error)

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

    def submit_deferred(self) -> None:  # noqa: B027 - a hook: nothing to do by default
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
        if durable or self.durability == "sync" or txn.must_wait(self.node is not None):
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

    @property
    def reads_at_once(self) -> bool:
        """True if `read` and `claim` are this base class's: a read runs at
        once (``with journal.reader()`` is all it does, without a schedule
        point) and a claim gives 0, so the runtime may read in a step of its
        own and claim without asking. A journal that reads in a worker
        thread overrides `read`, and is False."""
        cls = type(self)
        return cls.read is Journal.read and cls.claim is Journal.claim

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

    poll_scale: float = 1.0
    """A factor on how often a system on this shared journal looks for
    other nodes' changes (takeovers, queue slots, schedules, results of
    instances another node runs), which wake nobody here. PostgreSQL keeps
    the runtime's cadence (1.0); the simulated nodes look 8 times less
    often, which keeps a simulated run of hours cheap and changes when
    those looks happen, not what they do."""

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

    async def clock(self) -> float | None:
        """The time on the journal's own clock, in epoch seconds, read now;
        None if the journal has none of its own. Nodes sharing a journal
        keep durable time (timers' due times, a message's sent-at) on it, so
        a timer fires on time whichever node holds it, however their wall
        clocks differ. Single-owner journals: None (the node's wall clock
        is the journal's time)."""
        return None

    def on_mail(self, callback: Callable[[bytes], None]) -> None:  # noqa: B027 - a hook, as above
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
