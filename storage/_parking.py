"""`Parking`: where one background task sleeps until another wakes it.

The runtime's and the journal's background tasks (the idle sweep, the timer
of deferred writes, the writer's hand-over watch) sleep while they have
nothing to do and are woken, from the trio thread, when something comes
up. A `trio.Event` per sleep would do; this is cheaper (no object per
sleep, one reschedule per wake-up), and a wake-up with nobody parked does
nothing, so the caller decides, under its own invariant, that nothing is
missed: the task checks its condition, then parks, with no checkpoint in
between.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import trio

__all__ = ["Parking"]


class Parking:
    """One task's place to sleep until `wake` (call both from the trio thread)."""

    __slots__ = ("task",)

    def __init__(self) -> None:
        # The task parked here, or None: `wake` does nothing then, so a hot
        # caller may check this attribute first and save the call.
        self.task: trio.lowlevel.Task | None = None

    def park(self) -> Coroutine[Any, Any, None]:
        """Sleep until `wake` (or a cancellation): ``await parking.park()``.

        Not a coroutine function: it parks the calling task and returns
        trio's own wait, so waking the task resumes trio's frame and the
        caller's, not one of ours between them (a frame more for each
        wake-up of every parked task). Await what it returns at once, in
        the task that called it.
        """
        self.task = trio.lowlevel.current_task()
        return trio.lowlevel.wait_task_rescheduled(self._abort)  # noqa: ASYNC105 - awaited by the caller

    def wake(self) -> None:
        """Wake the parked task, if one is parked."""
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task)

    def _abort(self, _: Any) -> trio.lowlevel.Abort:
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED
