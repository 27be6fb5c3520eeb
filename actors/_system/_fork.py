"""Forking an ended instance from a step: `ActorSystem.fork` and the
command line's ``fork``.

A fork makes a new incarnation, of the same address or of another one
(``to``), whose run starts with the first ``from_effect`` positions of the
source's last run (positions 1 to ``from_effect``, as ``actors show`` numbers
the log) and runs the rest on the current code. The kept entries are
replayed, never run again: a payment step before the fork point is not
charged twice, and its idempotency key stays the one it was recorded with.
It is a start like any other: one compare-and-set transaction
(`_transactions.start_txn` with ``previous`` = the row read), so of two forks
(or a fork and a start or retry) of one address exactly one commits.

What the new incarnation holds, besides the kept log:

- params: the source's (with ``to``, those of the new address under the
  same process: a kept step whose arguments came from the params then does
  not replay, and the replay check refuses the fork); input: the source's,
  or ``input``.
- mail, at the same address: the messages the discarded part of the log
  took are put back, in the order they arrived, ahead of the source's
  unread messages (the source's asks left out: they were answered when it
  ended; the runtime's own messages to the source, such as its children's
  ends, left out), so the new run can take them again; they move with the
  address (the source's mailbox goes with the incarnation it replaces), and
  are numbered anew. A message dropped to the dead letters is not among
  them, and a drop racing the fork either commits first or is refused (see
  `fork_txn`, `actors._system._mail`). To another address (``to``): no mail at all,
  neither the taken nor the unread messages (the source keeps its own), so
  that a message is handled by at most one instance; the new incarnation
  takes what is sent to it.
- compensations: those the kept steps registered are kept, not yet run; a
  kept step whose compensation already ran (the source failed and
  compensated) refuses the fork, since its outcome was undone: fork from
  before it.
- stream: the values emitted before the fork point (by earlier runs, and by
  the kept part of the last one) are kept; those the discarded part emitted
  are dropped. Consumers' cursors are not kept: a consumer reads the new
  incarnation's stream from where it asks, as after any new incarnation.
- timers: a timer the discarded part armed is gone with its run (no timer
  outlives the incarnation it belongs to); one the kept part armed and that
  had not fired is armed again, at its recorded due time, when the new run
  reaches it.
- exports: none until the new run publishes (a publish is not replayed).
- children: those the kept part made are kept as they are (a completed
  call gives its recorded result). Those the discarded part made were
  cancelled when the source ended (a parent's end cancels its live
  children); the fork removes their records (and their descendants'), each
  kept in its address's history with its incarnation as the address's
  floor, so a new run that calls them again starts them afresh, as new
  incarnations. A child of the discarded part that is still live refuses
  the fork (cancel it first). A fork ``to`` another address refuses a kept
  part that made children: they belong to the source's address.

What is refused, with `InvalidArguments` saying what to do: a source that
is live (running, suspended), queued or ``compensation_stuck``; a child (its
parent's run decides its children); a fork point past the end of the log,
or inside a call whose child had not ended; a kept part that does not replay on the current code (checked as
`actors.testing.replay_check` checks a history, before anything is
written); a ``to`` address that is live or completed, or that the source's
process does not resolve.

The record the fork replaces (the source, or an ended instance at ``to``)
is kept in its address's history (``actors show ADDRESS --incarnation N``,
see `actors._system._kept`).

The transaction is built here (`fork_txn`), from what `read_for_fork`
(`actors._system._fork_plan`) read, for the runtime and the command line alike, and for a retry too (a fork
from effect 0 to the same address that resets only failed children: see
`actors._system._retry`); `fork` is the runtime's half, `started` brings in what a
fork or retry made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from storage import (
    STATUS_WORDS,
    TERMINAL_STATUSES,
    InstanceRecord,
    encode,
    instance_id,
)
from storage.errors import Conflict

from .._actor._instance import Actor
from .._kernel import _guard, _tracing, _transactions
from .._kernel._handles import Handle
from .._kernel._interfaces import SystemAPI
from .._kernel._log import children_named
from ..errors import InvalidArguments, NotDelivered
from ._fork_plan import ForkPlan, after_step, fork_point, params_of, read_for_fork
from ._kept import keep, reset

__all__ = [
    "FORKED",
    "ForkPlan",
    "after_step",
    "fork",
    "fork_point",
    "fork_txn",
    "not_replayed",
    "params_of",
    "read_for_fork",
    "refusal",
    "replay_problem",
    "started",
]

#: The statuses a fork starts from: ended ones.
FORKED = TERMINAL_STATUSES

# What a target at ``to`` may be: nothing, or an instance that failed or was
# cancelled (a completed one is never run again, as for a retry).
_REPLACEABLE = frozenset({"failed", "cancelled"})

_RACED = _transactions.START_RACED | {"state"}


def refusal(address: str, plan: ForkPlan, to: str | None, *, doing: str = "fork") -> str | None:
    """Why ``plan`` cannot go ahead (short of the replay check, which needs
    the code), as a message that says what to do instead; None if it can.
    ``doing``: what the message says cannot be done (a retry's is a fork)."""
    row = plan.source
    cannot = f"cannot {doing} {address!r}"
    status = row.status
    if row.record.parent:
        return (
            f"{cannot}: it is a child of {row.record.parent!r}, whose run decides its "
            f"children; fork {row.record.parent!r} instead"
        )
    if status not in FORKED:
        words = STATUS_WORDS.get(status, f"it is {status}")
        if status == "compensation_stuck":
            return (
                f"{cannot}: {words}; resume its compensation (resume_compensation) or "
                "abandon it (abandon_compensation), then fork it"
            )
        return (
            f"{cannot}: {words}; only an ended (completed, failed or cancelled) instance is "
            "forked: wait for it to end, or cancel it first"
        )
    if not isinstance(plan.from_effect, int) or plan.from_effect < 0:
        return f"{cannot}: from_effect must be a position >= 0, not {plan.from_effect!r}"
    if plan.from_effect > plan.last:
        return (
            f"{cannot} from effect {plan.from_effect}: its log ends at position {plan.last}; "
            f"fork from 0 to {plan.last} ('actors show {address}' lists the log)"
        )
    for seq, entry in sorted(plan.prefix.items()):
        if entry.kind == "call" and not entry.is_outcome:
            return (
                f"{cannot} from effect {plan.from_effect}: its call of {entry.name!r} (effect "
                f"{seq}) had not ended at the fork point; fork from before it "
                f"(from_effect={seq - 1}), or from after its end"
            )
    keys = {e.key for e in plan.prefix.values() if e.key}
    undone = [
        c
        for c in row.record.compensations
        if c.get("id") in keys and c.get("id") in row.record.compensated
    ]
    if undone:
        first = min(seq for seq, e in plan.prefix.items() if e.key == undone[0].get("id"))
        return (
            f"{cannot} from effect {plan.from_effect}: the kept step {undone[0].get('name')!r} "
            f"(effect {first}) was compensated when it ended, so its outcome was undone; fork "
            f"from before it (from_effect={first - 1}) so that it runs again"
        )
    if plan.live_children:
        child = plan.live_children[0]
        return (
            f"{cannot}: its child {child.address!r}, made by the part of its run that runs "
            f"again, is still {child.status}; cancel it first ('actors cancel {child.address}')"
        )
    if to is not None and to != row.address:
        made = children_named(plan.prefix)
        if made:
            first_child = min(made, key=made.__getitem__)
            return (
                f"{cannot} to {to!r}: the kept part made the child {first_child!r} (effect "
                f"{made[first_child]}), which belongs to {row.address!r}; fork to the same "
                f"address, or from before effect {made[first_child]} "
                f"(from_effect={made[first_child] - 1})"
            )
        if params_of(row.process, to) is None:
            return (
                f"{cannot} to {to!r}: its process {row.process!r} does not make that "
                "address; give an address of the same process"
            )
        target = plan.target
        if target is not None and target.status not in _REPLACEABLE:
            words = STATUS_WORDS.get(target.status, f"it is {target.status}")
            return (
                f"{cannot} to {to!r}: there is an instance there, and {words}; fork to a "
                "free address, or to one whose instance failed or was cancelled"
            )
    return None


def fork_txn(
    plan: ForkPlan,
    *,
    input: dict[str, Any] | None,
    now: float,
    max_payload: int | None = None,
    trace: str | None = None,
    encoded_input: bytes | None = None,
) -> _transactions.Start:
    """The fork of ``plan`` (checked by `refusal` and the replay check): a
    new incarnation at the target address, running, whose run 0 holds the
    kept log; the replaced record (if any) kept in the address's history;
    each child of the discarded part reset; the mail and stream described in
    the module doc.

    Invariant: it commits only over what it read (the instance at the
    target, each reset child, each history row and the source's dead
    letters at the version read), else it fails with `Conflict` (a reason in
    `_transactions.START_RACED`, or ``"state"``) and writes nothing. The source,
    at another address, is left as it was. So a drop and a fork serialize on
    the instance: a drop that commits first changes the dead letters the
    fork read (it reads again, and leaves the message out); a fork that
    commits first makes a new incarnation, which the drop, bound to the one
    it read, is refused over (see `actors._system._mail`).

    Raises:
        EncodeError: a record or the input holds a value that cannot be stored.
    """
    source = plan.source
    record = source.record
    params: Sequence[str] = record.params
    if plan.target_iid != source.iid:
        params = params_of(source.process, plan.target_address) or []
    keys = {e.key for e in plan.prefix.values() if e.key}
    compensations = [c for c in record.compensations if c.get("id") in keys]
    start = _transactions.start_txn(
        plan.target_iid,
        address=plan.target_address,
        process=source.process,
        params=params,
        input=dict(record.input or {}) if input is None else input,
        parent=None,
        previous=plan.target,
        floor=plan.floor,
        now=now,
        max_payload=max_payload,
        trace=trace,
        encoded_input=encoded_input,
        fields={"compensations": compensations} if compensations else None,
    )
    txn = start.txn
    if plan.target is not None:
        keep(txn, plan.target, plan.kept, now)
    if plan.target_iid == source.iid:
        txn.expect_state(_transactions.dead_key(source.iid), plan.dead_version)
    else:
        # The source stays as it is: on condition that it still is.
        txn.require(source.iid, frozenset({source.status}), incarnation=record.incarnation)
    iid = plan.target_iid
    for seq, entry in sorted(plan.prefix.items()):
        txn.put_log(iid, 0, seq, entry.to_stored())
    for message in plan.mail:  # a message put back has no sent time: the fork's
        txn.append_message(iid, message if len(message) > 2 else [*message, now])
    for value in plan.stream:
        txn.append_stream(iid, value)
    for child, kept in plan.resets:
        reset(txn, child, kept, now)
    return start


# -- the runtime's half ----------------------------------------------------------------


def in_doubt(system: SystemAPI, iid: bytes) -> None:
    """A new incarnation's commit whose outcome was not learned: if it is
    written, it runs once the journal answers."""
    system.registry.spawn_system_task(system.registry.reload_when_back, iid)


async def started(
    system: SystemAPI, plan: ForkPlan, proc: Any, record: InstanceRecord
) -> Handle[Any]:
    """Bring in the new incarnation a fork (or retry) of ``plan`` committed
    with ``record``; its handle."""
    for child, _ in plan.resets:
        system.statuses.changed(child.iid)
    # Brought in as a start's is, except that it reads what the fork wrote
    # (its kept log and mail) before it runs, as an instance that mail was
    # routed to meanwhile does (see `Registry.run_created`).
    system.registry.routed_absent.add(plan.target_iid)
    await system.lifecycle.run_started(plan.target_iid, plan.target_address, proc, record)
    # Handles read the new incarnation from now on, not what was last seen
    # of the one it replaced (a remote journal's reads are cached): what was
    # just committed. Invariant: nothing waits between the run's start and
    # this change, as in `Lifecycle.start`. The run may end in any wait, and
    # a change of an instance not in memory drops the end kept of it.
    system.statuses.remember(plan.target_iid, ("running", record))
    system.statuses.changed(plan.target_iid)
    return Handle._create(system, plan.target_iid, plan.target_address, record.incarnation)


async def fork(
    system: SystemAPI,
    address: str,
    *,
    from_effect: int | None,
    after_step_name: str | None,
    to: str | None,
    input: dict[str, Any] | None,
) -> Handle[Any]:
    """`ActorSystem.fork` (see there)."""
    _guard.refuse("system.fork()", "fork from outside a process (a step is retried, not forked)")
    iid = system.router.address_iid(address, "fork's address")
    if to is not None:
        system.router.address_iid(to, "fork's to=")
    if (from_effect is None) == (after_step_name is None):
        raise InvalidArguments(
            "fork takes one of from_effect= (a log position) or after_step= (a step's name)"
        )
    if from_effect is not None and (
        isinstance(from_effect, bool) or not isinstance(from_effect, int) or from_effect < 0
    ):
        raise InvalidArguments(
            f"fork(from_effect=...) takes a log position >= 0, not {from_effect!r}; "
            f"'actors show {address}' lists the log"
        )
    if input is not None and not isinstance(input, dict):
        raise InvalidArguments(
            f"fork(input=...) takes a dict of keyword input or None, not {input!r}"
        )
    encoded_input = encode(input, what="input") if input else None
    target_iid = iid if to is None else instance_id(to)
    # A start of both addresses. Mail for them meanwhile needs no activation
    # after it: the source has ended, and the target runs once started.
    async with system.lifecycle.deciding(*{iid, target_iid}, activate=False):
        return await _fork(
            system, iid, address, from_effect, after_step_name, to, input, encoded_input
        )


async def _fork(
    system: SystemAPI,
    iid: bytes,
    address: str,
    from_effect: int | None,
    after_step_name: str | None,
    to: str | None,
    input: dict[str, Any] | None,
    encoded_input: bytes | None,
) -> Handle[Any]:
    lost_over: int | None = None  # the incarnation a commit of ours lost a race over
    while True:  # once more each time another start commits first
        if after_step_name is not None:
            point = await system.journal.read(lambda r: fork_point(r, iid, after_step_name))
            if point is None:
                raise InvalidArguments(
                    f"cannot fork {address!r} after step {after_step_name!r}: its last run has "
                    "no outcome of a step of that name ('actors show' lists the log)"
                )
        else:
            assert from_effect is not None
            point = from_effect
        plan, floor = await system.journal.read(lambda r: read_for_fork(r, iid, point, to))
        if plan is None:
            gone = f" (incarnation {floor} was cleaned up)" if floor else ""
            raise NotDelivered(
                f"no instance at {address!r} to fork{gone}; check the address",
                address=address,
                reason="unknown",
            )
        row = plan.source
        if row.address != address:
            raise InvalidArguments(
                f"address {address!r} collides with {row.address!r} in the journal"
            )
        if row.status == "corrupt":
            raise system.corruption.error(iid, address)
        target = plan.target
        if lost_over is not None and target is not None and target.record.incarnation > lost_over:
            raise InvalidArguments(
                f"cannot fork {address!r}: another fork, start or retry made incarnation "
                f"{target.record.incarnation} of {plan.target_address!r} first (it is "
                f"{target.status}); fork that one once it has ended, if need be"
            )
        why = refusal(address, plan, to)
        if why is not None:
            raise InvalidArguments(why)
        if plan.target_iid in system.registry.live or iid in system.registry.live:
            with trio.move_on_after(0.05):  # still leaving memory (it just ended)
                await system.statuses.event(plan.target_iid).wait()
            continue
        proc = system.registry.definition(row.process)
        params = tuple(row.record.params)
        if plan.target_iid != iid:
            params = tuple(params_of(row.process, plan.target_address) or ())
            if proc.resolve(*params) != plan.target_address:
                raise InvalidArguments(
                    f"cannot fork {address!r} to {plan.target_address!r}: {proc.template!r} "
                    "does not make that address"
                )
        new_input = dict(row.record.input or {}) if input is None else input
        proc.check_input(params, new_input)
        start = fork_txn(
            plan,
            input=input,
            now=system.epoch_now(),
            max_payload=system.max_payload,
            trace=_tracing.traceparent(system),
            encoded_input=encoded_input,
        )
        problem = await replay_problem(system, plan, proc, start.record)
        if problem is not None:
            raise InvalidArguments(not_replayed(address, plan, problem))
        try:
            start.txn.in_doubt = lambda _: in_doubt(system, plan.target_iid)
            await system.journal.commit(start.txn)
        except Conflict as exc:
            if exc.reason not in _RACED:
                raise
            lost_over = plan.target.record.incarnation if plan.target is not None else 0
            continue
        break
    return await started(system, plan, proc, start.record)


def not_replayed(address: str, plan: ForkPlan, problem: str) -> str:
    """The refusal of a fork whose kept part does not replay (``problem``)."""
    return (
        f"cannot fork {address!r} from effect {plan.from_effect}: the kept part does not "
        f"replay on the current code ({problem}); fork from an earlier effect, or deploy "
        "code that matches the history up to the fork point"
    )


async def replay_problem(
    system: SystemAPI, plan: ForkPlan, proc: Any, record: InstanceRecord
) -> str | None:
    """The first way the kept part does not replay on ``proc``'s code, as
    `actors.testing.replay_check` finds it; None if it replays."""
    actor = Actor(system, plan.target_iid, plan.target_address, proc, record)
    exc = await actor.check_history(dict(plan.prefix))
    return None if exc is None else str(exc)
