"""The writer thread of `storage._group_commit.GroupCommit`: it applies and
commits batches in submission order, and hands each back to the trio
thread (see `_write_loop` for how the two threads share the GIL).

Invariant: batches are applied, committed and handed back in the order
their transactions were submitted; a journal that raises while writing a
batch fails that batch's callers (`_failed`), and the writer goes on.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ._batch import Batch
from ._handoff import Doorbell, Handoff
from .errors import JournalCorrupt

__all__ = ["MIN_SPLIT", "NO_SPLIT", "Commit", "WriterThread"]

NO_SPLIT = 1 << 62  # batch size limit meaning "no limit"
MIN_SPLIT = 64  # see WriterThread._next_split

# What the writer calls to commit a batch it applied (see GroupCommit).
Commit = Callable[[], None]


class WriterThread:
    """The writer thread's half of `GroupCommit` (its loop, the split of
    batches, the hand-back); the journal's hooks it calls are declared
    and documented there."""

    even_batches: bool
    overlaps: bool
    timed_commits: bool
    _cond: threading.Condition
    _pending: deque[Batch]
    _split_at: int
    _closing: bool
    _doorbell: Doorbell[Batch]
    _handoff: Handoff | None

    def _apply_batch(self, batch: Batch) -> Commit | None:
        raise NotImplementedError

    def _applied(self, batch: Batch) -> None:
        """Called by the writer once ``batch`` is committed, before the next
        batch is applied (which must see what this one lost)."""

    def _writer_ended(self) -> None:
        """Called in the writer thread as it ends."""

    def _write_loop(self) -> None:
        """The writer thread: apply and commit batches in submission order.

        While batch N+1 is being applied, batch N (committed) waits; it is
        handed back to trio just before N+1's commit, by the doorbell (see
        `storage._handoff.Doorbell`), which wakes the trio thread without
        letting go of the GIL: had the trio thread taken it, to wake N's
        callers, this thread would wait for it up to a whole switch interval
        (5 ms) before it could even call commit. So N's callers run in the
        trio thread while this thread's commit is on the disk, with the GIL
        released. Woken while N+1 is applied, they would take the GIL from
        the writer at each put (py-lmdb releases it for each). A journal
        whose whole write is its commit (PostgreSQL's round trips) has
        nothing to overlap (`overlaps` False): N goes back at once, before
        N+1 is taken, so N's callers' next writes can still join N+1.
        """
        handoff = self._handoff
        assert handoff is not None
        committed: Batch | None = None  # committed, its callers not yet woken
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._closing and committed is None:
                        self._cond.wait()
                    batch = self._pending.popleft() if self._pending else None
                    if batch is not None and self.even_batches:
                        self._split_at = self._next_split(batch, committed)
                handoff.step()
                if batch is None:
                    if committed is None:  # closing, and everything is handed back
                        return
                    self._hand_back(committed)  # nothing to overlap with
                    committed = None
                    continue
                try:
                    commit = self._apply_batch(batch)
                except Exception as exc:  # a bug: every caller learns of it
                    commit = None
                    batch.outcomes = _failed(exc, batch)
                if committed is not None:
                    self._hand_back(committed)
                if commit is not None:
                    handoff.committing(timed=self.timed_commits)
                    try:
                        commit()
                    except Exception as exc:  # (as above; the writer goes on)
                        batch.outcomes = _failed(exc, batch)
                handoff.step()
                self._applied(batch)
                if self.overlaps:
                    committed = batch
                else:
                    self._hand_back(batch)
        finally:
            self._writer_ended()

    def _next_split(self, taken: Batch, committed: Batch | None) -> int:
        # Called by the writer (holding the lock) as it takes a batch; the
        # answer caps the size of the batches filled from now on.
        # With many callers, two batches of equal size overlap best: one is
        # on the disk while the trio thread wakes the other's callers and
        # collects their next transactions. Left alone, the split is set by
        # chance at start-up and stays (700/300 of 1024 callers, say, which
        # costs a third of the throughput); capping new batches at half of
        # what is in flight evens it out within two commits. With fewer than
        # 2 * MIN_SPLIT callers, waking half of them costs less than the
        # fixed cost of a commit (its fsyncs, ~30 wake-ups' worth), and one
        # batch is best.
        in_flight = len(taken.txns) + sum(len(b.txns) for b in self._pending)
        if committed is not None:
            in_flight += len(committed.txns)
        return NO_SPLIT if in_flight < 2 * MIN_SPLIT else (in_flight + 1) // 2

    def _hand_back(self, batch: Batch) -> None:
        """Have the trio thread `_finish` ``batch`` (committed batches are
        handed back in the order they were committed)."""
        self._doorbell.ring(batch)
        assert self._handoff is not None
        self._handoff.handed_back()


def _failed(exc: Exception, batch: Batch) -> list[Any]:
    """The outcomes of a batch whose journal raised writing it (a bug: a
    journal's ``_apply_batch`` and its commit set outcomes, never raise)."""
    failure = JournalCorrupt(f"commit failed: {exc!r}", database="", key=b"")
    failure.__cause__ = exc
    return [failure] * len(batch.txns)
