"""Named points where a feature hooks into the core, so that the core need
not know the feature, and `Wiring`: the hooks a system is built with.

A leaf effect runs live as its kind's `Behaviour` says (`_effect`); the
actor finds it in `Wiring.behaviours`, by the effect's class.

A run ends (completed, failed, cancelled, restarted, continued as new):
whatever a feature owes when it does goes into the end's own transaction,
so that it is written exactly when the end is. The ask feature answers
the asks the run took without replying ("ended without a reply"), for
instance (its hooks bound to its service as the system is wired). Two points, one per way a run ends:

- `Wiring.run_ended`: an actor in memory ends its run (`_ends`, `_supervision`);
- `Wiring.ended_on_disk`: an instance not in memory is ended by a write of
  another (a cancel or a restart written over the journal, `_lifecycle`).

Nothing registers itself: the system builds its `Wiring` once, from the
table in `_system._wiring`, and the runtime reads it as ``system.wiring``,
so the order of imports cannot change what runs. Each end hook returns what
to run once the transaction has committed (with the commit's results).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from storage import Txn

from ._effect import Behaviour, Effect
from ._log import LogEntry

if TYPE_CHECKING:
    from ._interfaces import ActorAPI, SystemAPI

__all__ = ["After", "DiskEnd", "RunEnd", "Wiring"]

After = Callable[[list[int]], None]  # run once the end's transaction commits


class RunEnd(Protocol):
    """A hook of `Wiring.run_ended`."""

    def __call__(self, actor: ActorAPI, txn: Txn, status: str, *, unread: bool) -> list[After]: ...


class DiskEnd(Protocol):
    """A hook of `Wiring.ended_on_disk`."""

    def __call__(
        self,
        system: SystemAPI,
        txn: Txn,
        status: str,
        log: dict[int, LogEntry],
        mail: Iterable[tuple[int, Any]],
    ) -> list[After]: ...


@attrs.frozen
class Wiring:
    """The features' hooks into the core, as one system is built with them
    (`_system._wiring.wire`): read, never changed."""

    # Each kind of leaf effect that runs live -> how: the actor looks a
    # leaf's class up here as it starts, abandons or drops it, and as a wait
    # takes a message (a subclass has a row of its own: no MRO walk). A
    # class of static methods, or an instance made with a service it uses.
    behaviours: Mapping[type[Effect[Any]], Behaviour | type[Behaviour]]
    run_ends: tuple[RunEnd, ...]  # what each feature owes when a live run ends
    disk_ends: tuple[DiskEnd, ...]  # ... and when a run not in memory does

    def run_ended(
        self, actor: ActorAPI, txn: Txn, status: str, *, unread: bool = True
    ) -> list[After]:
        """Into ``txn``, which ends ``actor``'s run ``status``: what each feature
        owes at that end. With ``unread``, the instance itself ends (its unread
        mail is never taken); without, only this run does (a restart, a
        continue-as-new: the next run takes the mail)."""
        owed: list[After] = []  # (a loop, not a comprehension: no frame of its own)
        for hook in self.run_ends:
            afters = hook(actor, txn, status, unread=unread)
            if afters:
                owed.extend(afters)
        return owed

    def ended_on_disk(
        self,
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
        return [after for hook in self.disk_ends for after in hook(system, txn, status, log, mail)]
