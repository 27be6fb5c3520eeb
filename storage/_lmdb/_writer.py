"""Group commit: the writer thread, its batches, and the "async" window.

One writer thread owns every write transaction (py-lmdb binds a write
transaction to the OS thread that began it). Transactions submitted while a
commit is in flight wait in the next batch; each batch is one LMDB
transaction, committed with LMDB's own synced commit (data fsync, then the
meta page). Then the writer hands the batch back through a doorbell (a
pipe the trio thread waits on, rung without letting go of the GIL: see
`_GroupCommit._write_loop` for why), and the trio thread reschedules each
caller with its own outcome: one fsync and one wake-up of the event loop
per batch. A lone caller skips all this and commits in the trio thread
(`_GroupCommit._commit_inline`). The writer needs the GIL at every step,
which a busy trio thread can keep from it for seconds; `storage._handoff`
watches for that and lets it go.

When a batch does not fit or one of its transactions is refused, the
careful path (`_GroupCommit._write`) grows the map, then applies each
transaction in a nested transaction so that the one at fault fails alone.

`_GroupCommit` is the writing half of `LMDBJournal`, which owns the state
declared on it (set up in `LMDBJournal.__init__` and ``open``).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import lmdb
import trio
from outcome import Error, Value

from .. import _journal as j
from .._clock import AutojumpHold
from .._handoff import Doorbell, Handoff
from .._journal import (
    CANCEL_TIMER,
    DELETE_INSTANCE,
    DROP_LOG,
    TAKE_MESSAGE,
    Durability,
    Settled,
    Ticket,
    Txn,
    unwrap,
)
from .._states import DELETE_STATE, PUT_STATE, check_expects
from ..errors import (
    ActorError,
    Conflict,
    EncodeError,
    JournalClosed,
    JournalCorrupt,
    JournalDiskFull,
    JournalFull,
)
from ._applier import _Applier

_NO_SPLIT = 1 << 62  # batch size limit meaning "no limit"
_MIN_SPLIT = 64  # see LMDBJournal._next_split
# "async" durability acknowledges a write once it is queued, but only while
# fewer than ASYNC_WINDOW_TXNS transactions wait to be committed and the
# oldest of them was queued less than ASYNC_WINDOW_SECONDS ago; past either
# bound the caller waits for its own commit. So acknowledged writes that a
# crash can lose number at most ASYNC_WINDOW_TXNS, and when the disk falls
# behind, writers slow down to its pace instead of queueing without end.
ASYNC_WINDOW_TXNS = 1000
ASYNC_WINDOW_SECONDS = 1.0
# Operations that only remove records (see LMDBJournal._write's reserve).
_FREEING_OPS = frozenset({DELETE_INSTANCE, DROP_LOG, TAKE_MESSAGE, CANCEL_TIMER})
# What a transaction marked `Txn.frees` (a cleanup) may do beside freeing.
_FREES_BESIDE = frozenset({PUT_STATE, DELETE_STATE})
# A commit failing with one of these means the filesystem is full (on some,
# tmpfs among them, a short write shows as EIO) or failing.
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


class _Batch:
    """Transactions that commit together: one LMDB transaction, one fsync.

    The trio thread appends to ``txns`` (under the journal's lock) until the
    writer thread takes the batch; the writer then fills in ``outcomes`` and
    hands the batch back through the trio token. ``waiters``, ``finished``
    and ``event`` belong to the trio thread alone.
    """

    __slots__ = ("born", "deferred", "event", "finished", "outcomes", "txns", "waiters")

    def __init__(self) -> None:
        self.born = time.monotonic()  # for the "async" window (see ASYNC_WINDOW_SECONDS)
        self.txns: list[Txn] = []
        # Parallel to txns: the caller parked in `LMDBJournal.commit` for
        # that txn, or None (submitted without waiting).
        self.waiters: list[_Waiter | None] = []
        self.outcomes: list[Any] = []  # per txn: its results, or the exception it failed with
        self.finished = False  # set in the trio thread once outcomes are final
        self.event: trio.Event | None = None  # made only when a `_Ticket` waits
        # (index, ticket) of the txns `defer` held back: settled at the finish.
        self.deferred: list[tuple[int, _Deferred]] = []


class _Waiter:
    """A caller parked in `LMDBJournal.commit` until its batch is finished,
    and the abort callback trio calls if that caller is cancelled first.

    One object per parked caller: a closure over its batch and index would
    be four (the function, its cells and their tuple), each tracked by the
    garbage collector, whose collections, with a thousand callers in
    flight, took a sixth of the CPU time of a commit.
    """

    __slots__ = ("task",)

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task: trio.lowlevel.Task | None = task

    def __call__(self, _: Any) -> trio.lowlevel.Abort:
        # The transaction still commits; only its caller stops waiting.
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED


class _Ticket(Ticket):
    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    @property
    def done(self) -> bool:
        return self._batch.finished

    async def wait(self) -> list[int]:
        batch = self._batch
        if batch.finished:
            await trio.lowlevel.checkpoint()
        else:
            if batch.event is None:
                batch.event = trio.Event()
            await batch.event.wait()
        return unwrap(batch.outcomes[self._index])


class _Deferred(Ticket):
    """A transaction `defer` holds back: a `_Ticket` once it goes with a
    batch, a `Settled` once it went with an inline commit."""

    __slots__ = ("_journal", "ticket")

    def __init__(self, journal: _GroupCommit) -> None:
        # (The transaction is held by the journal, not here: a suspended
        # instance keeps its last ticket, and should not keep its ops.)
        self._journal = journal
        self.ticket: Ticket | None = None

    @property
    def done(self) -> bool:
        return self.ticket is not None and self.ticket.done

    async def wait(self) -> list[int]:
        if self.ticket is None:  # still held back: send it now
            self._journal.submit_deferred()
        assert self.ticket is not None
        return await self.ticket.wait()


class _Landed(Ticket):
    """The ticket of a deferred transaction that committed with no results
    (what an instance's ridden writes give): one serves them all."""

    __slots__ = ()

    @property
    def done(self) -> bool:
        return True

    async def wait(self) -> list[int]:
        await trio.lowlevel.checkpoint()
        return []


_LANDED = _Landed()


class _GroupCommit:
    """The writing methods of `LMDBJournal` (see the module docstring)."""

    # Set up by LMDBJournal (see its __init__ for what each guards).
    path: Any
    durability: Durability
    readonly: bool
    max_map_size: int
    _env: lmdb.Environment | None
    _handles: tuple[Any, ...]
    _forked: bool
    _lock: threading.Lock
    _cond: threading.Condition
    _pending: deque[_Batch]
    _split_at: int
    _closing: bool
    _doorbell: Doorbell[_Batch]
    _read_lock: threading.Lock
    _inflight: int
    _uncommitted: int
    _unfinished: deque[_Batch]
    _inline_claimed: bool
    _deferred: list[tuple[Txn, _Deferred]]
    _hold: AutojumpHold | None
    _handoff: Handoff
    lost_chains: j.LostChains

    if TYPE_CHECKING:  # defined by LMDBJournal

        def describe(self) -> str: ...

        def _tell_lost(self) -> None: ...

        def _check_open(self) -> lmdb.Environment: ...

    # -- writing -----------------------------------------------------------
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

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
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
            outcomes = await self._commit_inline(txn)
            if outcomes is not None:
                return unwrap(outcomes[0])
        else:
            await trio.lowlevel.checkpoint_if_cancelled()  # cancelled: write nothing
        waiter = _Waiter(trio.lowlevel.current_task())
        self._enqueue(txn, waiter)
        # Parked without a Ticket or an Event: `_finish` reschedules this task
        # with its own outcome, which saves an allocation and a frame per call.
        return await trio.lowlevel.wait_task_rescheduled(waiter)  # type: ignore[no-any-return]

    async def _commit_inline(self, txn: Txn) -> list[Any] | None:
        """The fast path for an uncontended writer: commit in the trio thread.

        A round trip to the writer thread costs two thread wake-ups, a good
        part of an fsync. But committing here blocks the event loop for that
        fsync, so it is only worth it when nobody else is about to write or
        run. ``tasks_runnable`` alone cannot tell: tasks woken together (all
        the callers of one batch) run in one scheduler pass and each sees
        the run queue empty. So the first caller claims the fast path and
        yields once; whoever commits meanwhile goes to the writer thread, and
        then so does this caller. Returns None to send it there.
        """
        self._inline_claimed = True
        try:
            await trio.lowlevel.checkpoint()  # cancellable: nothing is written yet
        finally:
            self._inline_claimed = False
        if self._inflight or trio.lowlevel.current_statistics().tasks_runnable:
            return None
        env = self._check_open()
        # What defer held back goes first, in this same commit.
        deferred, self._deferred = self._deferred, []
        outcomes = self._write_inline(env, [held for held, _ in deferred] + [txn])
        if outcomes is None:
            self._deferred[:0] = deferred  # to the writer thread, still first
            return None
        for (_, ticket), outcome in zip(deferred, outcomes, strict=False):
            ticket.ticket = Settled(outcome)
        return outcomes[len(deferred) :]

    def defer(self, txn: Txn) -> Ticket:
        if self.readonly:
            self._refuse_write()
        self._check_open()
        ticket = _Deferred(self)
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
            ticket.ticket = _Ticket(batch, index)
            batch.deferred.append((index, ticket))

    def submit(self, txn: Txn) -> Ticket:
        if self.readonly:
            self._refuse_write()
        batch = self._enqueue(txn, None)
        # Only the trio thread appends to a batch, so txn is still its last.
        return _Ticket(batch, len(batch.txns) - 1)

    def _refuse_write(self) -> None:
        self._check_open()
        raise JournalClosed(
            f"{self.describe()} is open read-only; open it without readonly=True to write "
            "(which needs the journal not to be held by a running system)"
        )

    def _enqueue(self, txn: Txn, waiter: _Waiter | None) -> _Batch:
        """Add ``txn`` to the batch that takes transactions; return that batch."""
        self._check_writable()
        with self._lock:
            if self._deferred:
                self._enqueue_deferred()  # first, into the same batch
            return self._append(txn, waiter)

    def _check_writable(self) -> None:
        if self._env is None or self._closing or self._forked:
            self._check_open()  # raises, saying why

    def _append(self, txn: Txn, waiter: _Waiter | None) -> _Batch:
        # (Under the lock.)
        pending = self._pending
        if pending and len(pending[-1].txns) < self._split_at:
            batch = pending[-1]
        else:
            batch = _Batch()
            pending.append(batch)
            self._unfinished.append(batch)
            self._inflight += 1
            if self._inflight == 1:
                if self._hold is not None:
                    self._hold.acquire()
                self._handoff.wake()
            if len(pending) == 1:
                self._cond.notify()  # the writer may be idle
        batch.txns.append(txn)
        batch.waiters.append(waiter)
        self._uncommitted += 1
        return batch

    def _finish(self, batch: _Batch) -> None:
        # Runs in the trio thread (from the doorbell), once per batch: one
        # wake-up of the trio loop serves every caller in the batch.
        self._inflight -= 1
        if self._inflight == 0 and self._hold is not None:
            self._hold.release()
        batch.finished = True
        self._uncommitted -= len(batch.txns)
        outcomes = batch.outcomes
        for index, txn in enumerate(batch.txns):
            if txn.then is not None:  # (its receiver runs in the round its sender does)
                outcomes[index] = txn.hand_on(outcomes[index])
        # Its tickets need only the outcomes (an instance keeps the ticket of
        # its last writes while it is suspended): let the transactions and,
        # below, the waiters go.
        batch.txns = []
        for index, deferred in batch.deferred:
            # A suspended instance keeps its last ticket, and a `_Ticket`
            # would keep the whole batch: a settled one keeps its outcome,
            # or nothing of its own for the usual outcome (no results).
            outcome = outcomes[index]
            deferred.ticket = _LANDED if outcome == [] else Settled(outcome)
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
        self._tell_lost()

    def _write_loop(self) -> None:
        """The writer thread: apply and commit batches in submission order.

        While batch N+1 is being applied, batch N (committed) waits; it is
        handed back to trio just before N+1's commit, by the doorbell (see
        `storage._handoff.Doorbell`), which wakes the trio thread without letting go
        of the GIL: had the trio thread taken it, to wake N's callers, this
        thread would wait for it up to a whole switch interval (5 ms) before
        it could even call commit. So N's callers run in the trio thread
        while this thread's commit is on the disk, with the GIL released.
        Woken while N+1 is applied, they would take the GIL from the
        writer at each put (py-lmdb releases it for each).
        """
        committed: _Batch | None = None  # on disk, its callers not yet woken
        while True:
            with self._cond:
                while not self._pending and not self._closing and committed is None:
                    self._cond.wait()
                batch = self._pending.popleft() if self._pending else None
                if batch is not None:
                    self._split_at = self._next_split(batch, committed)
            self._handoff.step()
            if batch is None:
                if committed is None:  # closing, and everything is handed back
                    return
                self._hand_back(committed)  # nothing to overlap with
                committed = None
                continue
            wtxn = self._apply_batch(batch)
            if committed is not None:
                self._hand_back(committed)
            if wtxn is not None:
                self._handoff.committing()
                self._commit_batch(wtxn, batch)
            self._handoff.step()
            # Before the next batch is applied: it must see what this one lost.
            self.lost_chains.note(batch.txns, batch.outcomes)
            committed = batch

    def _next_split(self, taken: _Batch, committed: _Batch | None) -> int:
        # Called by the writer (holding the lock) as it takes a batch; the
        # answer caps the size of the batches filled from now on.
        # With many callers, two batches of equal size overlap best: one is
        # on the disk while the trio thread wakes the other's callers and
        # collects their next transactions. Left alone, the split is set by
        # chance at start-up and stays (700/300 of 1024 callers, say, which
        # costs a third of the throughput); capping new batches at half of
        # what is in flight evens it out within two commits. With fewer than
        # 2 * _MIN_SPLIT callers, waking half of them costs less than the
        # fixed cost of a commit (its fsyncs, ~30 wake-ups' worth), and one
        # batch is best.
        in_flight = len(taken.txns) + sum(len(b.txns) for b in self._pending)
        if committed is not None:
            in_flight += len(committed.txns)
        return _NO_SPLIT if in_flight < 2 * _MIN_SPLIT else (in_flight + 1) // 2

    def _hand_back(self, batch: _Batch) -> None:
        """Have the trio thread `_finish` ``batch`` (committed batches are
        handed back in the order they were committed)."""
        self._doorbell.ring(batch)
        self._handoff.handed_back()

    def _apply_batch(self, batch: _Batch) -> lmdb.Transaction[bytes] | None:
        """Apply ``batch`` in a new LMDB transaction and return it, uncommitted.

        On any trouble (the map is full, a transaction LMDB refuses) it takes
        the careful path, which commits by itself, and returns None.
        """
        env = self._env
        assert env is not None
        try:
            wtxn = env.begin(write=True)
        except Exception:
            batch.outcomes = self._write(batch.txns)
            return None
        try:
            batch.outcomes = self._apply_all(wtxn, batch.txns, isolate=False)
        except lmdb.MapFullError:
            wtxn.abort()
            batch.outcomes = self._write(batch.txns)
            return None
        except Exception:  # one transaction is at fault (a key too long, say)
            wtxn.abort()
            batch.outcomes = self._write(batch.txns, isolate=True)
            return None
        return wtxn

    def _commit_batch(self, wtxn: lmdb.Transaction[bytes], batch: _Batch) -> None:
        try:
            wtxn.commit()
        except Exception:  # a failed commit aborts: nothing of it was written
            batch.outcomes = self._write(batch.txns)

    def _write_inline(self, env: lmdb.Environment, txns: list[Txn]) -> list[Any] | None:
        """Commit ``txns`` in the calling thread; their outcomes, or None if
        that failed (the map is full, say): the writer thread then retries
        them carefully."""
        try:
            return self._apply(env, txns, isolate=False)
        except Exception:
            return None

    def _write(self, txns: list[Txn], *, isolate: bool = False) -> list[Any]:
        """The careful path: apply and commit ``txns``, growing the map as
        needed and isolating a transaction that fails; return the outcomes.

        Invariant: a transaction fails alone unless the commit itself fails
        (the map or the disk is full), and then each caller learns why.
        """
        env = self._env
        assert env is not None
        while True:
            try:
                outcomes = self._apply(env, txns, isolate=isolate)
            except lmdb.MapFullError as exc:
                if self._grow(env):
                    continue
                if isolate:  # no room even to commit what fits
                    outcomes = [self._commit_failed(exc) for _ in txns]
                    break
            except Exception as exc:
                if isolate:  # LMDB or the disk failed: every caller learns of it
                    return [self._commit_failed(exc) for _ in txns]
            else:
                break
            # Apply each transaction on its own, so the one that does not fit
            # (or is otherwise refused) fails alone.
            isolate = True
        # Deleting needs room too (LMDB copies the pages it changes), so on
        # a full map cleanup could never make room: a transaction that only
        # frees gets the reserve past max_map_size. It commits after the
        # rest of its batch, which no caller can tell from an order they
        # raced for.
        freeing = [
            i
            for i, (txn, outcome) in enumerate(zip(txns, outcomes, strict=True))
            if type(outcome) is JournalFull
            and all(
                op[0] in _FREEING_OPS or (txn.frees and op[0] in _FREES_BESIDE) for op in txn.ops
            )
        ]
        if freeing and self._grow(env, into_reserve=True):
            again = self._write([txns[i] for i in freeing], isolate=True)
            for i, outcome in zip(freeing, again, strict=True):
                outcomes[i] = outcome
            try:
                with self._read_lock:  # keep the reserve for next time (LMDB
                    env.set_mapsize(self.max_map_size)  # keeps what is in use)
            except lmdb.Error:
                pass  # then the map stays larger; nothing is lost
        return outcomes

    def _commit_failed(self, exc: Exception) -> ActorError:
        """The error for a caller whose transaction could not be written."""
        failure: ActorError
        if isinstance(exc, lmdb.MapFullError):
            failure = self._full()
        elif isinstance(exc, lmdb.DiskError) or any(
            os.strerror(code) in str(exc) for code in _DISK_ERRNOS
        ):
            failure = JournalDiskFull(
                f"{self.describe()} could not write to its filesystem ({exc}): the disk "
                f"under {self.path} is full or failing; free space there (df {self.path}) "
                "or move the journal to a larger disk, then retry. Nothing of this "
                "transaction was written.",
                path=str(self.path),
            )
        else:
            failure = JournalCorrupt(
                f"commit to {self.describe()} failed: {exc!r}; nothing of this transaction "
                "was written. If it keeps failing, close the system and open the journal "
                "again (LMDB refuses writes after a failed meta-page write)",
                database="",
                key=b"",
            )
        failure.__cause__ = exc
        return failure

    def _full(self) -> JournalFull:
        return JournalFull(
            f"{self.describe()} is full at max_map_size={self.max_map_size} bytes; "
            "open it with a larger LMDBJournal(max_map_size=...) or clean up finished "
            "instances (system.cleanup). Nothing of this transaction was written."
        )

    def _grow(self, env: lmdb.Environment, *, into_reserve: bool = False) -> bool:
        limit = self.max_map_size
        if into_reserve:
            limit += min(max(self.max_map_size // 32, 1 << 20), 1 << 30)
        current = env.info()["map_size"]
        if current >= limit:
            return False
        try:
            with self._read_lock:
                env.set_mapsize(min(current * 2, limit))
        except lmdb.Error:  # no address space, say: the map stays as it is
            return False
        return True

    def _apply(self, env: lmdb.Environment, txns: list[Txn], *, isolate: bool) -> list[Any]:
        """Apply ``txns`` in one LMDB transaction and commit it."""
        with env.begin(write=True) as wtxn:
            return self._apply_all(wtxn, txns, isolate=isolate)

    def _apply_all(
        self, wtxn: lmdb.Transaction[bytes], txns: list[Txn], *, isolate: bool
    ) -> list[Any]:
        """Apply ``txns`` in order inside ``wtxn``; return their outcomes.

        Each gets its results, or `Conflict` when a precondition fails (its
        operations are skipped). With ``isolate``, each runs in a nested
        transaction, so that one that does not fit (`JournalFull`) or that
        LMDB refuses (`EncodeError`) fails alone and the others go on.
        """
        outcomes: list[Any] = []
        apply = _Applier(wtxn, self._handles)
        chain = j.Chain(self.lost_chains)
        for txn in txns:
            broken = chain.refused(txn)  # it builds on one that failed
            if broken is not None:
                outcomes.append(broken)
                continue
            if txn.requires or txn.expects:
                try:
                    j.check_requires(txn.requires, apply.status_of, apply.incarnation_of)
                    check_expects(txn.expects, apply.state_version)
                    j.check_fresh_cursors(txn.fresh_cursors, apply.has_cursor)
                except Conflict as exc:  # (it takes down nothing else: see Chain)
                    outcomes.append(exc)
                    continue
            if not isolate:
                outcomes.append(apply.run(txn.ops))
                continue
            child = self._env.begin(write=True, parent=wtxn)  # type: ignore[union-attr]
            try:
                results = _Applier(child, self._handles).run(txn.ops)
                child.commit()
            except lmdb.MapFullError:
                child.abort()
                outcomes.append(self._full())
            except JournalCorrupt as exc:  # it met a damaged record: it alone fails
                child.abort()
                outcomes.append(exc)
            except Exception as exc:  # noqa: BLE001 - this transaction alone is refused
                child.abort()
                refused = EncodeError(
                    f"{self.describe()} cannot store this transaction ({exc!r}): a key or "
                    "value is over the journal's limits; nothing of it was written (the "
                    "rest of its batch was)"
                )
                refused.__cause__ = exc
                outcomes.append(refused)
            else:
                outcomes.append(results)
            chain.note(txn, outcomes[-1])
        return outcomes
