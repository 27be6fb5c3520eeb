"""Interval ticks start once each, whatever the float: the pure tick
functions swept over every interval from 0.01 s to 10.00 s, and a schedule
of ``every=0.21`` run end to end under a virtual clock."""

from __future__ import annotations

import collections
import itertools
from itertools import pairwise

import trio

import actors
from actors import Context, process
from actors._features._schedule_ticks import due_ticks, tick_text, ticks_after
from storage import MemoryJournal, Txn, instance_id

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
BASES = (0.0, T0, 4_102_444_800.0)  # the Unix epoch, 2026 and 2100: small and large epochs
TICKS = 60  # ticks followed from each base


def _misfits(every: float, base: float) -> list[str]:
    """What goes wrong for ``every`` over `TICKS` ticks from ``base`` (empty: nothing)."""
    spec = {"every": every}
    wrong: list[str] = []
    ticks = list(itertools.islice(ticks_after(spec, base), TICKS))
    if any(b <= a for a, b in pairwise(ticks)) or ticks[0] <= base:
        wrong.append(f"ticks after {base} not strictly increasing: {ticks[:5]}...")
    last = base
    for tick in ticks:
        # The scheduler wakes at the next tick after the last one handled...
        if next(ticks_after(spec, last)) != tick:
            wrong.append(
                f"after {last!r} the next tick is {next(ticks_after(spec, last))!r}, not {tick!r}"
            )
        # ... finds exactly that tick due, and handles it ...
        if due_ticks(spec, last, tick, 1) != [tick]:
            wrong.append(f"at {tick!r} (last {last!r}) due is {due_ticks(spec, last, tick, 1)!r}")
        last = tick
        # ... and then nothing is due until the next one, and it is never due again.
        if due_ticks(spec, last, last, 5) != []:
            wrong.append(f"{last!r} is due again after it was handled")
        if next(ticks_after(spec, last)) <= last:
            wrong.append(f"the tick after {last!r} is {next(ticks_after(spec, last))!r}")
    # A catch-up over the whole stretch gives the same ticks, once each.
    if due_ticks(spec, base, ticks[-1], TICKS) != ticks:
        wrong.append(f"catching up from {base} gives other ticks")
    texts = [tick_text(t) for t in ticks]
    if len(set(texts)) != len(texts):
        wrong.append("two ticks share a path param")
    return wrong


def test_every_interval_from_10_ms_to_10_s_gives_each_tick_once():
    failing = {}
    for hundredths in range(1, 1001):
        every = hundredths / 100
        for base in BASES:
            wrong = _misfits(every, base)
            if wrong:
                failing[every] = wrong[0]
                break
    assert {} == failing, f"{len(failing)} of 1000 intervals repeat or skip ticks"


def test_ticks_that_are_whole_seconds_or_milliseconds_keep_their_text():
    assert "2026-01-01T00:00:00Z" == tick_text(T0)
    assert "2026-01-01T00:00:00.210Z" == tick_text(T0 + 0.21)
    ticks = list(itertools.islice(ticks_after({"every": 0.21}, T0), 5))
    assert [
        "2026-01-01T00:00:00.210Z",
        "2026-01-01T00:00:00.420Z",
        "2026-01-01T00:00:00.630Z",
        "2026-01-01T00:00:00.840Z",
        "2026-01-01T00:00:01.050Z",
    ] == [tick_text(t) for t in ticks]


def test_a_last_tick_stored_as_a_float_product_is_not_due_again():
    # Schedules stored before ticks were counted in whole microseconds hold
    # ``last`` as float products (``n * every``, or ``m * every - k * every``
    # for a catch-up), an ulp or so off the tick: each reads as its tick.
    for hundredths in range(1, 1001):
        every = hundredths / 100
        spec = {"every": every}
        first = int(T0 / every)
        for n in range(first, first + 20):
            for stored in (n * every, (n + 2) * every - 2 * every):
                following = next(ticks_after(spec, stored))
                assert following > stored
                assert abs(following - (n + 1) * hundredths / 100) < 1e-6, (every, n)
                assert [] == due_ticks(spec, stored, stored + every / 2, 3)


started: collections.Counter[str] = collections.Counter()


def clock() -> float:
    return T0 + trio.current_time()


@process("fast/:tick")
async def fast(ctx: Context, tick: str) -> str:
    started[tick] += 1
    return tick


class CountingJournal(MemoryJournal):
    """Counts the commits that write a schedule's state row, and stops a
    scheduler that looks again and again without virtual time passing (the
    autojump clock cannot jump while a task is always runnable)."""

    schedule_writes = 0
    reads = 0

    async def read(self, fn):
        self.reads += 1
        if self.reads > 50_000:
            raise AssertionError("the scheduler looks again at once, over and over")
        return await super().read(fn)

    def submit(self, txn: Txn):
        if any(op[1:2] == ("schedule/fast",) for op in txn.ops):
            self.schedule_writes += 1
        return super().submit(txn)


async def test_every_0_21_s_starts_each_tick_once_over_12_seconds(autojump_clock):
    started.clear()
    journal = CountingJournal()
    async with actors.open_system(journal, processes=[fast], now=clock) as system:
        await system.schedule("fast", fast, every=0.21, overlap="allow", catch_up=1)
        begin = journal.schedule_writes
        await trio.sleep(12.0)
        ids = [instance_id(info.id) async for info in system.query(process=fast)]
        rows = await journal.read(lambda r: [r.instance(iid) for iid in ids])
    expected = [tick_text(k * 21 / 100 + T0) for k in range(1, 58)]  # 0.21 s .. 11.97 s
    assert expected == sorted(started)
    assert {1} == set(started.values())  # each tick's body ran once
    assert [1] * 57 == [row.record.incarnation for row in rows]  # none started afresh
    assert 57 == journal.schedule_writes - begin  # one commit per tick, no tick handled twice
