"""Group commit, shared by the journals that commit in a writer thread.

One writer thread owns every write (py-lmdb binds a write transaction to
the thread that began it; psycopg's connection is its thread's only).
Transactions submitted while a commit is in flight wait in the next batch;
each batch is applied and committed as one, then handed back to the trio
thread through a doorbell (`storage._handoff.Doorbell`), where `_finish`
reschedules each caller with its own outcome: one commit and one wake-up
of the event loop per batch.

A journal supplies only how a batch is written, as two methods (see
`GroupCommit`): ``_apply_batch(batch)`` sets ``batch.outcomes`` (one per
transaction: its results, or the exception it alone fails with) and may
leave the commit itself to the callable it returns, which the writer calls
once the batch before it is handed back, so that batch's callers run while
this one is on the disk or the wire. How a commit whose answer was lost is
decided is `storage._attempts`.

Invariants kept here:

- order: batches are applied, committed and handed back in the order
  their transactions were submitted, and within a batch in submission
  order; what `defer` holds goes before anything submitted after it;
- isolation: an outcome is per transaction: a transaction that fails
  (`Conflict`, `JournalFull`, `EncodeError`) fails alone and its batch
  mates commit, unless the commit itself fails, when each learns why;
- drain: `_stop_writer` (the journals' ``close``) commits every pending
  batch, deferred ones included, and wakes their callers before it returns.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sized
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel
from outcome import Error, Value

from ._batch import LANDED, Batch, BatchTicket, _Deferred, _Waiter
from ._clock import AutojumpHold
from ._handoff import Doorbell, Handoff
from ._journal import Durability, Settled, Ticket, Txn
from ._writer_thread import NO_SPLIT, Commit, WriterThread
from .errors import CommitOutcomeUnknown, JournalClosed

__all__ = ["ASYNC_WINDOW_SECONDS", "ASYNC_WINDOW_TXNS", "Batch", "Commit", "GroupCommit"]

# "async" durability acknowledges a write once it is queued, but only while
# fewer than ASYNC_WINDOW_TXNS transactions wait to be committed and the
# oldest of them was queued less than ASYNC_WINDOW_SECONDS ago; past either
# bound the caller waits for its own commit. So acknowledged writes that a
# crash can lose number at most ASYNC_WINDOW_TXNS, and when the disk falls
# behind, writers slow down to its pace instead of queueing without end.
ASYNC_WINDOW_TXNS = 1000
ASYNC_WINDOW_SECONDS = 1.0


class GroupCommit(WriterThread):
    """Batching, tickets, the writer thread and finishing, for a journal
    that writes a batch with ``_apply_batch`` (see the module docstring).

    A journal (LMDB's) inherits it, or keeps one (PostgreSQL's committer).
    It calls `_init_group_commit` in ``__init__``, `_start_writer` as it
    opens and `_stop_writer` as it closes, and provides:

    - ``_apply_batch(batch) -> Commit | None`` (writer thread): set
      ``batch.outcomes``, never raise; return what commits it, or None if
      it is committed already (or failed as a whole);
    - ``_write_inline(txns) -> outcomes | None`` (trio thread, optional):
      commit ``txns`` at once, or None to leave them to the writer;
    - ``_check_open()`` (raise `JournalClosed` saying why), ``_refuse_write``
      and ``readonly`` (a journal open for reading only), ``_tell_lost``
      (and ``_lost_news``, what it tells, if it can tell anything);
    - and it clears ``_taking`` when it stops taking writes otherwise.
    """

    readonly = False
    # Whether batches are capped to even out two in flight (see _next_split):
    # worth it where applying a batch overlaps the commit of the one before.
    even_batches = True
    # Whether a committed batch waits for the next one to be applied before
    # it is handed back (see _write_loop); else it goes back at once.
    overlaps = True
    # Whether the handoff times commits (see `Handoff.committing`).
    timed_commits = False

    _lock: threading.Lock
    _cond: threading.Condition
    _pending: deque[Batch]
    _split_at: int
    _closing: bool
    _inflight: int
    _uncommitted: int
    _unfinished: deque[Batch]
    _inline_claimed: bool
    _taking: bool
    _lost_news: Sized
    _deferred: list[tuple[Txn, _Deferred]]
    _doorbell: Doorbell[Batch]
    _hold: AutojumpHold | None
    _handoff: Handoff | None
    _writer_thread: threading.Thread | None

    def _init_group_commit(self) -> None:
        # The lock guards _pending, _split_at and _closing; the condition (on
        # the same lock) wakes the writer thread when a batch starts or on
        # close. The hot path takes only the plain lock, whose `with` costs
        # no Python frame.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # Batches waiting for the writer, oldest first. Invariant: only the
        # last one still takes transactions.
        self._pending = deque()
        self._split_at = NO_SPLIT  # start a new pending batch at this size
        self._closing = False
        self._writer_thread = None
        # Committed batches, from the writer thread to `_finish` in the trio thread.
        self._doorbell = Doorbell(self._finish)
        self._inflight = 0  # batches submitted and not yet finished (trio thread)
        # The trio thread's view of the "async" window: transactions queued
        # and not yet finished, and the batches holding them, oldest first
        # (finished ones leave from the front).
        self._uncommitted = 0
        self._unfinished = deque()
        self._inline_claimed = False  # a caller is trying the fast path (trio thread)
        self._deferred = []  # what `defer` holds back until the next submission (trio thread)
        self._hold = None
        self._handoff = None
        # Invariant: True only while `_check_writable` (and `_check_open`)
        # would pass: set as the writer starts, cleared as it stops and by a
        # journal that stops taking writes otherwise (LMDB's after a fork).
        # The hot paths read this flag and call those only when it is False.
        self._taking = False
        # What `_tell_lost` tells (a journal's ``lost_chains.news``), or an
        # empty tuple for one that never loses a chain: `_finish` calls
        # `_tell_lost` only when it holds something.
        self._lost_news = ()

    def _start_writer(self, name: str, handoff: Handoff, *, doorbell: bool = True) -> None:
        """Start the writer thread (from the trio thread, as the journal
        opens); ``doorbell``: hand batches back through it (else the
        journal's `_hand_back` does)."""
        self._hold = AutojumpHold.current()
        self._handoff = handoff
        self._closing = False
        self._split_at = NO_SPLIT
        if doorbell:
            self._doorbell.open()
        self._writer_thread = threading.Thread(target=self._write_loop, name=name, daemon=True)
        self._writer_thread.start()
        self._taking = True

    async def _stop_writer(self) -> None:
        """Commit everything pending, deferred transactions included, wake
        its callers, then end the writer thread."""
        if self._deferred:
            self.submit_deferred()  # drained with the rest below
        with self._cond:
            self._taking = False
            self._closing = True
            self._cond.notify()
        if self._writer_thread is not None:  # it drains every pending batch, then stops
            await trio.to_thread.run_sync(self._writer_thread.join)
        # Let the batches it handed back be finished first.
        while self._inflight:
            await trio.lowlevel.checkpoint()
        self._writer_thread = None
        self._doorbell.close()

    # -- hooks (see the class docstring) -------------------------------------

    def _write_inline(self, txns: list[Txn]) -> list[Any] | None:
        return None

    def _refuse_write(self) -> None:
        raise NotImplementedError

    if TYPE_CHECKING:  # a `Journal`'s (which a journal inheriting this is)

        def _check_open(self) -> object: ...

        def _tell_lost(self) -> None: ...

    # -- submitting (trio thread) --------------------------------------------
    #
    # Where the time goes, with many writers (see bench/journal.py and
    # bench/journal_cpu.py): trio's own cost of waking a task and parking it
    # again (~2 us), the caller building its Txn (~0.6 us), the garbage
    # collector (~1 us: its runs follow the objects each waiting caller
    # keeps alive), LMDB copying each leaf page a batch touches (~1-1.5 us
    # per instance, under the GIL) and writing it out at commit (no GIL).
    # So the trio thread and the writer thread take turns on the GIL, and
    # the disk work only overlaps the trio thread's if the writer never
    # waits for the GIL between applying a batch and committing it (see
    # `_write_loop`). The Python here is kept to one frame per caller, one
    # lock round per submission, one reschedule per caller and one object
    # (`_Waiter`) alive per waiting caller beside its Txn.

    durability: Durability

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        # One coroutine frame, resumed once: the inline path is written out
        # here, not awaited (each layer of coroutine costs a call per
        # resumption; see docs/design.md, "The hot flows, walked"), so an
        # inline LMDB commit is this frame, the journal's `_write_inline` and
        # its applier's `apply`; the enqueue for the writer thread is a call.
        if self.readonly:
            self._refuse_write()
        if not (durable or self.durability == "sync" or txn.must_wait(False)):
            # "async" durability: queued is enough, within the window (see
            # ASYNC_WINDOW_TXNS); past it, wait for this commit like "sync".
            # Still a checkpoint, so a loop of such commits cannot starve
            # the other tasks.
            await trio.lowlevel.checkpoint_if_cancelled()
            if self._uncommitted < ASYNC_WINDOW_TXNS and (
                not self._unfinished
                or time.monotonic() - self._unfinished[0].born < ASYNC_WINDOW_SECONDS
            ):
                self._enqueue(txn, None)  # (no Ticket: nobody waits for it)
                await trio.lowlevel.cancel_shielded_checkpoint()
                return []
        elif self._inflight == 0 and not self._inline_claimed:
            # The fast path for an uncontended writer: commit in the trio
            # thread. A round trip to the writer thread costs two thread
            # wake-ups, a good part of an fsync. But committing here blocks
            # the event loop for that fsync, so it is only worth it when
            # nobody else is about to write or run. ``tasks_runnable`` alone
            # cannot tell: tasks woken together (all the callers of one
            # batch) run in one scheduler pass and each sees the run queue
            # empty. So the first caller claims the fast path and yields
            # once; whoever commits meanwhile goes to the writer thread, and
            # then so does this caller.
            self._inline_claimed = True
            try:
                await trio.lowlevel.checkpoint()  # cancellable: nothing is written yet
            finally:
                self._inline_claimed = False
            if not (self._inflight or trio.lowlevel.current_statistics().tasks_runnable):
                if not self._taking:
                    self._check_open()  # raises, saying why (before taking what defer held)
                # What defer held back goes first, in this same commit (a
                # loop, not a comprehension: no frame of its own).
                deferred = self._deferred
                if deferred:
                    self._deferred = []
                    txns = []
                    for held, _ in deferred:
                        txns.append(held)
                    txns.append(txn)
                else:
                    txns = [txn]
                outcomes = self._write_inline(txns)
                if outcomes is None:  # to the writer thread, what defer held still first
                    if deferred:
                        self._deferred[:0] = deferred
                else:
                    for (_, ticket), result in zip(deferred, outcomes, strict=False):
                        # (as `_finish` settles them: see LANDED)
                        ticket.ticket = LANDED if result == [] else Settled(result)
                    outcome = outcomes[-1]
                    if isinstance(outcome, BaseException):  # (`unwrap`, written out)
                        raise outcome
                    then = txn.then
                    if then is not None:
                        # The journal hands the results on itself (see
                        # `Txn.then`), as `_finish` does: `Txn.hand_on`,
                        # written out (keep the two in step).
                        txn.then = None
                        then(outcome)  # what it raises, its committer gets
                    return outcome  # type: ignore[no-any-return]
        else:
            await trio.lowlevel.checkpoint_if_cancelled()  # cancelled: write nothing
        # Parked without a Ticket or an Event: `_finish` reschedules this
        # task with its own outcome, which saves an allocation and a frame
        # per call. (A `_Waiter` made without its ``__init__``: a frame less
        # per commit; ``task`` is its one field.)
        waiter = object.__new__(_Waiter)
        waiter.task = trio.lowlevel.current_task()
        self._enqueue(txn, waiter)
        try:
            return await trio.lowlevel.wait_task_rescheduled(waiter)  # type: ignore[no-any-return]
        except (trio.Cancelled, CommitOutcomeUnknown):
            txn.doubt()  # it may be written all the same (see `Journal.commit`)
            raise

    def defer(self, txn: Txn) -> Ticket:
        if self.readonly:
            self._refuse_write()
        if not self._taking:
            self._check_open()  # raises, saying why
        # A `_Deferred` made without its ``__init__`` (a frame less per
        # deferred write: an instance defers one at each suspension); its
        # two fields are set here.
        ticket = object.__new__(_Deferred)
        ticket._group = self
        ticket.ticket = None
        self._deferred.append((txn, ticket))
        return ticket

    def submit_deferred(self) -> None:
        if self._deferred:
            self._check_writable()
            with self._lock:
                self._enqueue_deferred()

    def _enqueue_deferred(self) -> None:
        # (Under the lock.) Invariant: _deferred is empty whenever a batch is
        # enqueued (every enqueue and inline commit takes it first), so what
        # it holds was deferred after everything already submitted, and goes
        # before anything submitted later.
        deferred, self._deferred = self._deferred, []
        for txn, ticket in deferred:
            batch = self._append(txn, None)
            index = len(batch.txns) - 1
            ticket.ticket = BatchTicket(batch, index)
            batch.deferred.append((index, ticket))

    def submit(self, txn: Txn) -> Ticket:
        if self.readonly:
            self._refuse_write()
        batch = self._enqueue(txn, None)
        # Only the trio thread appends to a batch, so txn is still its last.
        # (A `BatchTicket` made without its ``__init__``: a frame less.)
        ticket = object.__new__(BatchTicket)
        ticket._batch = batch
        ticket._index = len(batch.txns) - 1
        return ticket

    def _enqueue(self, txn: Txn, waiter: _Waiter | None) -> Batch:
        """Add ``txn`` to the batch that takes transactions; return that batch."""
        if not self._taking:
            self._check_writable()  # raises, saying why
        with self._lock:
            if self._deferred:
                self._enqueue_deferred()  # first, into the same batch
            return self._append(txn, waiter)

    def _check_writable(self) -> None:
        if self._closing:
            raise JournalClosed("this journal is closing; it takes no more writes")

    def _append(self, txn: Txn, waiter: _Waiter | None) -> Batch:
        # (Under the lock.)
        pending = self._pending
        if pending and len(pending[-1].txns) < self._split_at:
            batch = pending[-1]
        else:
            # A new batch: every field of `Batch` is set here.
            batch = object.__new__(Batch)
            batch.born = time.monotonic()
            batch.txns = []
            batch.waiters = []
            batch.outcomes = []
            batch.finished = False
            batch.event = None
            batch.deferred = []
            batch.durable = False
            pending.append(batch)
            self._unfinished.append(batch)
            self._inflight += 1
            if self._inflight == 1:
                if self._hold is not None:
                    self._hold.acquire()
                if self._handoff is not None:
                    self._handoff.wake()  # writes in flight: it looks again
            if len(pending) == 1:
                self._cond.notify()  # the writer may be idle
        batch.txns.append(txn)
        batch.waiters.append(waiter)
        self._uncommitted += 1
        return batch

    # -- finishing (trio thread) ---------------------------------------------

    def _finish(self, batch: Batch) -> None:
        # Runs in the trio thread (from the doorbell), once per batch: one
        # wake-up of the trio loop serves every caller in the batch.
        self._inflight -= 1
        if self._inflight == 0 and self._hold is not None:
            self._hold.release()
        batch.finished = True
        self._uncommitted -= len(batch.txns)
        outcomes = batch.outcomes
        for index, txn in enumerate(batch.txns):
            then = txn.then
            if then is not None:  # (its receiver runs in the round its sender does)
                # `Txn.hand_on`, written out (keep the two in step): ``then``
                # runs once, only with results; what it raises is what its
                # committer gets (the transaction stays committed).
                txn.then = None
                outcome = outcomes[index]
                if not isinstance(outcome, BaseException):
                    try:
                        then(outcome)
                    except Exception as exc:  # noqa: BLE001 - its committer learns of it
                        outcomes[index] = exc
        # Its tickets need only the outcomes (an instance keeps the ticket of
        # its last writes while it is suspended): let the transactions and,
        # below, the waiters go.
        batch.txns = []
        for index, deferred in batch.deferred:
            # A suspended instance keeps its last ticket, and a `BatchTicket`
            # would keep the whole batch: a settled one keeps its outcome,
            # or nothing of its own for the usual outcome (no results).
            outcome = outcomes[index]
            deferred.ticket = LANDED if outcome == [] else Settled(outcome)
        batch.deferred = []
        unfinished = self._unfinished
        while unfinished and unfinished[0].finished:
            unfinished.popleft()
        reschedule = trio.lowlevel.reschedule
        for waiter, result in zip(batch.waiters, outcomes, strict=True):
            if waiter is not None and (task := waiter.task) is not None:
                failed = isinstance(result, BaseException)
                reschedule(task, Error(result) if failed else Value(result))
        batch.waiters = []  # (nor their tasks, which the tickets would keep)
        if batch.event is not None:
            batch.event.set()
        if self._lost_news:  # (else `_tell_lost` has nothing to tell)
            self._tell_lost()
