"""The idle sweep: instances idle for ``passivate_after`` seconds leave
memory (`Registry.sweep_idle`, run by `open_system` for the system's life)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import trio

from storage import Parking

if TYPE_CHECKING:
    from .._actor._instance import Actor

__all__ = ["sweep"]


async def sweep(live: Mapping[bytes, Actor], after: float, parking: Parking) -> None:
    """Passivate the instances of ``live`` idle for ``after`` seconds.

    One task for the system rather than a deadline per suspension, which
    cost a cancel scope and a timer entry on every message. It sleeps
    until the earliest due passivation (never waking more than four times
    per ``after``, however staggered the instances), and with nothing
    parked it sleeps in ``parking`` (`Registry.idle_sweep`) until an
    instance parks (`Actor.suspend` wakes it): virtual time under a
    MockClock jumps straight to the next timer instead of stepping through
    sweeps."""
    if after <= 0:
        return  # they passivate at every suspension themselves
    granularity = max(after / 4, 0.01)
    while True:
        now = trio.current_time()
        cutoff = now - after
        earliest = math.inf
        for actor in list(live.values()):
            if actor.parked is not None:
                if actor.idle_since <= cutoff:
                    actor.request_passivation()
                else:
                    earliest = min(earliest, actor.idle_since)
        if earliest == math.inf:
            # Invariant: the sweep is parked only while nothing is parked,
            # and no instance can park between the scan and this wait.
            await parking.park()
            continue
        # An instance parking meanwhile is due at now + after or later,
        # past this wake-up (earliest + after <= now + after).
        await trio.sleep_until(max(earliest + after, now + granularity))
