"""A group commit's batch and the tickets its callers wait on.

A `Batch` goes from the trio thread (which fills it) to the writer thread
(which writes it and sets its outcomes) and back (which finishes it: see
`GroupCommit._finish`). Its callers wait on it three ways, each keeping as
little alive as it can, since a thousand may wait at once and a suspended
instance keeps the ticket of its last writes: parked on a `_Waiter` (the
hot path), on a `BatchTicket`, or on a `_Deferred` held back by `defer`.
"""

from __future__ import annotations

from typing import Any, Protocol

import trio

from ._journal import Ticket, Txn, unwrap


class _Holds(Protocol):
    """What holds deferred transactions back (a `GroupCommit`)."""

    def submit_deferred(self) -> None: ...


__all__ = ["LANDED", "Batch", "BatchTicket"]


class Batch:
    """Transactions that commit together: one commit.

    The trio thread appends to ``txns`` (under the lock) until the writer
    thread takes the batch; the writer then fills in ``outcomes`` and hands
    the batch back. ``waiters``, ``finished`` and ``event`` belong to the
    trio thread alone.
    """

    __slots__ = (
        "born",
        "deferred",
        "durable",
        "event",
        "finished",
        "outcomes",
        "txns",
        "waiters",
    )

    # Made by `GroupCommit._append`, which sets every field (no
    # ``__init__``: a frame less for every batch, which at low load is
    # every commit that goes through the writer thread).
    born: float  # time.monotonic() when made: for the "async" window (see ASYNC_WINDOW_SECONDS)
    txns: list[Txn]
    # Parallel to txns: the caller parked in `GroupCommit.commit` for that
    # txn, or None (submitted without waiting).
    waiters: list[_Waiter | None]
    outcomes: list[Any]  # per txn: its results, or the exception it failed with
    finished: bool  # set in the trio thread once outcomes are final
    event: trio.Event | None  # made only when a `BatchTicket` waits
    # (index, ticket) of the txns `defer` held back: settled at the finish.
    deferred: list[tuple[int, _Deferred]]
    durable: bool  # a caller asked for durability past the journal's own


class _Waiter:
    """A caller parked in `GroupCommit.commit` until its batch is finished,
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


class BatchTicket(Ticket):
    """The ticket of a transaction in ``batch`` at ``index``."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: Batch, index: int) -> None:
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
    """A transaction `defer` holds back: a `BatchTicket` once it goes with a
    batch, a `Settled` once it went with an inline commit."""

    __slots__ = ("_group", "ticket")

    def __init__(self, group: _Holds) -> None:
        # (The transaction is held by the group, not here: a suspended
        # instance keeps its last ticket, and should not keep its ops.)
        self._group = group
        self.ticket: Ticket | None = None

    @property
    def done(self) -> bool:
        return self.ticket is not None and self.ticket.done

    async def wait(self) -> list[int]:
        if self.ticket is None:  # still held back: send it now
            self._group.submit_deferred()
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


LANDED = _Landed()
