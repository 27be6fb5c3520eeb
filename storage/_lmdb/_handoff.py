"""Lending the GIL to the writer thread when the trio thread keeps it.

The writer and the waker are Python threads, and every step they take ends
by taking the GIL back: waking from a wait, each LMDB call (py-lmdb makes
each put and the commit with the GIL released), the socket write that wakes
trio. CPython forces a hand-over only for a thread that has waited a whole
switch interval (5 ms) with no other thread taking the GIL; when the holder
drops it, the waiter is woken and starts a new interval. Trio's run loop
drops the GIL for an instant on every pass (an ``epoll_wait`` with timeout 0
while any task is runnable) and takes it straight back, usually before the
woken thread runs. So beside a task that computes and checkpoints often
(``await trio.sleep(0)`` after each millisecond of work) the trio thread
holds the GIL nearly always but never for a whole interval: a waiting
thread is woken and beaten a thousand times a second and may wait seconds
to run a line. A commit then takes seconds, though its fsync took 0.3 ms.
(Measured: with no trio and no LMDB, a thread sleeping 0.3 ms in a loop
beside one that spins 1 ms and polls epoll with timeout 0 waited up to
0.3-1.2 s for the GIL in runs of 5 s.)

Only the trio thread can let go, so the cure lives there: while writes are
in flight, a system task looks every `NUDGE_AFTER` whether the writer or
the waker took a step since its last look; if neither did, it blocks the
trio thread with the GIL released until a batch is handed back to trio, for
at most `NUDGE_WAIT`. While the writer is in a commit, waiting for the
disk, such a wait may be in vain (a slow fsync, not a starved thread); when
one is, the looks space out (doubling, up to `NUDGE_AFTER_MAX`) until the
commit returns, so a slow disk costs the loop a few percent of its time at
most. Anywhere else a thread that took no step is starved (of the GIL, or
of a core on a loaded machine), and the looks stay `NUDGE_AFTER` apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import trio

__all__ = ["Handoff", "NUDGE_AFTER", "NUDGE_WAIT", "NUDGE_AFTER_MAX"]

# The interpreter's own bound (sys.getswitchinterval() by default): a thread
# that waited this long is owed the GIL. Healthy steps (a batch applied, an
# fsync) take less, so the looks rarely find nothing done and cost a wake-up
# of the loop each.
NUDGE_AFTER = 0.005
# The most one look blocks the trio loop: enough for the writer to apply a
# large batch and commit it on a healthy disk.
NUDGE_WAIT = 0.010
# Looks after fruitless waits space out to this (a slow disk, not a starved
# writer): one wait of NUDGE_WAIT in this long keeps the cost under 10%.
NUDGE_AFTER_MAX = 0.1


class Handoff:
    """The trio side of the writer's progress: looks for a starved writer
    and, finding one, lets the GIL go until a batch is handed back.

    ``busy`` says whether writes are in flight (called in the trio thread).
    The writer and waker threads call `step` after each step and
    `handed_back` after handing a batch to trio, and the writer `committing`
    as it starts a commit; the trio thread calls `start`, `wake` (writes
    went in flight) and `stop`.
    """

    __slots__ = (
        "_busy", "_steps", "_on_disk", "_waiting", "_reached", "_parked", "_scope", "nudges",
    )  # fmt: skip

    def __init__(self, busy: Callable[[], bool]) -> None:
        self._busy = busy
        # Bumped by two threads, each holding the GIL; `+=` on an attribute
        # runs no eval-breaker check between its read and its write, and a
        # look only asks whether the count moved.
        self._steps = 0
        self._on_disk = False  # the writer is in a commit (until its next step)
        self._waiting = False  # the trio thread waits for `_reached`
        self._reached = threading.Event()
        self._parked: trio.lowlevel.Task | None = None  # the looking task, idle
        self._scope: trio.CancelScope | None = None
        self.nudges = 0  # looks that found nothing done and let the GIL go

    # -- the writer and waker threads ----------------------------------------

    def committing(self) -> None:
        self._on_disk = True

    def step(self) -> None:
        self._on_disk = False
        self._steps += 1

    def handed_back(self) -> None:
        self._steps += 1
        if self._waiting:
            self._reached.set()

    # -- the trio thread -------------------------------------------------------

    def start(self) -> None:
        """Start looking (from the trio thread, as the journal opens)."""
        self._scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(self._look, name="journal-handoff")

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    def wake(self) -> None:
        """Writes went in flight: start looking if idle."""
        task = self._parked
        if task is not None:
            self._parked = None
            trio.lowlevel.reschedule(task)

    async def _look(self) -> None:
        assert self._scope is not None
        with self._scope:
            after = NUDGE_AFTER
            while True:
                if not self._busy():
                    await self._park()
                    after = NUDGE_AFTER
                seen = self._steps
                await trio.sleep(after)
                if not self._busy() or self._steps != seen:
                    after = NUDGE_AFTER
                elif self._let_go() or not self._on_disk:
                    after = NUDGE_AFTER
                else:  # a slow disk: look less often until the commit returns
                    after = min(after * 2, NUDGE_AFTER_MAX)

    async def _park(self) -> None:
        self._parked = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._parked = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def _let_go(self) -> bool:
        """Block this (the trio) thread, the GIL released, until a batch is
        handed back or NUDGE_WAIT passes; False if the threads took no step
        meanwhile (they wait for the disk, not for the GIL)."""
        self.nudges += 1
        seen = self._steps
        self._reached.clear()
        self._waiting = True
        try:
            # Event.wait releases the GIL and holds it off: this thread does
            # not run (and take it back) until woken, unlike a loop pass.
            return self._reached.wait(NUDGE_WAIT) or self._steps != seen
        finally:
            self._waiting = False
