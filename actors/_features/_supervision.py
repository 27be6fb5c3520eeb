"""The supervisor tree: children and cascade cancellation (restarts and
escalation: `_restarts`).

Model (after trio's cancel scopes): the public objects are handles; the
private tree is implied by the journal. A child's record names its parent,
and a parent's current run knows its children from its log (each
``call``/``spawn`` effect names the child's address), so the tree needs no
extra index and survives restarts. Every cancellation and restart carries a
readable reason ("parent orders/o-17 completed", "restart 2 after
RuntimeError('boom')").

- An awaited child (``ctx.call``) reports its end to the parent with a system
  message written in the same transaction as the child's terminal record,
  so a parent that was passivated, or a system that was down, misses nothing.
- When an instance ends (completes, fails, is cancelled, continues as new
  or restarts), its live children are cancelled, depth first.
- A child that crashes is restarted per its restart type, or its parent is
  told to crash (`_restarts`); the signals that carry a cancel, a restart or
  an escalation to an instance are named here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import trio

from storage import LIVE_STATUSES, UNFINISHED_STATUSES, Txn, instance_id
from storage.errors import CommitOutcomeUnknown, Conflict, JournalClosed, JournalFull

from .._kernel import _effects as fx, _tracing
from .._kernel._failures import ErrorRecord, error_summary
from .._kernel._handles import ChildHandle
from .._kernel._interfaces import ActorAPI, SystemAPI
from .._kernel._log import LogEntry
from .._kernel._message_txns import system_send_txn
from .._kernel._transactions import START_RACED, end_payload, read_for_start, start_txn
from .._kernel._values import Signal
from ..errors import ActorError

# Errors of the journal itself while a child is created: they go to the
# actor's task as a step's do (see `Actor.main`), never into the process.
# (A start that lost a race is not one: `create_child` reads again.)
JOURNAL_ERRORS = (JournalFull, JournalClosed, Conflict)

ESCALATE = Signal._system("\x00escalate")
CANCEL = Signal._system("\x00cancel")  # to the owner on another node
RESTART = Signal._system("\x00restart")  # likewise (a sibling crashed)


# -- creating children -----------------------------------------------------------


class SpawnBehaviour(fx.Behaviour):
    """A spawn is done once its child exists."""

    @staticmethod
    def start(actor: ActorAPI, effect: fx.Spawn[Any], started: LogEntry | None) -> None:
        actor.start_task(_create, effect)

    @staticmethod
    def abandon(actor: ActorAPI, effect: fx.Spawn[Any]) -> None:
        _abandon_child_effect(actor, effect)


class CallBehaviour(fx.Behaviour):
    """A call is a spawn whose end it waits for, as a message."""

    @staticmethod
    def start(actor: ActorAPI, effect: fx.Call[Any], started: LogEntry | None) -> None:
        if started is not None:
            _await_end(actor, effect)  # created in an earlier activation of this run
            return
        actor.start_task(_create, effect)

    @staticmethod
    def abandon(actor: ActorAPI, effect: fx.Call[Any]) -> None:
        actor.arrivals.remove_wait(effect)
        _abandon_child_effect(actor, effect)

    @staticmethod
    def take(actor: ActorAPI, call: fx.Call[Any], signal: Signal, seq: int, payload: Any) -> None:
        actor.finish(call, *end_outcome(call, payload, seq))  # (its child's end message)


def _await_end(actor: ActorAPI, call: fx.Call[Any]) -> None:
    actor.add_child(call.address, call.seq)
    actor.arrivals.add_wait(call)


async def _create(actor: ActorAPI, effect: Any) -> None:
    system = actor.system
    effect.creating = True
    try:
        # Shielded: once the child's creation is submitted, this task must
        # see it through, so that a child created while its parent was being
        # cancelled (or lost a race) is cancelled here rather than left running.
        with trio.CancelScope(shield=True):
            try:
                ended = await create_child(system, actor, effect)
            except JOURNAL_ERRORS as exc:
                # The journal's trouble, not the parent's: nothing of the
                # creation was written, and the actor rides it out as it does
                # a step's write (stalled while the journal is full, loaded
                # again once a lost journal answers), its replay making the
                # child then. But an outcome unknown may have been written:
                # then the child exists and nothing runs it, so it is
                # brought in once the journal answers (if it is not there,
                # that does nothing).
                if isinstance(exc, CommitOutcomeUnknown):
                    system.registry.spawn_system_task(
                        system.registry.reload_when_back, instance_id(effect.address)
                    )
                raise
            except Exception as exc:  # a bad definition or input: raise it in the parent
                actor.finish(effect, None, exc, None)
                return
            finally:
                effect.creating = False
            if effect not in actor.live or actor.interrupt is not None or actor.done:
                why = (
                    f"lost race in {actor.address}"
                    if actor.interrupt is None and not actor.done
                    else f"parent {actor.address} cancelled"
                )
                await system.lifecycle.cancel_iid(instance_id(effect.address), effect.address, why)
                return
        if not effect.awaited:  # a spawn is done once its child exists
            actor.finish(effect, ChildHandle._create(system, effect.address), None, None)
        elif ended is not None:  # (its outcome is logged: see _create_once)
            value, error, _ = ended
            actor.finish(effect, value, error, None)
        else:
            _await_end(actor, effect)
    finally:
        actor.task_finished()


async def create_child(
    system: SystemAPI, parent: ActorAPI, effect: Any
) -> tuple[Any, Any, LogEntry] | None:
    """Create the child of a call/spawn effect, or find the one already there,
    logging the parent's effect in the same transaction.

    Returns the call's outcome (value, error, its logged entry: see
    `end_outcome`) where the awaited child had already finished (a call to
    an existing, finished address), else None.
    """
    while True:
        try:
            return await _create_once(system, parent, effect)
        except Conflict as exc:
            if exc.reason not in START_RACED:
                raise
            # Another start of that address committed first: read it again.


async def _create_once(
    system: SystemAPI, parent: ActorAPI, effect: Any
) -> tuple[Any, Any, LogEntry] | None:
    proc = system.registry.definition(effect.proc)
    address = effect.address
    iid = instance_id(address)
    row, floor = await system.journal.read(lambda r: read_for_start(r, iid))
    if not effect.awaited:  # a spawn logs its child's address as its value
        entry = effect.describe(value=address)
    else:
        entry = effect.describe(child=address)
    txn = Txn()
    fresh = row is None or row.status == "cancelled"
    ended: tuple[Any, Any, LogEntry] | None = None
    if fresh:
        # The child runs on its stored input, never on the parent's objects.
        start = start_txn(
            iid,
            address=address,
            process=proc.template,
            params=effect.params,
            input=effect.input,
            parent=parent.address,
            previous=row,
            floor=floor,
            now=system.epoch_now(),
            child={
                "restart": getattr(effect, "restart", "temporary"),
                "awaited": effect.awaited,
                "restarts": [],
            },
            trace=_tracing.traceparent(system),
            status="running" if effect.gate is None else effect.gate.status,
            index=bool(proc.listens),
        )
        txn, record = start.txn, start.record
        if effect.gate is not None:  # it waits behind its gate (a queue's slot) to run
            effect.gate.hold(txn, iid, address)
    elif row is not None and row.status not in LIVE_STATUSES and effect.awaited:
        # Invariant: a call to a child that had ended already is logged with
        # its outcome, never a started record. No end message will come
        # (it went to whoever awaited the child then), so a replay from a
        # started record (the outcome's own write lost, say to a full
        # journal) would wait for one for ever.
        ended = end_outcome(effect, end_payload(row.status, row.record))
        entry = ended[2]
    parent.add_child(address, effect.seq)
    txn.put_log(parent.iid, parent.run, effect.seq, entry.to_stored())
    await parent.writes.barrier(txn)
    if fresh and effect.gate is not None:
        system.statuses.changed(iid)
        effect.gate.committed()
    elif fresh:
        system.registry.run_created(iid, address, proc, record)
        system.statuses.changed(iid)
    return ended


def end_outcome(
    call: fx.Call[Any] | fx.Join[Any], payload: dict[str, Any], message: int | None = None
) -> tuple[Any, Any, LogEntry]:
    """(value, error, log entry) of a call or join effect from its child's
    end payload (``message``: the id of the end message a call took)."""
    if payload.get("status") == "completed":
        result = payload.get("result")
        return result, None, call.describe(value=result, message=message)
    cause = (
        payload.get("error")
        or ErrorRecord.cancelled(payload.get("reason") or "cancelled").to_stored()
    )
    summary = f"child {call.address!r} {payload.get('status')}: {error_summary(cause)}"
    record = ErrorRecord(raises="ChildFailed", child=call.address, cause=cause, summary=summary)
    entry = call.describe(error=record.to_stored(), message=message)
    return None, record.exception(), entry


def _abandon_child_effect(actor: ActorAPI, effect: Any) -> None:
    """A call/spawn lost a race (or its join failed): cancel that child."""
    if effect.creating:
        return  # its creating task cancels the child once it exists
    system = actor.system
    address = effect.address
    system.registry.spawn_system_task(
        system.lifecycle.cancel_iid, instance_id(address), address, f"lost race in {actor.address}"
    )


# -- cascade -----------------------------------------------------------------------
#
# A cancel cascades depth first: the children are cancelled, each in its
# own commit, before the parent records its own end. So that a crash amid
# the cascade cannot leave a tree half cancelled for good, a parent records
# that its cancel has begun first, in one commit: a CANCEL message in its
# own mailbox (`record_cancel`), taken with its cancelled record.
# Invariant: an instance whose cancel has cascaded to any child and that is
# still live has a CANCEL in its mailbox; the next open activates it (it has
# mail), it reads the CANCEL at load and finishes the cancel, children first.
# (An end that is not a cancel needs no such record: the instance is still
# live, and its replay ends it, and cascades, again.)


def cancel_marks(mail: Iterable[tuple[int, Any]]) -> list[int]:
    """The message ids of the CANCELs among ``mail``: ``(id, message)``
    pairs, each message a sequence whose first item is its signal name
    (`Reader.mailbox`, or `Mailbox.messages`' items)."""
    return [seq for seq, message in mail if message[0] == CANCEL.name]


async def record_cancel(
    system: SystemAPI,
    iid: bytes,
    reason: str,
    *,
    compensate: bool = False,
    epoch: int | None = None,
) -> int:
    """Record, before its children are cancelled, that the cancel of the
    unfinished instance ``iid`` has begun: a CANCEL message in its own
    mailbox (with ``compensate``, one that asks for its compensations, as
    `ActorSystem.cancel` may), committed (fenced with ``epoch``, if given)
    before this returns. The caller takes it (`Txn.take_message`) with the
    instance's end.

    Returns the message's id.

    Raises:
        Conflict: the instance is finished (or, fenced, owned elsewhere);
            nothing was written.
    """
    payload: dict[str, Any] = {"reason": reason}
    if compensate:
        payload["compensate"] = True
    txn, notice = system_send_txn(iid, CANCEL.name, payload, system.epoch_now())
    txn.require(iid, UNFINISHED_STATUSES)  # (so the commit is awaited, whatever the durability)
    if epoch is not None:
        txn.fence(iid, epoch)
    results = await system.journal.commit(txn)
    seq: int = results[notice.slot]
    return seq


async def cancel_children(system: SystemAPI, children: dict[str, int], reason: str) -> None:
    """Cancel every live child (and, through them, their descendants).

    Raises:
        the first error of the runtime's (`ActorError`) that a child's cancel
        met, the others chained to it; never an ExceptionGroup of them, so a
        caller's ``except JournalUnavailable`` sees what happened.
    """
    if not children:
        return
    try:
        async with trio.open_nursery() as nursery:
            for address in children:
                nursery.start_soon(
                    system.lifecycle.cancel_iid, instance_id(address), address, reason
                )
    except BaseExceptionGroup as group:
        matched, rest = group.split(ActorError)
        if matched is None or rest is not None:
            raise
        first = matched.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from group
