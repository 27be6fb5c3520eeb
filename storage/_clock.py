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

import trio

__all__ = ["AutojumpHold"]


class AutojumpHold:
    """A counted hold on the current clock's autojump; a no-op for real clocks.

    Call `acquire` and `release` from the trio thread, in pairs.
    """

    __slots__ = ("_clock", "_count", "_saved")

    _by_clock: dict[int, AutojumpHold] = {}

    def __init__(self, clock: object) -> None:
        self._clock = clock
        self._count = 0
        self._saved = 0.0

    @classmethod
    def current(cls) -> AutojumpHold | None:
        """The hold for the running loop's clock, or None if it is not a MockClock."""
        clock = trio.lowlevel.current_clock()
        if type(clock).__name__ != "MockClock":
            return None
        hold = cls._by_clock.get(id(clock))
        if hold is None or hold._clock is not clock:
            hold = cls._by_clock[id(clock)] = cls(clock)
        return hold

    def acquire(self) -> None:
        if self._count == 0:
            self._saved = self._clock.autojump_threshold  # type: ignore[attr-defined]
            self._clock.autojump_threshold = math.inf  # type: ignore[attr-defined]
        self._count += 1

    def release(self) -> None:
        self._count -= 1
        if self._count == 0:
            self._clock.autojump_threshold = self._saved  # type: ignore[attr-defined]
