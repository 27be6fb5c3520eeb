"""The runtime holds a MockClock's autojump off while real work is in flight
(storage._clock.AutojumpHold): one counted hold per run, none for a real clock."""

from __future__ import annotations

import math

import trio
import trio.testing

from storage import AutojumpHold


def test_a_real_clock_has_no_hold() -> None:
    async def main() -> None:
        assert AutojumpHold.current() is None

    trio.run(main)


def test_holds_count_within_a_run_and_each_run_has_its_own() -> None:
    seen: list[AutojumpHold] = []

    async def main() -> None:
        clock = trio.lowlevel.current_clock()
        hold = AutojumpHold.current()
        assert hold is not None and hold is AutojumpHold.current()  # one per run
        seen.append(hold)
        hold.acquire()
        hold.acquire()
        assert math.inf == clock.autojump_threshold  # type: ignore[attr-defined]
        hold.release()  # the first to finish leaves the other's hold on
        assert math.inf == clock.autojump_threshold  # type: ignore[attr-defined]
        hold.release()
        assert 0.0 == clock.autojump_threshold  # type: ignore[attr-defined]

    for _ in range(2):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen[0] is not seen[1]
