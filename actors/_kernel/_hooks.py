"""Named points where a feature hooks into the core, so that the core need
not know the feature.

A run ends (completed, failed, cancelled, restarted, continued as new):
whatever a feature owes when it does goes into the end's own transaction,
so that it is written exactly when the end is. The ask feature answers
the asks the run took without replying ("ended without a reply"), for
instance. Two points, one per way a run ends:

- `run_ended`: an actor in memory ends its run (`_ends`, `_supervision`);
- `ended_on_disk`: an instance not in memory is ended by a write of
  another (a cancel or a restart written over the journal, `_lifecycle`).

A feature registers a hook with `on_run_end` or `on_disk_end` when its
module is imported; the system imports every feature module before any
instance runs (`_system.FEATURES`). Each hook returns what to run once the
transaction has committed (with the commit's results).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from storage import Txn

from ._log import LogEntry

if TYPE_CHECKING:
    from ._interfaces import ActorAPI, SystemAPI

__all__ = ["After", "ended_on_disk", "on_disk_end", "on_run_end", "run_ended"]

After = Callable[[list[int]], None]  # run once the end's transaction commits


class RunEnd(Protocol):
    """A hook of `run_ended`."""

    def __call__(self, actor: ActorAPI, txn: Txn, status: str, *, unread: bool) -> list[After]: ...


class DiskEnd(Protocol):
    """A hook of `ended_on_disk`."""

    def __call__(
        self,
        system: SystemAPI,
        txn: Txn,
        status: str,
        log: dict[int, LogEntry],
        mail: Iterable[tuple[int, Any]],
    ) -> list[After]: ...


# Registered once, at import (static, like `_effects.runs_live`): no per-run state.
_RUN_ENDS: list[RunEnd] = []
_DISK_ENDS: list[DiskEnd] = []


def on_run_end(hook: RunEnd) -> RunEnd:
    """Register ``hook`` for `run_ended`."""
    _RUN_ENDS.append(hook)
    return hook


def on_disk_end(hook: DiskEnd) -> DiskEnd:
    """Register ``hook`` for `ended_on_disk`."""
    _DISK_ENDS.append(hook)
    return hook


def run_ended(actor: ActorAPI, txn: Txn, status: str, *, unread: bool = True) -> list[After]:
    """Into ``txn``, which ends ``actor``'s run ``status``: what each feature
    owes at that end. With ``unread``, the instance itself ends (its unread
    mail is never taken); without, only this run does (a restart, a
    continue-as-new: the next run takes the mail)."""
    return [after for hook in _RUN_ENDS for after in hook(actor, txn, status, unread=unread)]


def ended_on_disk(
    system: SystemAPI,
    txn: Txn,
    status: str,
    log: dict[int, LogEntry],
    mail: Iterable[tuple[int, Any]],
) -> list[After]:
    """Into ``txn``, which ends the run of an instance not in memory (its
    run's ``log`` as stored) ``status``: what each feature owes at that
    end; ``mail`` is the unread mail the end leaves untaken for good (none
    if the instance runs on)."""
    return [after for hook in _DISK_ENDS for after in hook(system, txn, status, log, mail)]
