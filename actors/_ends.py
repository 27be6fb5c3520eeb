"""How a run ends: completed, failed (compensating first), cancelled,
restarted, kept suspended on a history mismatch, or continued as new.

`Ends` is a base of `Actor`: these are the actor's own transitions, kept
apart from the coordination of mailbox, driver and tasks in `_instance`.
Each records the end in one transaction with what goes with it (timers
cancelled, the parent's end notice), after the live children are cancelled,
depth first, as a trio nursery does.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from storage import InstanceRecord, Txn
from storage.errors import EncodeError

from . import _asks, _effects as fx, _events, _protocol, _saga, _supervision as _sup
from ._log import children_named
from ._records import describe_error, error_summary
from .errors import NonDeterminismError

if TYPE_CHECKING:
    from ._interfaces import ActorAPI as _ActorAPI
    from ._mailbox import Mailbox
else:
    _ActorAPI = object  # for type checkers only: what Actor provides

__all__ = ["Ends"]


class Ends(_ActorAPI):
    """The end-of-run transitions of `Actor` (which holds all the state)."""

    __slots__ = ()

    if TYPE_CHECKING:  # the rest of Actor that these transitions use
        record: InstanceRecord
        run: int
        children: dict[str, int]
        txn: Txn
        mailbox: Mailbox
        woken: bool
        persisted_status: str | None

        def _abandon(self, leaf: fx.Effect[Any]) -> None: ...

        def new_coroutine(self) -> Coroutine[Any, Any, Any]: ...

    async def complete(self, value: Any) -> None:
        """The process returned ``value``: end completed (or restart, if permanent)."""
        try:
            self.driver.check_consumed()
        except NonDeterminismError as exc:
            await self.diverge(exc)
            return
        if await _sup.supervise_end(self, None):
            return  # a permanent instance: restarted
        txn = Txn()
        try:
            self.put_record(txn, "completed", result=value, last_error=None)
        except EncodeError as exc:
            await self.fail(exc)
            return
        await self._end("completed", txn)

    async def fail(self, exc: BaseException, txn: Txn | None = None) -> None:
        """The process raised ``exc``: compensate, end failed (or restart)."""
        _events.crashed(self.address, exc, parent=self.record.parent)
        if await _sup.supervise_end(self, exc):
            return  # restarted instead
        error = describe_error(exc)
        if _saga.pending(self.record):
            if txn is not None:
                self.txn.extend(txn)
            await self._finish_compensation(error, "failed")
            return
        txn = txn or Txn()
        self.put_record(txn, "failed", error=error, last_error=None)
        await self._end("failed", txn)
        await _sup.escalate(self)

    async def _finish_compensation(self, failure: dict[str, Any], end: str) -> None:
        for leaf in list(self.live):
            self._abandon(leaf)
        outcome = await _saga.compensate(self, failure, end)
        if outcome == "compensation_stuck":
            _events.compensation_stuck(self.address, self.record.last_error)
            self.done = True
            self.system.statuses.changed(self.iid)
            self.system.registry.forget(self)
            return
        txn = Txn()
        if end == "failed":
            self.put_record(txn, "failed", error=failure, last_error=None, failure=None)
        else:
            self.put_record(txn, end, last_error=None, failure=None)
        await self._end(end, txn)
        if end == "failed":
            await _sup.escalate(self)

    async def _interrupted(self) -> None:
        interrupt = self.interrupt
        assert interrupt is not None
        kind, detail = interrupt.kind, interrupt.detail
        self.woken = False
        for leaf in list(self.live):
            if type(leaf) is fx.Step and leaf.compensate is not None and kind == "cancel":
                # Cancelled mid-step: it may have applied, so it is compensated too.
                _saga.register(self, leaf, None, possibly_applied=True)
            self._abandon(leaf)
        if kind == "corrupt":
            # Its ridden writes are dropped: it stays as last committed, for a
            # restore or a cleanup, like an instance found corrupt at load.
            self.txn = Txn()
            self.status = "corrupt"
            self.done = True
            await self.system.corruption.mark(self, detail)
            self.system.registry.forget(self)
            return
        if kind == "restart":
            await _sup.restart_actor(self, detail, 0.0)
            return
        if kind == "escalate":
            txn = Txn()
            assert interrupt.message is not None
            txn.take_message(self.iid, interrupt.message)
            await self.fail(_sup.escalation_error(detail), txn)
            return
        # Depth first: the children go before the parent records its own end.
        reason = f"parent {self.address} cancelled"
        # A cancel read at load (a CANCEL in the mailbox of a passivated
        # instance) comes before replay has named the children: the log does.
        children = {**children_named(self.driver.log), **self.children}
        self.children = {}
        if children and not _sup.cancel_marks(self.mailbox.messages.items()):
            # Recorded before it cascades (unless a CANCEL brought it, and
            # says so already): a crash amid the cascade leaves it to be
            # finished at the next open, never half done (see _supervision).
            seq = await _sup.record_cancel(
                self.system,
                self.iid,
                detail,
                compensate=interrupt.compensate,
                epoch=self.epoch if self.fenced else None,
            )
            self.txn.take_message(self.iid, seq)  # with its end
        await _sup.cancel_children(self.system, children, reason)
        # (Asked for by this cancel, or by another that came during the cascade.)
        now = self.interrupt
        asked = now is not None and now.kind == "cancel" and now.compensate
        if (self.proc.compensate_on_cancel or asked) and _saga.pending(self.record):
            self.record = self.record.evolve(reason=detail)
            await self._finish_compensation(_protocol.cancel_failure(detail), "cancelled")
            return
        txn = Txn()
        self.put_record(txn, "cancelled", reason=detail, last_error=None)
        await self._end("cancelled", txn)

    async def _end(self, status: str, txn: Txn) -> None:
        # Depth first, as a trio nursery: live children are cancelled before
        # this end is recorded, so whoever sees it sees no live descendants.
        # (A crash in between: the instance is still live, and its replay
        # ends it again; a cancel was recorded first, see _interrupted.)
        children, self.children = self.children, {}
        await _sup.cancel_children(self.system, children, f"parent {self.address} {status}")
        timers = [(self.run, seq) for seq in self.timers]
        self.timers.clear()
        notice = _protocol.end_of_run(
            txn,
            self.iid,
            address=self.address,
            record=self.record,
            status=status,
            timers=timers,
            now=self.system.epoch_now(),
        )
        # Every ask it owes an answer hears that it ended without one.
        unread = self.mailbox.asks.values() if self.mailbox.asks else ()
        answers = (
            _asks.no_reply(self, txn, status, unread) if unread or self.driver.unanswered else ()
        )
        results = await self.barrier(txn)
        self.status = status
        self.done = True
        self.system.statuses.changed(self.iid)
        self.system.registry.ended(self, status)
        if status == "failed" and not self.record.parent:
            _events.failed(self.address, error_summary(self.record.error))
        if notice is not None:
            self.system.router.route(notice.iid, results[notice.slot], notice.message)
        for after in answers:
            after(results)

    async def diverge(self, exc: BaseException) -> None:
        """Keep the instance suspended with ``last_error`` and ``held`` (never
        failed or lost), and say so (see `_events.stuck`)."""
        held = _events.held_diverged(exc)
        txn = Txn()
        self.put_record(txn, "suspended", last_error=f"{type(exc).__name__}: {exc}", held=held)
        self.status = "suspended"
        await self.barrier(txn, durable=True)
        self.system.statuses.changed(self.iid)
        self.system.registry.forget(self)
        self.system.stalls.stuck(self, held, exc)

    async def continue_as_new(self, effect: fx.ContinueAsNew) -> Coroutine[Any, Any, Any]:
        """End this run and start the next with ``effect.input``; its coroutine."""
        children, self.children = self.children, {}
        await _sup.cancel_children(self.system, children, "continued as new")
        for leaf in list(self.live):
            self._abandon(leaf)
        txn = Txn()
        self.begin_run(txn, input=effect.input, last_error=None)
        answers = []
        if self.driver.unanswered:  # taken by this run, never to be answered by the next
            answers = _asks.no_reply(self, txn, "continued as new", ())
        # Invariant: the next run starts in memory only once it is recorded.
        # Started on a write still in flight, it would run (and key its steps
        # with its run number) even if the write failed, and the run
        # replayed from the journal later would hand the same keys to other
        # work. So it is awaited whatever the durability ("async" would
        # acknowledge it once queued).
        results = await self.barrier(txn, durable=True)
        for after in answers:
            after(results)
        self.driver.load({})
        return self.new_coroutine()

    def begin_run(self, txn: Txn, **changes: Any) -> None:
        """Into ``txn``: drop this run's log and timers, and record the next
        run (with ``changes`` to the record), status running."""
        timers = [(self.run, seq) for seq in self.timers]
        self.timers.clear()
        record = self.record.evolve(run=self.run, updated=self.system.epoch_now(), **changes)
        self.record = _protocol.next_run(
            txn,
            self.iid,
            address=self.address,
            process=self.proc.template,
            record=record,
            timers=timers,
        )
        self.run = self.record.run
        self.persisted_status = "running"
