"""`SimulatedJournal`: `MemoryJournal` committing the way a real journal
does, in virtual time, with every choice drawn from a seeded random source.

`MemoryJournal` applies a transaction the moment it is submitted. A real
journal does not: LMDB's writer gathers what is submitted while a commit is
in flight into the next batch, makes that batch durable with one fsync, and
only then lets readers see it and wakes its callers; what it holds back
(`Journal.defer`) and what "async" durability acknowledged before its
commit are lost when the host dies. This journal does the same with one
committer task sleeping on trio's clock, so under a ``MockClock`` a commit
takes virtual time. Each choice a real journal leaves to chance (how long a
commit takes, where a batch ends, which commit fails and how, when the host
dies) is drawn from the `random.Random` it is given, so a seed fixes the
sequence of writes, and `WriteLog` hashes that sequence into a digest.

Faults (`JournalFaults`, probabilities per batch):

- slow: the commit takes a good part of a second or more;
- full: one transaction of the batch fails alone with `JournalFull` (LMDB's
  map at its limit), the rest commits;
- disk: the whole batch fails with `JournalDiskFull`;
- unavailable: the whole batch fails with `JournalUnavailable`, nothing written;
- unknown: `CommitOutcomeUnknown` for the whole batch, written or not (even odds);
- outage: the journal answers nothing, reads included, for a while.

A crash (`SimulatedJournal.crash`, or armed with ``crash_at``) keeps
exactly what was committed: the batch in flight, those waiting, deferred
transactions and "async" writes already acknowledged are dropped, every
waiter gets `HostCrashed`, and the journal refuses writes until `recover`.
"""

from __future__ import annotations

import random as _random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

from . import _journal as j
from ._journal import Durability, Reader, Ticket, Txn
from ._memory import MemoryJournal
from ._simulated_faults import HostCrashed, JournalFaults
from ._simulated_tickets import Entry, SimTicket
from ._write_log import WriteLog
from .errors import (
    CommitOutcomeUnknown,
    JournalDiskFull,
    JournalFull,
    JournalUnavailable,
)

__all__ = ["SimulatedJournal", "WriteLog"]


class SimulatedJournal(MemoryJournal):
    """A `MemoryJournal` that commits in batches in virtual time, fails as
    ``faults`` and ``random`` say, and can crash (see the module docstring).

    It keeps its committed data across `close`, `crash` and `recover`, so
    the next system opened on it recovers from exactly what was committed.

    Args:
        random: the source of every choice the journal makes.
        faults: how it commits and fails (default: no faults).
        durability: ``"sync"`` or ``"async"``, as `LMDBJournal`'s.
        log: where committed writes are logged (default: a new `WriteLog`).
    """

    def __init__(
        self,
        random: _random.Random,
        *,
        faults: JournalFaults | None = None,
        durability: Durability = "sync",
        log: WriteLog | None = None,
    ) -> None:
        super().__init__()
        if durability not in ("sync", "async"):
            raise ValueError(f"durability must be 'sync' or 'async', not {durability!r}")
        self.durability = durability
        self.random = random
        self.faults = faults if faults is not None else JournalFaults()
        self.log = log if log is not None else WriteLog()
        #: called (in the trio thread) when the host crashes, to stop it
        self.on_crash: Callable[[], None] | None = None
        #: the number of the commit (`WriteLog.commits` + 1) at which the
        #: host crashes, and whether that batch is written first
        self.crash_at: int | None = None
        self.crash_after_write = False
        self.crashed = False
        self._pending: deque[Entry] = deque()
        self._held: list[Entry] = []
        self._inflight: list[Entry] = []
        self._untold: list[tuple[Entry, Any]] = []  # written; callers not told yet (late)
        self._wake: trio.Event | None = None
        self._stopped: trio.Event | None = None
        self._closing = False
        self._down_until = 0.0
        #: transactions nobody waited for that failed or died with the host:
        #: acknowledged writes ("async" durability) the journal lost
        self.lost_unawaited = 0

    # -- lifecycle -------------------------------------------------------------

    async def open(self) -> None:
        if self.crashed:
            raise HostCrashed("this journal's host crashed; call recover() before opening it again")
        await super().open()
        self._closing = False
        self._stopped = trio.Event()
        trio.lowlevel.spawn_system_task(self._commit_loop, name="simulated journal committer")

    async def close(self) -> None:
        if not self._open:
            return
        if not self.crashed:
            self.submit_deferred()
            self._closing = True
            self._poke()
            assert self._stopped is not None
            with trio.CancelScope(shield=True):
                await self._stopped.wait()
        await super().close()

    def crash(self, why: str = "crash") -> None:
        """The host dies now: keep what was committed, drop the rest (see
        the module docstring), and call `on_crash`."""
        if self.crashed:
            return
        self.crashed = True
        lost = len(self._inflight) + len(self._pending) + len(self._held)
        self.log.event(f"{why}: host crashed, {lost} uncommitted transaction(s) lost")
        error = HostCrashed(f"the simulated host crashed ({why}); nothing more is written")
        for entry in (*self._inflight, *self._pending, *self._held):
            self.lost_unawaited += entry.txn.unawaited
            entry.settle(error)
        for entry, _ in self._untold:  # written, and their callers die with the host
            entry.settle(error)
        self._inflight, self._held, self._untold = [], [], []
        self._pending.clear()
        self._poke()
        if self.on_crash is not None:
            self.on_crash()

    def recover(self) -> None:
        """Make the journal usable again after a crash (and close), holding
        exactly what was committed: the host restarted."""
        self.crashed = False
        self.crash_at = None
        self._open = False
        self._down_until = 0.0
        self.log.event("host restarted")

    def describe(self) -> str:
        return f"SimulatedJournal(durability={self.durability!r})"

    # -- writing ---------------------------------------------------------------

    def submit(self, txn: Txn) -> Ticket:
        txn.unawaited = True  # (its ticket may be waited for, later)
        return self._submit(txn)

    def _submit(self, txn: Txn) -> SimTicket:
        entry = Entry(txn)
        self._queue(entry)
        return SimTicket(entry, self.submit_deferred)

    def defer(self, txn: Txn) -> Ticket:
        self._check_writable()
        txn.unawaited = True
        entry = Entry(txn, held=True)
        self._held.append(entry)
        return SimTicket(entry, self.submit_deferred)

    def submit_deferred(self) -> None:
        if self._held and not self.crashed:
            self._check_open()
            held, self._held = self._held, []
            for entry in held:
                entry.held = False
                self._admit(entry)
            self._poke()

    def _check_writable(self) -> None:
        if self.crashed:
            raise HostCrashed("the simulated host crashed; nothing more is written")
        self._check_open()

    def _queue(self, entry: Entry) -> None:
        self._check_writable()
        # Invariant (as LMDB's): what defer holds goes before anything
        # submitted after it, in the same batch or an earlier one.
        held, self._held = self._held, []
        for other in held:
            other.held = False
            self._admit(other)
        self._admit(entry)
        self._poke()

    def _admit(self, entry: Entry) -> None:
        if self._down():
            self._fail([entry])
        else:
            self._pending.append(entry)

    def _count_lost(self, txns: list[Txn], outcomes: list[Any]) -> None:
        self.lost_chains.note(txns, outcomes)
        self.lost_unawaited += sum(
            1
            for txn, outcome in zip(txns, outcomes, strict=True)
            if txn.unawaited and isinstance(outcome, BaseException)
        )

    def _fail(self, entries: Iterable[Entry]) -> None:
        """Fail ``entries`` now, as an outage does (before any commit)."""
        entries = list(entries)
        errors = [self._unavailable() for _ in entries]
        self._count_lost([entry.txn for entry in entries], errors)
        for entry, error in zip(entries, errors, strict=True):
            entry.settle(error)
        self._tell_lost()

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        await trio.lowlevel.checkpoint_if_cancelled()  # cancelled: write nothing
        if durable or self.durability == "sync" or txn.must_wait(self.node is not None):
            return await j.wait_for(self._submit(txn), txn)
        # "async": queued is enough (and lost if the host dies first).
        txn.unawaited = True
        self._submit(txn)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return []

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- the committer -----------------------------------------------------------

    async def _commit_loop(self) -> None:
        stopped = self._stopped
        assert stopped is not None
        try:
            while not self.crashed:
                if not self._pending:
                    if self._untold:
                        # A round in which only readers see the last batch.
                        await trio.lowlevel.checkpoint()
                        if not self._pending and not self.crashed:
                            self._tell()
                        continue
                    if self._closing:
                        return
                    self._wake = trio.Event()
                    await self._wake.wait()
                    self._wake = None
                    continue
                # The batch: what waits now, or (by chance) only its oldest part.
                # Whatever is submitted during the commit goes to the next one.
                count = len(self._pending)
                if count > 1 and self.random.random() < self.faults.split:
                    count = self.random.randint(1, count - 1)
                self._inflight = [self._pending.popleft() for _ in range(count)]
                await trio.sleep(self._duration())
                if self.crashed:  # the batch died with the host (crash() settled it)
                    return
                batch, self._inflight = self._inflight, []
                self._commit(batch)
        finally:
            stopped.set()

    def _duration(self) -> float:
        faults = self.faults
        if faults.slow and self.random.random() < faults.slow:
            return self.random.uniform(*faults.slow_seconds)
        return self.random.expovariate(1 / faults.latency) if faults.latency > 0 else 0.0

    def _commit(self, batch: list[Entry]) -> None:
        number = self.log.commits + 1
        # (>=: with several nodes, another node's batch may take the number)
        if self.crash_at is not None and number >= self.crash_at and not self.crash_after_write:
            self._inflight = batch
            self.crash(f"crash before commit {number}")
            return
        txns = [entry.txn for entry in batch]
        outcomes, applied = self._outcomes(txns, number)
        self.log.batch(txns, outcomes, applied)
        if self.crash_at is not None and number >= self.crash_at:
            self._inflight = batch
            self.crash(f"crash after commit {number} was written")
            return
        self._count_lost(txns, outcomes)
        self._untold += zip(batch, outcomes, strict=True)
        faults = self.faults
        if not (faults.late and self.random.random() < faults.late):
            self._tell()

    def _tell(self) -> None:
        """Tell the callers of what was written (see `JournalFaults.late`)."""
        untold, self._untold = self._untold, []
        for entry, outcome in untold:
            entry.settle(outcome)
        self._tell_lost()
        self._settled()

    def _settled(self) -> None:
        """Called once a batch's outcomes are out (`SimulatedNode`'s notices)."""

    def _outcomes(self, txns: list[Txn], number: int) -> tuple[list[Any], frozenset[int]]:
        """Apply ``txns`` (or fail them, as the faults say): their outcomes,
        and the ``id`` of each that was written though its outcome is an
        error (a commit of unknown outcome that went through)."""
        faults, draw = self.faults, self.random.random
        if self._down():
            return [self._unavailable() for _ in txns], frozenset()
        if faults.outage and draw() < faults.outage:
            seconds = self.random.uniform(*faults.outage_seconds)
            self._down_until = trio.current_time() + seconds
            self.log.event(f"outage of {seconds:.3f} s from commit {number}")
            self._fail(self._pending)  # they would meet the outage too
            self._pending.clear()
            return [self._unavailable() for _ in txns], frozenset()
        if faults.unavailable and draw() < faults.unavailable:
            self.log.event(f"commit {number} lost the connection, nothing written")
            return [self._unavailable() for _ in txns], frozenset()
        if faults.disk and draw() < faults.disk:
            self.log.event(f"commit {number} met a full disk, nothing written")
            return [
                JournalDiskFull(
                    "the simulated disk is full; nothing of this transaction was written",
                    path="<simulated>",
                )
                for _ in txns
            ], frozenset()
        if faults.unknown and draw() < faults.unknown:
            written = draw() < 0.5
            self.log.event(
                f"commit {number}'s outcome unknown to its callers; "
                + ("it was written" if written else "it was not written")
            )
            applied = frozenset(
                id(txn) for txn in txns if written and not isinstance(self._run(txn), Exception)
            )
            return [
                CommitOutcomeUnknown(
                    "the simulated connection was lost after COMMIT; the transaction may "
                    "or may not be in the journal"
                )
                for _ in txns
            ], applied
        refused = -1
        if faults.full and draw() < faults.full:
            refused = self.random.randrange(len(txns))
            self.log.event(f"commit {number}: transaction {refused} did not fit")
        outcomes: list[Any] = []
        chain = j.Chain(self.lost_chains)
        for i, txn in enumerate(txns):
            outcome: Any = chain.refused(txn)
            if outcome is not None:
                pass
            elif i == refused:
                outcome = JournalFull(
                    "the simulated journal is full; nothing of this transaction was written"
                )
            else:
                outcome = self._run(txn)
            chain.note(txn, outcome)
            outcomes.append(outcome)
        return outcomes, frozenset()

    # -- outages -----------------------------------------------------------------

    def _down(self) -> bool:
        """Whether an outage holds now (never outside a trio run)."""
        if not self._down_until:
            return False
        try:
            return trio.current_time() < self._down_until
        except RuntimeError:
            return False

    def _unavailable(self) -> JournalUnavailable:
        return JournalUnavailable(
            "the simulated journal does not answer (an outage); try again later"
        )

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        if self._down():
            raise self._unavailable()
        with super().reader() as r:
            yield r
