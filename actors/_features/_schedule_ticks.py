"""When a schedule ticks: the tick times of a cron expression or an interval.

Cron expressions are parsed and iterated by ``cronsim``, in the schedule's
time zone (``zoneinfo``); interval ticks fall on whole multiples of the
interval since the Unix epoch, so every node computes the same ones.

Interval ticks are counted in whole microseconds, never in float seconds:
the interval is taken to its nearest microsecond (``step``) and tick ``n``
is exactly ``n * step`` microseconds after the epoch. A time compared with
ticks (the last tick handled, the clock) is first taken to its nearest
microsecond, exactly (`to_micros`), and a tick's float seconds give back that
tick: a float epoch before the year 2242 is within half a microsecond of
the time it stands for. So the tick after the last one handled is strictly after it,
whatever the interval; in floats, ``floor(n * every / every)`` can be
``n - 1`` and hand the same tick out again.
"""

from __future__ import annotations

import datetime as _dt
import math
import zoneinfo
from collections.abc import Iterator
from typing import Any

import cronsim

__all__ = ["MICROS", "due_ticks", "tick_text", "ticks_after", "to_micros"]

MICROS = 1_000_000  # interval ticks are counted in whole microseconds


def to_micros(epoch: float) -> int:
    """``epoch`` seconds as the nearest whole number of microseconds, computed
    exactly (from the float's ratio of integers, not a float product)."""
    num, den = float(epoch).as_integer_ratio()
    return (2 * num * MICROS + den) // (2 * den)


def _step(every: float) -> int:
    """The interval ``every`` in whole microseconds (at least one;
    `check_spec` refuses intervals shorter than that)."""
    return max(1, to_micros(every))


def tick_text(epoch: float) -> str:
    """A tick's time as its path param: ISO 8601 UTC to the second (``...Z``),
    with milliseconds when the tick falls between seconds and microseconds
    when it falls between milliseconds."""
    seconds, micros = divmod(to_micros(epoch), MICROS)
    moment = _dt.datetime.fromtimestamp(seconds, _dt.UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if micros % 1000:
        return f"{text}.{micros:06d}Z"
    return f"{text}.{micros // 1000:03d}Z" if micros else f"{text}Z"


def ticks_after(spec: dict[str, Any], after: float) -> Iterator[float]:
    """The schedule's tick times (epoch seconds) strictly after ``after``
    (for an interval, ``after`` taken to the microsecond)."""
    every = spec.get("every")
    if every is not None:
        step = _step(every)
        # Invariant: n * step > after in microseconds, so the tick handled
        # last (``after``) is never handed out again.
        n = to_micros(after) // step + 1
        while True:
            yield n * step / MICROS  # int / int: the float nearest the tick
            n += 1
    zone = zoneinfo.ZoneInfo(spec["timezone"])
    start = _dt.datetime.fromtimestamp(math.floor(after), zone)
    for moment in cronsim.CronSim(spec["cron"], start):
        value = moment.timestamp()
        if value > after:
            yield value


def due_ticks(spec: dict[str, Any], after: float, now: float, keep: int) -> list[float]:
    """The latest ``keep`` ticks in ``(after, now]``, oldest first; found from
    ``now`` backwards, so a long downtime costs no walk over every tick."""
    every = spec.get("every")
    if every is not None:
        step = _step(every)
        first = to_micros(after) // step + 1  # the same count as ticks_after's
        latest = to_micros(now) // step  # a clock at a tick's float has reached it
        count = max(0, latest - first + 1)
        return [(latest - k) * step / MICROS for k in reversed(range(min(keep, count)))]
    zone = zoneinfo.ZoneInfo(spec["timezone"])
    found: list[float] = []
    # cronsim's reverse walk gives ticks strictly before its start.
    for moment in cronsim.CronSim(
        spec["cron"], _dt.datetime.fromtimestamp(math.floor(now) + 1, zone), reverse=True
    ):
        value = moment.timestamp()
        if value <= after or len(found) >= keep:
            break
        found.append(value)
    return found[::-1]
