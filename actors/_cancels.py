"""Cancelling and restarting instances, in memory or on disk, here or on
another node: the internals behind `ActorSystem.cancel` and supervision's
restarts.

Invariant (see `Cancels._cancel_iid`): a cancel wins over a restart.
`Cancels` is a base of `ActorSystem`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from storage import LIVE_STATUSES, UNFINISHED_STATUSES, Txn
from storage.errors import Conflict

from . import _asks, _protocol, _saga, _supervision as _sup
from ._log import children_named
from ._queues import waiting_rows
from .errors import UnknownProcess

if TYPE_CHECKING:
    from ._activation import Holds
    from ._instance import Actor
    from ._interfaces import SystemAPI as _SystemAPI
else:
    _SystemAPI = object  # for type checkers only: what ActorSystem provides


class Cancels(_SystemAPI):
    """The cancel and restart half of `ActorSystem` (see the module docstring)."""

    # Set up by ActorSystem.__init__ (see there for what each holds).
    _live: dict[bytes, Actor]
    _activating: Holds
    _landing: dict[bytes, trio.Event]
    _cancelling: dict[bytes, trio.Event]
    _creating: dict[bytes, trio.Event]
    _closing: bool

    async def _cancel_iid(
        self, iid: bytes, address: str, reason: str, *, compensate: bool = False
    ) -> bool:
        # Invariant: a cancel wins over a restart. An actor told to cancel
        # while it crashes may still write its restart and leave memory
        # (the next run waits out a delay in _activate_later, or is being
        # activated); so until an actor ends, whatever it left live on disk
        # is cancelled in turn, with activations of it held off meanwhile.
        while True:
            actor = self._live.get(iid)
            if actor is not None and not actor.done:
                actor.cancel(reason, compensate=compensate)
                while not actor.done and self._live.get(iid) is actor:
                    await self._status_event(iid).wait()
                if actor.done and actor.status not in LIVE_STATUSES:
                    return actor.status == "cancelled"
                continue  # it left memory still live (restarted): cancel that
            writing = self._cancelling.get(iid)
            if writing is not None:
                # Another cancel of it is being written: live when this one
                # came, it is cancelled once that one is through.
                await writing.wait()
                if self._snapshot(iid)[0] == "cancelled":
                    return True
                continue
            creating = self._creating.get(iid)
            if creating is not None:
                # A start of it here (or a retry, a fork) is deciding: its
                # actor runs with the claim that start makes, later than one
                # made here, so a cancel written on disk meanwhile would be
                # overwritten as it runs. Let it finish, then cancel what it
                # brought into memory.
                await creating.wait()
                continue
            landing = self._landing.get(iid)
            if landing is not None:
                # An activation waits for what was in flight ("async"): let
                # it land, then cancel what it brings into memory.
                await landing.wait()
                continue
            if iid in self._activating:
                # An activation is under way (a read or two): let it finish,
                # then cancel what it brings into memory.
                await self._activating.wait_released(iid)
                continue
            self._activating.add(iid)  # _activate leaves it alone while this is written
            self._cancelling[iid] = writing = trio.Event()
            try:
                done = await self._cancel_on_disk(iid, address, reason, compensate)
            except BaseException:
                # Not cancelled (a full or lost journal): it stays live, and
                # mail routed to it meanwhile found its activation held off.
                self._spawn_system_task(self._activate_later, iid, 0.0)
                raise
            finally:
                del self._cancelling[iid]
                self._activating.discard(iid)
                writing.set()
            if done is not None:
                return done
            if self._closing:
                return False  # it compensates, and ends cancelled, after the next open
            self._activate(iid)  # to run its compensations; it ends cancelled after them

    async def _cancel_on_disk(
        self, iid: bytes, address: str, reason: str, compensate: bool = False
    ) -> bool | None:
        """Cancel an instance that is not in memory here (the caller holds
        off its activation). None: it runs its compensations first, as
        recorded now (or before), once activated."""
        row, timers, log, mail = await self.journal.read(lambda r: _on_disk(r, iid))
        if row is None or row.status not in UNFINISHED_STATUSES:
            return False
        if row.status == "queued":
            return await self._cancel_queued(row, address, reason, compensate)
        compensating = self._compensates(row, compensate)
        epoch = await self.journal.claim(iid)
        if epoch is None:
            return await self._cancel_remote(iid, address, reason, compensate)
        if compensating and row.record.failure is not None:
            return None  # compensating already: it ends once they have run
        fence = epoch if self.journal.shared else None
        # Depth first: its children go before it records its own end; and
        # before them, that its cancel has begun (unless a CANCEL in its
        # mailbox says so already): see _supervision's cascade.
        children = children_named(log)
        if children and not _sup.cancel_marks(mail):
            try:
                await _sup.record_cancel(self, iid, reason, compensate=compensate, epoch=fence)
            except Conflict:
                return False  # it ended meanwhile (or is owned elsewhere now)
        await _sup.cancel_children(self, children, f"parent {row.address} cancelled")
        txn, notices = _protocol.cancel_txn(
            [_protocol.Cancel(row, timers, reason, fence, compensate=compensating)],
            self.epoch_now(),
        )
        mail = await self.journal.read(lambda r: r.mailbox(iid))
        # The cancel it records is the one each CANCEL asked for.
        for seq in _sup.cancel_marks(mail):
            txn.take_message(iid, seq)
        # Every ask it owes an answer hears that it ended without one (one
        # that compensates first: those its run took; its end, the unread).
        owed = _asks.unanswered_on_disk(log, () if compensating else mail)
        answers = [_asks.answer(self, txn, ask, {"ended": "cancelled"}) for ask in owed]
        try:
            results = await self.journal.commit(txn)
        except Conflict:
            return False
        self._status_changed(iid)
        for notice in notices:
            self._route(notice.iid, results[notice.slot], notice.message)
        for after in answers:
            after(results)
        return None if compensating else True

    def _compensates(self, row: Any, compensate: bool) -> bool:
        """Whether cancelling the live instance of ``row`` runs its pending
        saga compensations first: asked for, its process says so
        (``compensate_on_cancel``), or it is compensating already. Only a
        system that registers its process can run them.

        Raises:
            UnknownProcess: they were asked for, but its process is not registered here.
        """
        if row.status not in LIVE_STATUSES or not _saga.pending(row.record):
            return False
        proc = self._procs.get(row.process)
        if proc is None:
            if compensate:
                raise UnknownProcess(
                    f"cannot run the compensations of {row.address!r} here: its process "
                    f"{row.process!r} is not registered by this system; pass it in "
                    "open_system(processes=[...]), or cancel without compensate=True"
                )
            return False
        return compensate or proc.compensate_on_cancel or row.record.failure is not None

    async def _cancel_queued(
        self, row: Any, address: str, reason: str, compensate: bool = False
    ) -> bool | None:
        """Cancel a queued instance: nothing runs it, so no node need own it;
        it leaves its queue in the same transaction."""
        iid = row.iid
        states = await self.journal.read(lambda r: waiting_rows(r, iid))
        txn, notices = _protocol.cancel_txn(
            [_protocol.Cancel(row, (), reason, None, states)], self.epoch_now()
        )
        # Unclaimed, so only while it is still queued: once a queue started
        # it, its owner cancels it (the next round of this loop).
        txn.require(iid, frozenset({"queued"}))
        try:
            results = await self.journal.commit(txn)
        except Conflict:
            return await self._cancel_on_disk(iid, address, reason, compensate)
        self._status_changed(iid)
        for notice in notices:
            self._route(notice.iid, results[notice.slot], notice.message)
        return True

    async def _cancel_remote(
        self, iid: bytes, address: str, reason: str, compensate: bool = False
    ) -> bool:
        """Cancel an instance another live node owns: ask it, and wait (a while)."""
        payload: dict[str, Any] = {"reason": reason}
        if compensate:
            payload["compensate"] = True
        await self._send_system(iid, address, _sup.CANCEL, payload)
        with trio.move_on_after(10):
            while True:
                row = await self.journal.read(lambda r: r.instance(iid))
                if row is None or row.status not in LIVE_STATUSES:
                    return row is not None and row.status == "cancelled"
                await trio.sleep(0.02)
        return False

    async def _restart_iid(self, iid: bytes, address: str, reason: str) -> None:
        """Restart a live instance afresh (a sibling's crash under OneForAll/RestForOne)."""
        actor = self._live.get(iid)
        if actor is not None and not actor.done:
            actor.restart(reason)  # a cancel asked of it first wins
            return
        if iid in self._cancelling:
            return  # a cancel of it is being written: it wins
        row = await self.journal.read(lambda r: r.instance(iid))
        if row is None or row.status not in LIVE_STATUSES:
            return
        # Only its owner writes to it: this node, once it claims it (then
        # read again: what the last owner wrote), else the live node that
        # runs it, asked as a cancel is (see _cancel_remote).
        epoch = await self.journal.claim(iid)
        if epoch is None:
            await self._send_system(iid, address, _sup.RESTART, {"reason": reason})
            return
        row, timers, log, _ = await self.journal.read(lambda r: _on_disk(r, iid, mail=False))
        if row is None or row.status not in LIVE_STATUSES:
            return
        await _sup.cancel_children(self, children_named(log), f"{address} is restarting")
        restarts = _sup.next_restarts(row.record, reason, self.epoch_now())
        txn = Txn()
        txn.require(iid, LIVE_STATUSES)
        if self.journal.shared:
            txn.fence(iid, epoch)
        _protocol.next_run(
            txn,
            iid,
            address=address,
            process=row.process,
            record=row.record.evolve(restarts=restarts, updated=self.epoch_now()),
            timers=[(timer.run, timer.seq) for timer in timers],
        )
        owed = _asks.unanswered_on_disk(log, ())  # taken by the run that ends here
        answers = [_asks.answer(self, txn, ask, {"ended": "restarted"}) for ask in owed]
        try:
            results = await self.journal.commit(txn)
        except Conflict:
            return
        for after in answers:
            after(results)
        self._status_changed(iid)
        self._activate(iid)


def _on_disk(r: Any, iid: bytes, *, mail: bool = True) -> tuple[Any, Any, Any, Any]:
    """(row, timers, current run's log, unread mail or [] without ``mail``)
    of an instance on disk."""
    row = r.instance(iid)
    if row is None:
        return None, [], {}, []
    unread = r.mailbox(iid) if mail else []
    return row, r.timers(iid), r.entries(iid, row.record.run), unread
