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

Reads go through a `Reader` (in `_reader`, re-exported here with the rows it
gives): ``with journal.reader() as r:``, a consistent snapshot that must not
be held across an ``await``. ``await journal.read(fn)`` runs ``fn(reader)``
without blocking the event loop for a backend whose reads are remote.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Literal, TypeVar

import trio

from ._chains import Chain as Chain, LostChains as LostChains
from ._reader import (
    CorruptRecord as CorruptRecord,
    InstanceRow as InstanceRow,
    Listed as Listed,
    Reader as Reader,
    TimerRow as TimerRow,
)
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
    Txn as Txn,
    check_fresh_cursors as check_fresh_cursors,
    check_requires as check_requires,
    due_us as due_us,
    stored_incarnation as stored_incarnation,
)
from .errors import CommitOutcomeUnknown

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


async def wait_for(ticket: Ticket, txn: Txn) -> list[int]:
    """``ticket.wait()`` for the `commit` of ``txn``, doubting it if its
    outcome is not learned (see `Journal.commit`). (Its results were handed
    on as the ticket settled: every journal does that itself.)"""
    try:
        return await ticket.wait()
    except (trio.Cancelled, CommitOutcomeUnknown):
        txn.doubt()
        raise


def unwrap(outcome: list[int] | BaseException) -> list[int]:
    """A transaction's results, or raise the exception it failed with."""
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


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

        Invariant (every journal's `commit` keeps it): what is committed is
        acted on. ``txn.then`` gets the results before this returns, and if
        its caller may not learn the outcome (cancelled once ``txn`` may be
        written, or `CommitOutcomeUnknown`), ``txn.in_doubt`` is called
        before the error goes on (`Txn.doubt`). Cancelled before anything
        is submitted, it writes nothing and doubts nothing.

        Returns:
            The results of `Txn.append_message` / `Txn.append_stream`.

        Raises:
            Conflict, JournalFull: see `Ticket.wait`; nothing was written.
        """
        await trio.lowlevel.checkpoint_if_cancelled()  # cancelled: write nothing
        ticket = self.submit(txn)
        if durable or self.durability == "sync" or txn.must_wait(self.node is not None):
            return await wait_for(ticket, txn)
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

    reads_at_once: bool = True
    """True if `read` and `claim` are this base class's: a read runs at
    once (``with journal.reader()`` is all it does, without a schedule
    point) and a claim gives 0, so the runtime may read in a step of its
    own and claim without asking. A journal that reads in a worker thread
    overrides `read`, and is False. Worked out once per class (see
    `__init_subclass__`), unless a class sets it itself."""

    # Whether this class or a base of it (below Journal) sets reads_at_once itself.
    _reads_at_once_given: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # `reads_at_once` as a plain attribute, not a property the runtime
        # calls several times per start. Invariant: for a class that does
        # not set it (nor a base below Journal), it is what the property
        # was, from the class's own `read` and `claim`.
        if "reads_at_once" in vars(cls):
            cls._reads_at_once_given = True
        elif not cls._reads_at_once_given:
            cls.reads_at_once = cls.read is Journal.read and cls.claim is Journal.claim

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
