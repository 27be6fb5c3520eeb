"""Durable time on a journal that several nodes share: the database's clock.

A system maps trio's clock onto epoch time with one offset, taken at open
(`ActorSystem.epoch_now`). Durable time is what goes into the journal:
timers' due times, a message's sent-at, a schedule's next tick. On a
journal with a clock of its own (`Journal.clock`: PostgreSQL's, for a
node) the offset is taken from that clock rather than from the node's wall
clock, so every node reads one time: a timer set on one node and fired on
another is due when it was meant to be, whatever the nodes' wall clocks
say. The reading is the best of a few round trips (the one that took least
time), placed at their midpoint: its error is at most half that round trip.

A node whose wall clock is more than `MAX_SKEW` seconds off the database's
logs a WARNING (under ``actors``) and goes on, on the database's clock.
The offset is measured once, at open: from then on the node's time runs at
the rate of trio's (monotonic) clock, whatever its wall clock does.
"""

from __future__ import annotations

import logging

import trio

from .._kernel._interfaces import SystemAPI

__all__ = ["MAX_SKEW", "align"]

log = logging.getLogger("actors")

MAX_SKEW = 1.0  # seconds between a node's wall clock and the database's before a WARNING
_SAMPLES = 3  # round trips read, the quickest kept


async def align(system: SystemAPI) -> float | None:
    """Put ``system``'s durable time on its journal's clock, if the journal
    has one. Returns how far the node's wall clock is ahead of it (seconds,
    negative if behind), or None if the journal keeps no clock.

    Raises:
        JournalUnavailable: the journal's server did not answer.
    """
    journal = system.journal
    best: tuple[float, float, float] | None = None  # (round trip, trio time, epoch)
    for _ in range(_SAMPLES):
        before = trio.current_time()
        epoch = await journal.clock()
        after = trio.current_time()
        if epoch is None:
            return None
        if best is None or after - before < best[0]:
            best = (after - before, (before + after) / 2, epoch)
    assert best is not None
    trip, at, epoch = best
    skew = system.use_clock(epoch, at)
    if abs(skew) > MAX_SKEW:
        log.warning(
            "node %r: its wall clock is %+.3f s off the clock of %s (over %s s); it keeps "
            "durable time (timers, sent-at) on the journal's clock, to within %.3f s; "
            "synchronise the node's clock (NTP) to keep its logs' times honest",
            journal.node,
            skew,
            journal.describe(),
            MAX_SKEW,
            trip / 2,
        )
    return skew
