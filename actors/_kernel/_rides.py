"""When the writes of a suspending instance reach the journal.

An instance that suspends has writes nobody outside it waits for: taking
the message it just read (with the wait's log entry), its status. They must
be durable only before its next barrier (a step's side effect, the end,
passivation), which commits them first; lost in a crash, replay takes the
same message again (see `_instance`). Submitted the moment the instance
suspended, they started a commit of their own, and the next `send` to it,
usually close behind, queued behind that commit's fsync: two commits of
latency per message instead of one.

So they are deferred (`Journal.defer`): they go with the next transaction
anyone submits, in the same commit, ahead of it. `Rides` bounds how long
they wait when nobody submits anything: `WINDOW` seconds, so the journal
never lags a quiet system by more than that (what the command line and
other readers see).
"""

from __future__ import annotations

import trio

from storage import Journal, Parking

__all__ = ["WINDOW", "Rides"]

# The longest deferred writes wait for a transaction to go with.
WINDOW = 0.005


class Rides:
    """The timer that submits deferred writes nobody took along."""

    __slots__ = ("_idle", "_journal", "armed")

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        # Writes were deferred since the last submission here (`deferred`
        # does nothing then: a hot caller may check this first).
        self.armed = False
        self._idle = Parking()  # `run`, while disarmed

    def deferred(self) -> None:
        """Writes were just deferred: see that they go within `WINDOW`."""
        if not self.armed:
            self.armed = True
            self._idle.wake()

    async def run(self) -> None:
        """The system task: submit deferred writes `WINDOW` after the first."""
        while True:
            if not self.armed:
                # Invariant: parked only while disarmed (deferred() wakes it),
                # so no deferral goes unnoticed.
                await self._idle.park()
            await trio.sleep(WINDOW)
            self.armed = False
            self._journal.submit_deferred()
