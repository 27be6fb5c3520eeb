"""The system's one timer task: wakes instances whose durable timers fall due.

Timers live in the journal's due-time index. This task sleeps until the
earliest of (a) timers registered by live instances in this run (kept in a
heap, because their rows may still be riding on an uncommitted write when
they fall due) and (b) the journal's next timer after what it has already
scanned (timers of passivated instances, and of earlier runs of the
program: a timer that fell due while the system was down fires at once).
A due timer wakes its instance, activating it if it is on disk; the
instance itself fires the timer, deleting the row in the same transaction
that logs the outcome, so a timer fires at most once however often it is
woken.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import trio

from storage import Journal

_PAGE = 1000


class TimerService:
    """The durable timers of one system: the live ones in a heap, the rest
    read from the journal as they fall due; one task wakes each."""

    what = "the timer service"  # as a `Service`

    def __init__(
        self,
        journal: Journal,
        epoch_now: Callable[[], float],
        trio_time: Callable[[float], float],
        due: Callable[[bytes, float], None],
    ) -> None:
        self.journal = journal
        self.epoch_now = epoch_now  # the system's clock (`ActorSystem.epoch_now`, `trio_time`)
        self.trio_time = trio_time
        self.due = due  # `Registry.timer_due`: wakes (or activates) the instance
        self.heap: list[tuple[float, bytes]] = []
        self.poke = trio.Event()
        self.next_wake = math.inf
        self.scanned_until: float | None = None  # journal timers up to here are dispatched

    def schedule(self, due: float, iid: bytes) -> None:
        """Wake ``iid`` at epoch ``due`` (a live instance's new timer)."""
        heapq.heappush(self.heap, (due, iid))
        if due < self.next_wake:
            self.poke.set()

    async def run(self) -> None:
        journal = self.journal
        while True:
            now = self.epoch_now()
            # A dict, not a set: instances wake in the order their timers
            # fell due, alike in every process (a simulation seed replays).
            due: dict[bytes, None] = {}
            heap = self.heap
            while heap and heap[0][0] <= now:
                due[heapq.heappop(heap)[1]] = None
            after = self.scanned_until
            rows = await journal.read(lambda r: r.due_timers(now, _PAGE, after=after))
            due.update(dict.fromkeys(row.iid for row in rows))
            self.scanned_until = rows[-1].due if len(rows) == _PAGE else now
            for iid in due:
                self.due(iid, now)
            if len(rows) == _PAGE:
                await trio.lowlevel.checkpoint()
                continue
            scanned = self.scanned_until
            journal_next = await journal.read(lambda r: r.next_due(after=scanned))
            self.next_wake = min(
                heap[0][0] if heap else math.inf,
                journal_next if journal_next is not None else math.inf,
            )
            self.poke = trio.Event()
            if self.next_wake == math.inf:
                await self.poke.wait()
            else:
                with trio.move_on_at(self.trio_time(self.next_wake)):
                    await self.poke.wait()
