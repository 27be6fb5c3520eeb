"""Chains: one writer's ordered transactions (`Txn.chain`, such as an
instance's own writes), which commit in order or not at all from the
first that fails. `Chain` keeps that within one batch, `LostChains`
across batches, for a journal whose writer may go on before a write is
durable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import Conflict, JournalFull, JournalUnavailable

if TYPE_CHECKING:
    from ._txn import Txn

__all__ = ["Chain", "LostChains"]


class Chain:
    """Within one batch: a transaction that fails takes down the later ones
    of the same chain (`Txn.chain`: one writer's ordered sequence, such as
    an instance's own writes).

    Invariant: a chain's transactions commit in the order they were made,
    or not at all from the first that fails: the later ones were built on
    it (a run's next write assumes the message its last one took is
    taken). Without this a batch could keep an instance's continue-as-new
    whose run's last take had failed, and the next run handled that
    message again. Transactions outside a chain fail alone, and so does a
    precondition (`Conflict`): the later ones checked their own.
    """

    __slots__ = ("_failed", "_lost")

    def __init__(self, lost: LostChains | None = None) -> None:
        self._failed: dict[bytes, BaseException] = {}
        self._lost = lost  # the journal's, across batches

    def refused(self, txn: Txn) -> BaseException | None:
        """The error of an earlier failed transaction ``txn`` builds on, or None."""
        chain = txn.chain
        if chain is None:
            return None
        if self._failed and (failed := self._failed.get(chain)) is not None:
            return failed
        lost = self._lost
        return lost.failed.get(chain) if lost is not None and lost.failed else None

    def note(self, txn: Txn, outcome: Any) -> None:
        """Record ``txn``'s outcome (an exception if it failed)."""
        if (
            txn.chain is not None
            and isinstance(outcome, BaseException)
            and not isinstance(outcome, Conflict)
        ):
            self._failed.setdefault(txn.chain, outcome)


#: The failures after which a chain's later transactions would build on
#: writes that may not be there (a precondition's `Conflict` is not one).
_LOSING = (JournalFull, JournalUnavailable)


class LostChains:
    """A journal's chains whose write failed: across batches, what `Chain`
    keeps within one.

    A chain's transaction can fail after its writer went on: one nobody
    waits for (`Txn.unawaited`: "async" durability acknowledged it when
    queued, or a deferred one), and one its writer waits for while it
    submits more (an ask's send beside the run's own suspension). The
    writer's later transactions, in later batches, build on it. Invariant:
    from that failure on, every later transaction of the chain fails with
    the same error until the writer has reloaded from what is committed
    (`Journal.resume_chain`), and the writer hears of it once, through
    `Journal.on_write_lost`, whether or not it waited (a waiter may be
    cancelled before its wait returns: an actor ending meanwhile). So a
    write a full or lost journal could not take leaves no gap behind it:
    its instance is loaded again, as after a crash in the "async" window.
    """

    __slots__ = ("failed", "news")

    def __init__(self) -> None:
        self.failed: dict[bytes, BaseException] = {}
        # (chain, error) for the trio thread to tell; a deque, because the
        # writer's thread appends while the trio thread takes
        self.news: deque[tuple[bytes, BaseException]] = deque()

    def note(self, txns: Sequence[Txn], outcomes: Sequence[Any]) -> None:
        """Record the chains ``txns`` lost (by the committing thread, once
        their ``outcomes`` are final and before the next batch is applied)."""
        for txn, outcome in zip(txns, outcomes, strict=False):
            if (
                txn.chain is not None
                and isinstance(outcome, _LOSING)
                and txn.chain not in self.failed
            ):
                self.failed[txn.chain] = outcome
                self.news.append((txn.chain, outcome))
