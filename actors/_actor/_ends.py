"""How a run ends: completed, failed (compensating first), cancelled,
restarted, kept suspended on a history mismatch, or continued as new.

`Ends` is a part of `Actor` (``actor.ends``): these are the actor's own
transitions, kept apart from the coordination of mailbox, driver and tasks
in `_instance`; so is the reading of what an error out of a run means
(`Ends.broke`). The part keeps whom the instance escalates to when it fails.
Each records the end in one transaction with what goes with it (timers
cancelled, the parent's end notice), after the live children are cancelled,
depth first, as a trio nursery does.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast

from storage import Txn
from storage.errors import (
    Conflict,
    EncodeError,
    JournalFull,
    JournalUnavailable,
)

from .._features import _restarts, _saga, _supervision as _sup
from .._kernel import _effects as fx, _reports, _transactions
from .._kernel._failures import ErrorRecord, describe_error, error_summary
from .._kernel._log import children_named
from ..errors import NonDeterminismError

if TYPE_CHECKING:
    from .._kernel._interfaces import ActorAPI

__all__ = ["Ends"]

E = TypeVar("E", bound=BaseException)


class Ends:
    """How a run of an `Actor` ends: a part of it (see the module docstring)."""

    __slots__ = ("actor", "escalate_to")

    def __init__(self, actor: ActorAPI) -> None:
        self.actor = actor
        # (parent, why, strategy): when the instance ends failed, the parent
        # to tell to crash (see `_supervision`).
        self.escalate_to: tuple[Any, ...] | None = None

    def escalate_on_end(self, parent: str, why: str, strategy: Any) -> None:
        """When this instance ends failed, tell ``parent`` to crash (see `_supervision`)."""
        self.escalate_to = (parent, why, strategy)

    async def complete(self, value: Any) -> None:
        """The process returned ``value``: end completed (or restart, if permanent)."""
        actor = self.actor
        try:
            actor.driver.check_consumed()
        except NonDeterminismError as exc:
            await self.diverge(exc)
            return
        if await _restarts.supervise_end(actor, None):
            return  # a permanent instance: restarted
        txn = Txn()
        try:
            actor.writes.put_record(txn, "completed", result=value, last_error=None)
        except EncodeError as exc:
            await self.fail(exc)
            return
        await self._end("completed", txn)

    async def fail(self, exc: BaseException, txn: Txn | None = None) -> None:
        """The process raised ``exc``: compensate, end failed (or restart)."""
        actor = self.actor
        _reports.crashed(actor.address, exc, parent=actor.record.parent)
        if await _restarts.supervise_end(actor, exc):
            return  # restarted instead
        error = describe_error(exc)
        if _saga.pending(actor.record):
            if txn is not None:
                actor.writes.txn.extend(txn)
            await self.finish_compensation(error, "failed")
            return
        txn = txn or Txn()
        actor.writes.put_record(txn, "failed", error=error, last_error=None)
        await self._end("failed", txn)
        await _restarts.escalate(actor)

    async def finish_compensation(self, failure: dict[str, Any], end: str) -> None:
        actor = self.actor
        for leaf in list(actor.live):
            actor.abandon(leaf)
        outcome = await _saga.compensate(actor, failure, end)
        if outcome == "compensation_stuck":
            _reports.compensation_stuck(actor.address, actor.record.last_error)
            actor.done = True
            actor.system.statuses.changed(actor.iid)
            actor.system.registry.forget(actor)
            return
        txn = Txn()
        if end == "failed":
            actor.writes.put_record(txn, "failed", error=failure, last_error=None, failure=None)
        else:
            actor.writes.put_record(txn, end, last_error=None, failure=None)
        await self._end(end, txn)
        if end == "failed":
            await _restarts.escalate(actor)

    async def interrupted(self) -> None:
        actor = self.actor
        interrupt = actor.interrupt
        assert interrupt is not None
        kind, detail = interrupt.kind, interrupt.detail
        actor.woken = False
        for leaf in list(actor.live):
            if kind == "cancel" and leaf.compensable():
                # Cancelled mid-step: it may have applied, so it is compensated too.
                _saga.register(actor, cast("fx.Step[Any]", leaf), None, possibly_applied=True)
            actor.abandon(leaf)
        if kind == "corrupt":
            # Its ridden writes are dropped: it stays as last committed, for a
            # restore or a cleanup, like an instance found corrupt at load.
            actor.writes.drop()
            actor.status = "corrupt"
            actor.done = True
            await actor.system.corruption.mark(actor, detail)
            actor.system.registry.forget(actor)
            return
        if kind == "restart":
            await _restarts.restart_actor(actor, detail, 0.0)
            return
        if kind == "park":
            error, held = detail
            await self.diverge(error, held)
            return
        if kind == "escalate":
            txn = Txn()
            assert interrupt.message is not None
            txn.take_message(actor.iid, interrupt.message)
            await self.fail(_restarts.escalation_error(detail), txn)
            return
        # Depth first: the children go before the parent records its own end.
        reason = f"parent {actor.address} cancelled"
        # A cancel read at load (a CANCEL in the mailbox of a passivated
        # instance) comes before replay has named the children: the log does.
        children = {**children_named(actor.driver.log), **(actor.children or {})}
        actor.children = None
        if children and not _sup.cancel_marks(actor.mailbox.messages.items()):
            # Recorded before it cascades (unless a CANCEL brought it, and
            # says so already): a crash amid the cascade leaves it to be
            # finished at the next open, never half done (see _supervision).
            seq = await _sup.record_cancel(
                actor.system,
                actor.iid,
                detail,
                compensate=interrupt.compensate,
                epoch=actor.epoch if actor.fenced else None,
            )
            actor.writes.txn.take_message(actor.iid, seq)  # with its end
        await _sup.cancel_children(actor.system, children, reason)
        # (Asked for by this cancel, or by another that came during the cascade.)
        now = actor.interrupt
        asked = now is not None and now.kind == "cancel" and now.compensate
        if (actor.proc.compensate_on_cancel or asked) and _saga.pending(actor.record):
            actor.record = actor.record.evolve(reason=detail)
            await self.finish_compensation(ErrorRecord.cancelled(detail).to_stored(), "cancelled")
            return
        txn = Txn()
        actor.writes.put_record(txn, "cancelled", reason=detail, last_error=None)
        await self._end("cancelled", txn)

    async def _end(self, status: str, txn: Txn) -> None:
        actor = self.actor
        # Depth first, as a trio nursery: live children are cancelled before
        # this end is recorded, so whoever sees it sees no live descendants.
        # (A crash in between: the instance is still live, and its replay
        # ends it again; a cancel was recorded first, see interrupted.)
        children, actor.children = actor.children, None
        if children:  # (most runs have none: no call)
            await _sup.cancel_children(actor.system, children, f"parent {actor.address} {status}")
        timers = actor.arrivals.take_timers() if actor.arrivals.timers else []
        notice = _transactions.end_of_run(
            txn,
            actor.iid,
            address=actor.address,
            record=actor.record,
            status=status,
            timers=timers,
            now=actor.system.epoch_now(),
        )
        # What features owe at its end (an ask it did not answer hears so).
        answers = actor.system.wiring.run_ended(actor, txn, status)
        results = await actor.writes.barrier(txn)
        actor.status = status
        actor.done = True
        actor.system.statuses.changed(actor.iid)
        actor.system.registry.ended(actor, status)
        if status == "failed" and not actor.record.parent:
            _reports.failed(actor.address, error_summary(actor.record.error))
        if notice is not None:
            actor.system.router.route(notice, results)
        for after in answers:
            after(results)

    async def diverge(self, exc: BaseException, held: str | None = None) -> None:
        """Keep the instance suspended with ``last_error`` and ``held`` (never
        failed or lost), and say so (see `_reports.stuck`). Without ``held``,
        ``exc`` is what its replay raised; with it, ``exc``'s message is the
        whole ``last_error`` (a step's crash budget spent, see `_steps`)."""
        actor = self.actor
        if held is None:
            held = _reports.held_diverged(exc)
            last_error = f"{type(exc).__name__}: {exc}"
        else:
            last_error = str(exc)
        txn = Txn()
        actor.writes.put_record(txn, "suspended", last_error=last_error, held=held)
        actor.status = "suspended"
        await actor.writes.barrier(txn, durable=True)
        actor.system.statuses.changed(actor.iid)
        actor.system.registry.forget(actor)
        actor.system.stalls.stuck(actor, held, exc)

    async def continue_as_new(self, effect: fx.ContinueAsNew) -> Coroutine[Any, Any, Any]:
        """End this run and start the next with ``effect.input``; its coroutine."""
        actor = self.actor
        children, actor.children = actor.children, None
        if children:
            await _sup.cancel_children(actor.system, children, "continued as new")
        for leaf in list(actor.live):
            actor.abandon(leaf)
        txn = Txn()
        self.begin_run(txn, input=effect.input, last_error=None)
        # (An ask this run took is never answered by the next: it hears so.)
        answers = actor.system.wiring.run_ended(actor, txn, "continued as new", unread=False)
        # Invariant: the next run starts in memory only once it is recorded.
        # Started on a write still in flight, it would run (and key its steps
        # with its run number) even if the write failed, and the run
        # replayed from the journal later would hand the same keys to other
        # work. So it is awaited whatever the durability ("async" would
        # acknowledge it once queued).
        results = await actor.writes.barrier(txn, durable=True)
        for after in answers:
            after(results)
        actor.driver.load({})
        return actor.new_coroutine()

    def begin_run(self, txn: Txn, **changes: Any) -> None:
        """Into ``txn``: drop this run's log and timers, and record the next
        run (with ``changes`` to the record), status running."""
        actor = self.actor
        timers = actor.arrivals.take_timers()
        record = actor.record.evolve(run=actor.run, updated=actor.system.epoch_now(), **changes)
        actor.record = _transactions.next_run(
            txn,
            actor.iid,
            address=actor.address,
            process=actor.proc.template,
            record=record,
            timers=timers,
        )
        actor.run = actor.record.run
        actor.writes.persisted_status = "running"

    def broke(self, exc: Exception) -> bool:
        """The run stopped with ``exc``: if it means that the journal is
        full or lost, or that another node owns the instance now, leave
        memory for the part of the system that brings it back (or for that
        node), and True. False for anything else: a bug, for the caller to
        raise again.

        The instance is as the journal last committed it in each case:
        nothing of a write that failed was written."""
        actor = self.actor
        if (
            isinstance(exc, BaseExceptionGroup)
            and _alone(exc, JournalFull) is None
            and exc.split((JournalFull, JournalUnavailable))[1] is None
        ):
            # Its own writes met a full journal and a lost one at once (a
            # task of its own, an ask, beside its run): load it again
            # once the journal answers, as for a lost journal alone.
            exc = _first(exc, JournalUnavailable)
        full = _alone(exc, JournalFull)
        if full is not None:
            # Our own write found no room: nothing of it was written, so
            # the journal still holds a state replay resumes from. Never
            # take the system down for it; it retries when there is room.
            actor.lost = None  # (reloaded as one stalled)
            actor.done = True
            actor.status = "suspended"
            actor.record = actor.record.evolve(last_error=f"{type(full).__name__}: {full}")
            actor.system.stalls.stalled(actor, full)
            return True
        unavailable = _alone(exc, JournalUnavailable)
        if unavailable is not None:
            # The journal's connection was lost (a database outage): load
            # the instance again once it answers, from what was committed.
            actor.lost = None  # (reloaded as one whose journal was lost)
            actor.system.registry.journal_lost(actor.iid, unavailable)
            return True
        if actor.lost is not None and _alone(exc, Conflict) is not None:
            # A write of its own was lost before this one (an "async" start
            # that met a full journal, say: see `Stalls.write_lost`), so the
            # journal does not hold what memory does, and a write that
            # requires it (the record of a cancel begun) is refused: leave
            # memory and be loaded again from what was committed (`gone`).
            return True
        lost = _lost_ownership(exc)
        if lost is None:
            return False
        # Another node took the instance over (this one froze past its
        # lease, say): the fence rejected our write; leave it to them.
        _reports.taken_over(actor.address, actor.system.node, lost)
        return True


def _alone(exc: BaseException, kind: type[E]) -> E | None:
    """``exc`` if it is a ``kind``, or a group holding nothing else."""
    while isinstance(exc, BaseExceptionGroup):
        if exc.split(kind)[1] is not None:
            return None  # something else failed too: that must not be hidden
        exc = exc.exceptions[0]
    return exc if isinstance(exc, kind) else None


def _first(exc: BaseException, kind: type[E]) -> E:
    """The first ``kind`` among ``exc``'s leaves (there is one)."""
    if isinstance(exc, BaseExceptionGroup):
        found: BaseException | None = exc.split(kind)[0]
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        assert found is not None
        exc = found
    assert isinstance(exc, kind)
    return exc


def _lost_ownership(exc: BaseException) -> Conflict | None:
    if isinstance(exc, Conflict) and exc.reason == "epoch":
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _lost_ownership(inner)
            if found is not None:
                return found
    return None
