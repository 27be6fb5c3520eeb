"""An instance's journal writes: a part of `Actor` (``actor.writes``).

Durability barrier: writes that are not visible outside the instance
(taking a message, logging a timer's start, status changes) collect in
``txn`` and ride on the next commit; they are deferred when the instance
suspends (they go with the next commit anyone makes, see `_rides`), and
awaited only at a barrier (before a step's side effect, before completing).
Replay is deterministic, so losing a ridden write in a crash only makes
replay take the same message again.

The part owns what it takes to keep that: the ridden writes, the ticket of
the last ones submitted, the status the journal holds, and the exports
watchers may see while a publish is in flight. The instance's record stays
the actor's; a write of it goes through `put_record`, which changes it only
once the write is in a transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from storage import TERMINAL_STATUSES, InstanceRecord, Ticket, Txn
from storage.errors import Conflict

from .._kernel._transactions import START_RACED

if TYPE_CHECKING:
    from .._kernel._interfaces import ActorAPI
    from .._kernel._log import LogEntry

__all__ = ["Writes"]


class Writes:
    """The journal writes of one live instance (see the module docstring)."""

    __slots__ = (
        "_flights",
        "_flying",
        "_txn",
        "_watch",
        "actor",
        "persisted_status",
        "published",
        "ticket",
    )

    def __init__(self, actor: ActorAPI, persisted_status: str | None) -> None:
        self.actor = actor
        # The ridden writes (see `txn`): none while the instance waits with
        # nothing written since its last flush, which is how most wait.
        self._txn: Txn | None = None
        self.ticket: Ticket | None = None  # of the writes last submitted
        # While a publish is in flight: the exports (version, value) last
        # made durable, which is what watchers see (`Statuses.snapshot`).
        self.published: tuple[int, Any] | None = None
        self.persisted_status = persisted_status  # as the journal has it (None: unknown)
        # The barriers' commits in flight, numbered (see `landed`); the set
        # is made at the first, the event only while someone waits.
        self._flights = 0
        self._flying: set[int] | None = None
        self._watch: trio.Event | None = None

    @property
    def txn(self) -> Txn:
        """The ridden writes (see the module docstring); made at the first.

        Invariant: the ridden writes are the instance's own from the start
        (``chain``, see `_own`), so a suspension's flush fences them only
        on a shared journal."""
        txn = self._txn
        if txn is None:
            txn = self._txn = Txn()
            txn.chain = self.actor.iid
        return txn

    def _sync_status(self) -> None:
        actor = self.actor
        if actor.status != self.persisted_status and not actor.done:
            self.txn.set_status(actor.iid, actor.status)
            self.persisted_status = actor.status

    def unsaved(self) -> bool:
        """Whether something of the instance is not submitted yet."""
        txn = self._txn
        return (txn is not None and bool(txn.ops)) or self.actor.status != self.persisted_status

    def drop(self) -> None:
        """Forget the ridden writes (the instance stays as last committed)."""
        self._txn = None

    def flush(self, *, defer: bool = False) -> None:
        """Submit the ridden writes without waiting; with ``defer``, with
        the next transaction anyone submits (the instance suspends: see
        `_rides`)."""
        if self.actor.status != self.persisted_status:  # (most suspensions: unchanged)
            self._sync_status()
        txn = self._txn
        if txn is not None and txn.ops:
            actor = self.actor
            if actor.fenced:  # (chained already: see `txn`)
                self._own(txn)
            if defer:
                self.ticket = actor.journal.defer(txn)
                rides = actor.system.rides
                if not rides.armed:  # (armed: they go within its window already)
                    rides.deferred()
            else:
                self.ticket = actor.journal.submit(txn)
            self._txn = None

    def submit(self, txn: Txn, then: Callable[[list[int]], None]) -> None:
        """Submit the ridden writes and ``txn`` without waiting; ``then``
        gets ``txn``'s results once they commit (see `storage.Txn.then`).
        A failure is a lost write (`Stalls.write_lost`): the instance is
        loaded again. Only for a journal with one owner: a fence's failure
        is a `Conflict`, which no lost write reports."""
        actor = self.actor
        assert not actor.fenced  # (so the ridden writes, chained when made, are its own)
        self._sync_status()
        pending, self._txn = self.txn, None
        offset = pending.extend(txn)
        pending.then = then if offset == 0 else _from_slot(then, offset)
        self.ticket = actor.journal.submit(pending)

    async def settle(self) -> None:
        """Make everything the instance wrote durable (it leaves memory)."""
        if self.unsaved():
            await self.barrier(durable=True)
        elif self.ticket is not None:
            ticket, self.ticket = self.ticket, None
            await ticket.wait()  # what flush submitted

    async def barrier(
        self,
        txn: Txn | None = None,
        *,
        durable: bool | None = None,
        then: Callable[[list[int]], None] | None = None,
    ) -> list[int]:
        """Commit the ridden writes (plus ``txn``'s) and wait for them;
        ``txn``'s results, by its own slots (all of them without one).
        ``then`` gets those results once they commit, before this returns
        (as soon as the journal learns of it: see `storage.Txn.then`)."""
        prior = self.ticket
        if prior is not None and prior.done:
            # Invariant: nothing of this instance commits after a write of
            # it that failed (the journal keeps that: see storage.Chain and
            # LostChains): its error stops the instance here, and the
            # ridden writes go with it. (Cancelled meanwhile, the caller
            # leaves both as they are, for the next barrier.)
            try:
                await prior.wait()
            except trio.Cancelled:
                raise
            except BaseException:
                if self.ticket is prior:
                    self.ticket = None
                self._txn = None
                raise
            if self.ticket is prior:
                self.ticket = None
        # Invariant: from taking the ridden writes to submitting them nothing
        # yields. Else another task of this actor (an ask's send, its end)
        # could take and submit its own in between, ahead of these: an end
        # committed before the writes of the run it ends, which then set
        # the instance running again.
        persisted = self.persisted_status
        # (An end in ``txn`` puts the record with its status, over anything
        # written before it in the same commit: no running status first.)
        if self.actor.status != persisted and persisted not in TERMINAL_STATUSES:
            self._sync_status()
        pending = self._txn
        self._txn = None
        if pending is None:  # nothing ridden: the caller's own is the commit
            pending, txn = (Txn(), None) if txn is None else (txn, None)
        # ``txn`` may fail its own preconditions (a child's start that lost a
        # race): the ridden writes are then kept for the next commit, never
        # dropped with it. Copied only for such a ``txn``.
        ridden = None
        if txn is not None and txn.requires:
            ridden = Txn()
            ridden.chain = self.actor.iid  # (ridden writes are chained: see `txn`)
            ridden.extend(pending)
        # The caller's results, by its own slots: the ridden writes go first.
        offset = 0 if txn is None else pending.extend(txn)
        if then is not None:
            pending.then = then if offset == 0 else _from_slot(then, offset)
        actor = self.actor
        self._own(pending)
        prior = self.ticket
        self.ticket = None
        self._flights = flight = self._flights + 1
        flying = self._flying
        if flying is None:
            flying = self._flying = set()
        flying.add(flight)
        try:
            # It may be written though its outcome is not learned: mail it
            # carried (a child's end notice, a ctx.send) is read again once
            # the journal answers (see `storage.Txn.in_doubt`).
            pending.in_doubt = self._mail_in_doubt
            results = await actor.journal.commit(pending, durable=durable)
        except Conflict as exc:
            if ridden is not None and exc.reason in START_RACED:
                if self._txn is not None:
                    ridden.extend(self._txn)
                self._txn = ridden
            raise
        finally:
            flying.discard(flight)
            watch = self._watch
            if watch is not None:
                self._watch = None
                watch.set()
        if prior is not None:
            await prior.wait()  # already done (submitted earlier); raises its error
        return results[offset:]

    async def landed(self) -> None:
        """Return once everything the instance wrote before this call has
        been committed (or has failed): its ridden writes (`settle`) and
        the commits of barriers in flight, which may not have reached the
        journal's queue yet (a commit can yield before it submits)."""
        before = set(self._flying or ())
        await self.settle()
        while self._flying and before & self._flying:
            if self._watch is None:
                self._watch = trio.Event()
            await self._watch.wait()

    def _own(self, txn: Txn) -> None:
        """Make ``txn`` one of the instance's own writes: they commit in
        order (`storage.Chain`), fenced with its epoch on a shared journal."""
        actor = self.actor
        txn.chain = actor.iid
        if actor.fenced:
            txn.fence(actor.iid, actor.epoch)

    def _mail_in_doubt(self, txn: Txn) -> None:
        actor = self.actor
        for receiver in sorted(txn.receivers() - {actor.iid}):
            actor.system.router.mail_in_doubt(receiver)

    def ride_log(self, seq: int, entry: LogEntry) -> None:
        """Log ``entry`` at ``seq`` in this run; it rides on the next commit."""
        actor = self.actor
        self.txn.put_log(actor.iid, actor.run, seq, entry.to_stored())

    def put_record(self, txn: Txn, status: str, **changes: Any) -> None:
        """Put the record with ``changes`` and ``status`` in ``txn``."""
        # The record changes only once its write is in ``txn``: a value that
        # does not encode leaves it as it was.
        actor = self.actor
        record = actor.record.evolve(updated=actor.system.epoch_now(), **changes)
        txn.put_instance(
            actor.iid,
            address=actor.address,
            process=actor.proc.template,
            status=status,
            record=record,
        )
        actor.record = record
        self.persisted_status = status

    def update_record(self, **changes: Any) -> None:
        """Change the record; the write rides on the next commit."""
        self.put_record(self.txn, self.actor.status, **changes)

    def publish(self, txn: Txn, exports: Any) -> int:
        """Put new exports in ``txn`` (and the record in memory, so every
        later write carries them); their version. Invariant: watchers see
        exports only once durable: until this write lands they see the ones
        before (`published`, read by `Statuses.snapshot`)."""
        record = self.actor.record
        if self.published is None:
            self.published = (record.exports_version, record.exports)
        version = record.exports_version + 1
        self.put_record(txn, self.actor.status, exports=exports, exports_version=version)
        return version

    def durable_record(self) -> InstanceRecord:
        """The record, with the exports as they are durable: while a publish
        is in flight (or after one failed), the last that landed."""
        record = self.actor.record
        if self.published is None:
            return record
        version, exports = self.published
        return record.evolve(exports=exports, exports_version=version)

    def published_durably(self, version: int, exports: Any) -> None:
        """The write of exports ``version`` landed: watchers may see them."""
        newest = self.actor.record.exports_version
        self.published = None if newest == version else (version, exports)


def _from_slot(then: Callable[[list[int]], None], offset: int) -> Callable[[list[int]], None]:
    """``then``, given the results of a transaction from slot ``offset`` on
    (its own, after ridden writes that take ``offset`` slots; most take
    none, and their callers pass ``then`` itself)."""
    return lambda results: then(results[offset:])
