"""Holding a `trio.testing.MockClock`'s autojump off while real work is in flight.

A MockClock with autojump jumps virtual time whenever the loop is idle, and
the loop is idle while a task waits for a worker thread (a sync step, an
fsync). Durable timers would then fire "during" a 10 ms commit as if days had
passed. So while such work is in flight the runtime and the journals hold
autojump off, as Temporal's time-skipping server stops skipping while an
activity runs. Holds are counted per clock: with two steps in threads, the
first to finish must not switch autojump back on.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, cast

import trio

if TYPE_CHECKING:
    from trio.testing import MockClock

__all__ = ["AutojumpHold"]

#: The run's hold (a run has one clock for its whole life).
_HOLD: trio.lowlevel.RunVar[AutojumpHold | None] = trio.lowlevel.RunVar("autojump hold", None)


class AutojumpHold:
    """A counted hold on the current clock's autojump; a no-op for real clocks.

    Call `acquire` and `release` from the trio thread, in pairs.
    """

    __slots__ = ("_clock", "_count", "_saved")

    def __init__(self, clock: MockClock) -> None:
        self._clock = clock
        self._count = 0
        self._saved = 0.0

    @classmethod
    def current(cls) -> AutojumpHold | None:
        """The hold for the running loop's clock, or None if it is not a MockClock."""
        clock = trio.lowlevel.current_clock()
        # A MockClock's maker imported trio.testing; if nobody did, this is a
        # real clock. (Importing trio.testing here would import pytest with it,
        # where installed: ~60 ms and ~10,000 objects every collection walks.)
        testing = sys.modules.get("trio.testing")
        if testing is None or type(clock) is not testing.MockClock:
            return None  # (first: a real clock's steps pay no RunVar lookup)
        hold = _HOLD.get()
        if hold is None:
            hold = cls(cast("MockClock", clock))
            _HOLD.set(hold)
        return hold

    def acquire(self) -> None:
        """Hold autojump off (the first hold saves the clock's threshold)."""
        if self._count == 0:
            self._saved = self._clock.autojump_threshold
            self._clock.autojump_threshold = math.inf
        self._count += 1

    def release(self) -> None:
        """Let go of one hold (the last restores the saved threshold)."""
        self._count -= 1
        if self._count == 0:
            self._clock.autojump_threshold = self._saved
