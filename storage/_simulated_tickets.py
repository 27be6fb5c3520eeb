"""A `SimulatedJournal`'s submitted transactions until their outcome is
known (`Entry`), and the tickets its callers wait on (`SimTicket`).

An entry is settled once, with its outcome (or the error that failed it);
a transaction's ``then`` is handed the outcome before its caller resumes,
as a real journal's committer does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from ._journal import Ticket, Txn, unwrap

__all__ = ["Entry", "SimTicket"]


class Entry:
    """One submitted transaction until its outcome is known."""

    __slots__ = ("done", "event", "held", "outcome", "txn")

    def __init__(self, txn: Txn, held: bool = False) -> None:
        self.txn = txn
        self.outcome: Any = None
        self.done = False
        self.held = held  # held back by `defer`, not yet submitted
        self.event: trio.Event | None = None

    def settle(self, outcome: Any) -> None:
        if self.txn.then is not None:  # handed on before its committer resumes
            outcome = self.txn.hand_on(outcome)
        self.outcome = outcome
        self.done = True
        self.held = False
        if self.event is not None:
            self.event.set()


class SimTicket(Ticket):
    """The ticket of an `Entry`: waiting for one that `defer` holds back
    submits what is held (``submit_deferred``, the journal's)."""

    __slots__ = ("_entry", "_submit_deferred")

    def __init__(self, entry: Entry, submit_deferred: Callable[[], None]) -> None:
        self._entry = entry
        self._submit_deferred = submit_deferred

    @property
    def done(self) -> bool:
        return self._entry.done

    async def wait(self) -> list[int]:
        entry = self._entry
        if entry.held:  # still held back by defer: it goes now
            self._submit_deferred()
        if entry.done:
            await trio.lowlevel.checkpoint()
        else:
            if entry.event is None:
                entry.event = trio.Event()
            await entry.event.wait()
        return unwrap(entry.outcome)
