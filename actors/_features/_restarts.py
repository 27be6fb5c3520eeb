"""Crashes and restarts: what an instance's end means to its supervisor.

A child that crashes is restarted per its restart type within its parent's
intensity limit (restarts of all the parent's children within ``within``
seconds), after a delay that doubles with each recent restart; past the
limit the child is failed and its parent is told to crash with
`ChildFailed` (an ESCALATE message), handled by its own supervisor in
turn. Top-level instances are supervised by the system with the same
rules. A restart ends the run (its children cancelled first, see
`_supervision`'s cascade) and starts it afresh, its restart history in its
record.
"""

from __future__ import annotations

from typing import Any

from storage import UNFINISHED_STATUSES, InstanceRecord, Txn, instance_id

from .._kernel import _reports
from .._kernel._failures import describe_error, error_summary
from .._kernel._interfaces import ActorAPI, SystemAPI
from .._kernel._log import children_named
from .._kernel._process import OneForAll, OneForOne, RestForOne
from ..errors import ChildFailed
from ._supervision import ESCALATE, cancel_children

_DEFAULT = OneForOne()
RESTART_DELAY, RESTART_DELAY_MAX = 0.1, 5.0


def next_restarts(record: InstanceRecord, reason: str, now: float) -> list[dict[str, Any]]:
    """The record's restart history with one more restart."""
    restarts = list(record.restarts)
    restarts.append({"at": now, "reason": reason, "count": len(restarts) + 1})
    return restarts


async def supervise_end(actor: ActorAPI, exc: BaseException | None) -> bool:
    """Decide what an instance's end means to its supervisor.

    Returns True if the instance is restarted instead of ending (the caller
    then stops), False if it ends as it is. Past the intensity limit the
    instance ends failed and its parent (if any) is told to crash.
    """
    record = actor.record
    kind = record.restart or (actor.proc.restart if not record.parent else "temporary")
    if kind == "temporary" or (kind == "transient" and exc is None):
        return False
    system = actor.system
    parent = record.parent
    strategy = _DEFAULT
    siblings: dict[str, int] = {actor.address: 0}
    if parent:
        parent_def, siblings = await _parent_view(system, parent)
        if parent_def is _GONE:
            # Its parent ended (or its start was lost, with "async"
            # durability): a parent's end cancels its children, and an
            # orphan is never restarted, whatever its restart type.
            return False
        if parent_def is not None:
            strategy = parent_def.supervision
        siblings.setdefault(actor.address, 0)
    now = system.epoch_now()
    recent = await _recent_restarts(system, actor, siblings, now - strategy.within)
    why = "exit" if exc is None else f"{type(exc).__name__}({_short(exc)})"
    if len(recent) >= strategy.max_restarts:
        if parent and exc is not None:
            actor.ends.escalate_on_end(parent, why, strategy)
        return False
    count = len(record.restarts) + 1
    reason = f"restart {count} after {why}"
    delay = min(RESTART_DELAY_MAX, RESTART_DELAY * 2 ** len(recent))
    _reports.restarting(actor.address, count=count, reason=reason, strategy=strategy, delay=delay)
    await restart_actor(actor, reason, delay)
    if parent and not isinstance(strategy, OneForOne):
        order = sorted(siblings, key=siblings.__getitem__)
        mine = order.index(actor.address) if actor.address in order else -1
        others = [a for a in order if a != actor.address]
        if isinstance(strategy, RestForOne):
            others = order[mine + 1 :]
        if isinstance(strategy, (OneForAll, RestForOne)):
            sibling_reason = f"restart: sibling {actor.address} crashed ({why})"
            for address in others:
                _reports.sibling_restarting(address, reason=sibling_reason, strategy=strategy)
                await system.lifecycle.restart_iid(instance_id(address), address, sibling_reason)
    return True


async def restart_actor(actor: ActorAPI, reason: str, delay: float) -> None:
    """End the actor's current run and start it afresh after ``delay`` seconds."""
    system = actor.system
    await cancel_children(system, dict(actor.children or {}), f"{actor.address} is restarting")
    txn = Txn()
    restarts = next_restarts(actor.record, reason, system.epoch_now())
    actor.ends.begin_run(txn, restarts=restarts, last_error=None)
    # What features owe at the run's end (the asks it took and did not answer).
    answers = actor.system.wiring.run_ended(actor, txn, "restarted", unread=False)
    results = await actor.writes.barrier(txn)
    for after in answers:
        after(results)
    actor.become("running")
    system.registry.forget(actor)
    system.statuses.changed(actor.iid)
    system.registry.spawn_system_task(system.registry.activate_later, actor.iid, delay)


#: What `_parent_view` gives for a parent that is not live (ended, or gone).
_GONE: Any = object()


async def _parent_view(system: SystemAPI, parent: str) -> tuple[Any, dict[str, int]]:
    """The parent's process definition (None: not registered here; `_GONE`:
    no live parent) and its children by address, with their seqs."""
    iid = instance_id(parent)
    live = system.registry.live.get(iid)
    if live is not None and live.loaded:
        return live.proc, dict(live.children or {})

    def read(r: Any) -> tuple[Any, dict[int, Any]]:
        row = r.instance(iid)
        if row is None:
            return None, {}
        return row, r.entries(iid, row.record.run)

    row, log = await system.journal.read(read)
    if row is None or row.status not in UNFINISHED_STATUSES:
        return _GONE, {}
    return system.registry.procs.get(row.process), children_named(log)


async def _recent_restarts(
    system: SystemAPI, actor: ActorAPI, siblings: dict[str, int], since: float
) -> list[float]:
    times = [r["at"] for r in actor.record.restarts if r["at"] > since]
    others = [instance_id(a) for a in siblings if a != actor.address]

    def read(r: Any) -> list[float]:
        found = []
        for iid in others:
            live = system.registry.live.get(iid)
            if live is not None and live.loaded:
                restarts = live.record.restarts
            else:
                row = r.instance(iid)
                restarts = row.record.restarts if row is not None else []
            found += [x["at"] for x in restarts if x["at"] > since]
        return found

    if others:
        times += await system.journal.read(read)
    return times


async def escalate(actor: ActorAPI) -> None:
    """Tell the parent of a child that failed past its restart limit to crash."""
    if actor.ends.escalate_to is None:
        return
    parent, why, strategy = actor.ends.escalate_to
    _reports.gave_up(actor.address, parent=parent, why=why, strategy=strategy)
    system = actor.system
    error = dict(describe_error(ChildFailed(f"child {actor.address} failed: {why}")))
    payload = {
        "child": actor.address,
        "summary": (
            f"child {actor.address!r} crashed past its restart limit "
            f"({strategy.max_restarts} within {strategy.within} s): {why}"
        ),
        "error": actor.record.error or error,
    }
    await system.router.send_system(instance_id(parent), parent, ESCALATE, payload)


def escalation_error(payload: dict[str, Any]) -> ChildFailed:
    return ChildFailed(payload["summary"], address=payload["child"], error=payload.get("error"))


def _short(exc: BaseException) -> str:
    text = error_summary(describe_error(exc)).split(": ", 1)[-1]
    return repr(text if len(text) <= 80 else text[:77] + "...")
