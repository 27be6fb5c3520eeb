"""``ctx.join(child)``: wait for a spawned child's final end.

A join is a task of the parent that watches the child's status (woken by
the child's status changes here; on a shared journal it also reads the
journal every `REMOTE_POLL`, since another node's changes wake nobody here)
until the child is finished: completed (its result), failed or cancelled
(`ChildFailed`, as `ctx.call` raises). A supervised restart is not an end:
the join waits through it. The outcome is logged like a call's, so a replay
gives the same one; a join that had not ended before a crash watches again
after it, and finds the child ended as it was (an end is final).

The child is the incarnation the process spawned: if its address was
cancelled and started afresh meanwhile, the join fails as for a cancelled
child. While a join waits, its parent stays in memory (a task runs for it).
"""

from __future__ import annotations

from typing import Any

import trio

from storage import TERMINAL_STATUSES, instance_id

from .._kernel import _effects as fx
from .._kernel._failures import ErrorRecord
from .._kernel._handles import status_changed
from .._kernel._interfaces import ActorAPI
from .._kernel._log import LogEntry
from .._kernel._transactions import end_payload
from ._supervision import end_outcome

__all__ = ["JoinBehaviour"]  # (the system wires it: `_system._wiring`)


class JoinBehaviour(fx.Behaviour):
    @staticmethod
    def start(actor: ActorAPI, join: fx.Join[Any], started: LogEntry | None) -> None:
        actor.start_task(_watch, join)

    @staticmethod
    def abandon(actor: ActorAPI, join: fx.Join[Any]) -> None:
        """A join that lost a race stops watching."""
        if join.scope is not None:
            join.scope.cancel()


async def _watch(actor: ActorAPI, join: fx.Join[Any]) -> None:
    system = actor.system
    iid = instance_id(join.address)
    try:
        with trio.CancelScope() as scope:
            join.scope = scope
            while True:
                event = system.statuses.event(iid)
                status, record = await system.statuses.refresh(iid)
                if join.incarnation is None and record.incarnation:
                    join.incarnation = record.incarnation  # the child as first seen
                if status == "unknown" or (
                    record.incarnation and record.incarnation != join.incarnation
                ):
                    # Gone (cleaned up), or cancelled and started afresh.
                    payload: dict[str, Any] = {
                        "status": "cancelled",
                        "reason": (
                            "it is gone"
                            if status == "unknown"
                            else "its address was cancelled and started afresh"
                        ),
                    }
                elif status == "corrupt":
                    payload = {
                        "status": "corrupt",
                        "error": ErrorRecord(
                            type="storage.errors.JournalCorrupt",
                            message="its records do not decode",
                        ).to_stored(),
                    }
                elif status in TERMINAL_STATUSES:
                    payload = end_payload(status, record)
                else:
                    await status_changed(system, event)
                    continue
                value, error, entry = end_outcome(join, payload)
                actor.finish(join, value, error, entry)
                return
    finally:
        actor.task_finished()
