"""Schedules through the public API: ticks under a virtual clock, catch-up
after downtime, overlap policies, pause/resume, idempotent definitions."""

from __future__ import annotations

import collections
import logging

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal, MemoryJournal, Txn
from storage._journal import Settled, Ticket
from storage.errors import CommitOutcomeUnknown, JournalDiskFull, JournalFull, JournalUnavailable

DAY = 86400.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
release = Signal("release")


def clock() -> float:
    """Epoch time that starts at T0 and carries on with virtual time across reopens."""
    return T0 + trio.current_time()


@process("nightly/:tick")
async def nightly(ctx: Context, tick: str) -> str:
    return tick


@process("report/:region/:tick")
async def report(ctx: Context, region: str, tick: str, *, hold: bool = False) -> str:
    if hold:
        await ctx.wait(release)
    return f"{region} {tick}"


async def ids(system: actors.ActorSystem, proc: object) -> list[str]:
    return sorted([info.id async for info in system.query(process=proc)])


async def test_a_month_of_nightly_ticks_runs_in_virtual_time(autojump_clock):
    async with actors.open_system(MemoryJournal(), processes=[nightly], now=clock) as system:
        info = await system.schedule("nightly", nightly, cron="0 3 * * *")
        assert info.next_tick == "2026-01-01T03:00:00Z"
        assert await system.schedule("nightly", nightly, cron="0 3 * * *") == info  # idempotent
        await trio.sleep(31 * DAY)
        started = await ids(system, nightly)
        assert started == [f"nightly/2026-01-{d:02d}T03:00:00Z" for d in range(1, 32)]
        for address in started:
            assert await system.get(address).result() == address.split("/")[1]
        (listed,) = await system.list_schedules()
        assert listed.last_started == "nightly/2026-01-31T03:00:00Z"
        assert listed.next_tick == "2026-02-01T03:00:00Z"


async def test_ticks_missed_while_down_are_caught_up_to_catch_up(tmp_path, autojump_clock):
    path = tmp_path / "j"
    async with actors.open_system(LMDBJournal(path), processes=[report], now=clock) as system:
        await system.schedule(
            "hourly", report, every=3600, params=["eu"], catch_up=3, overlap="allow"
        )
        await trio.sleep(2 * 3600 + 60)  # ticks at 01:00 and 02:00
        assert len(await ids(system, report)) == 2
    await trio.sleep(10 * 3600)  # down from 02:01 to 12:01: ten ticks missed
    async with actors.open_system(LMDBJournal(path), processes=[report], now=clock) as system:
        await trio.sleep(60)
        started = await ids(system, report)
    assert started == [
        f"report/eu/2026-01-01T{h:02d}:00:00Z" for h in (1, 2, 10, 11, 12)
    ]  # the three latest of the missed ones, none twice


async def test_overlap_skip_buffer_one_and_allow(autojump_clock):
    async with actors.open_system(MemoryJournal(), processes=[report], now=clock) as system:
        for region, overlap in (("skip", "skip"), ("buffer", "buffer_one"), ("allow", "allow")):
            await system.schedule(
                region, report, every=60, params=[region], input={"hold": True}, overlap=overlap
            )
        await trio.sleep(60 * 3 + 30)  # ticks at 1, 2 and 3 minutes; the first one holds
        started = await ids(system, report)
        by = {
            r: [a for a in started if a.startswith(f"report/{r}/")]
            for r in ("skip", "buffer", "allow")
        }
        assert len(by["skip"]) == 1 and len(by["buffer"]) == 1 and len(by["allow"]) == 3
        for address in (by["skip"][0], by["buffer"][0]):
            await system.send(address, release)
        await trio.sleep(1)
        started = await ids(system, report)
        by = {
            r: [a for a in started if a.startswith(f"report/{r}/")]
            for r in ("skip", "buffer", "allow")
        }
        # skip: nothing more until the next tick; buffer_one: the first buffered tick (00:02) ran.
        assert by["skip"] == ["report/skip/2026-01-01T00:01:00Z"]
        assert by["buffer"] == [
            "report/buffer/2026-01-01T00:01:00Z",
            "report/buffer/2026-01-01T00:02:00Z",
        ]


async def test_pause_resume_and_delete(tmp_path, autojump_clock):
    path = tmp_path / "j"
    async with actors.open_system(LMDBJournal(path), processes=[nightly], now=clock) as system:
        await system.schedule("n", nightly, every=DAY)
        await trio.sleep(DAY + 1)
        assert await system.pause_schedule("n") is True
        assert (await system.list_schedules())[0].paused
    async with actors.open_system(LMDBJournal(path), processes=[nightly], now=clock) as system:
        await trio.sleep(3 * DAY)  # paused across the restart: no ticks
        assert len(await ids(system, nightly)) == 1
        assert await system.resume_schedule("n") is True
        await trio.sleep(DAY)  # the ticks while paused are not caught up; the next one runs
        assert await ids(system, nightly) == [
            "nightly/2026-01-02T00:00:00Z",
            "nightly/2026-01-06T00:00:00Z",
        ]
        assert await system.delete_schedule("n") is True
        assert await system.delete_schedule("n") is False
        await trio.sleep(2 * DAY)
        assert len(await ids(system, nightly)) == 2
        assert await system.list_schedules() == []


async def test_bad_schedules_say_what_to_pass(autojump_clock):
    async with actors.open_system(MemoryJournal(), processes=[nightly, report]) as system:
        with pytest.raises(actors.InvalidArguments, match="cron expression"):
            await system.schedule("x", nightly, cron="not cron")
        with pytest.raises(actors.InvalidArguments, match="one of cron="):
            await system.schedule("x", nightly)
        with pytest.raises(actors.InvalidArguments, match="overlap"):
            await system.schedule("x", nightly, every=5, overlap="queue")
        with pytest.raises(actors.InvalidArguments, match="path param"):
            await system.schedule("x", report, every=5)
        with pytest.raises(actors.InvalidArguments, match="IANA"):
            await system.schedule("x", nightly, every=5, timezone="Mars/Base")


async def test_params_that_no_address_takes_are_refused_at_the_call(autojump_clock):
    # Accepted, they would fail at every tick, long after the call.
    async with actors.open_system(MemoryJournal(), processes=[report]) as system:
        for bad in ("a/b", ""):
            with pytest.raises(actors.InvalidArguments) as caught:
                await system.schedule("x", report, every=5, params=[bad])
            assert (
                f"params=[{bad!r}] do not fit: path param 'region' of 'report/:region/:tick' "
                f"must be a non-empty str without '/', got {bad!r}"
            ) == str(caught.value)
        assert [] == await system.list_schedules()  # nothing was stored


async def test_intervals_are_whole_microseconds(autojump_clock):
    async with actors.open_system(MemoryJournal(), processes=[nightly], now=clock) as system:
        for bad, said in (
            (0, "positive seconds"),
            (-1.0, "positive seconds"),
            (float("nan"), "positive seconds"),
            (True, "positive seconds"),
            (1e-7, "at least 0.000001 seconds"),
        ):
            with pytest.raises(actors.InvalidArguments, match=said):
                await system.schedule("x", nightly, every=bad)
        info = await system.schedule("x", nightly, every=0.000125)
        assert "2026-01-01T00:00:00.000125Z" == info.next_tick  # to the microsecond
        await system.delete_schedule("x")


@process("paris/:tick")
async def paris(ctx: Context, tick: str) -> str:
    return tick


async def test_cron_follows_the_schedule_time_zone_across_a_dst_change(autojump_clock):
    start = 1_774_569_600.0  # 2026-03-27T00:00:00Z; Paris moves to summer time on the 29th

    async with actors.open_system(
        MemoryJournal(), processes=[paris], now=lambda: start + trio.current_time()
    ) as system:
        await system.schedule("paris", paris, cron="0 9 * * *", timezone="Europe/Paris")
        await trio.sleep(4 * DAY)
        started = await ids(system, paris)
    # 09:00 in Paris is 08:00 UTC in winter time, 07:00 UTC in summer time.
    assert started == [
        "paris/2026-03-27T08:00:00Z",
        "paris/2026-03-28T08:00:00Z",
        "paris/2026-03-29T07:00:00Z",
        "paris/2026-03-30T07:00:00Z",
    ]


async def test_a_changed_definition_keeps_the_last_tick(autojump_clock):
    async with actors.open_system(MemoryJournal(), processes=[report], now=clock) as system:
        await system.schedule("r", report, every=3600, params=["eu"])
        await trio.sleep(3600 + 1)
        changed = await system.schedule("r", report, every=3600, params=["us"])
        assert changed.last_tick == "2026-01-01T01:00:00Z"
        assert changed.params == ("us",)
        await trio.sleep(3600)
        assert await ids(system, report) == [
            "report/eu/2026-01-01T01:00:00Z",
            "report/us/2026-01-01T02:00:00Z",
        ]


async def test_a_long_downtime_is_caught_up_without_walking_every_tick(tmp_path, autojump_clock):
    path = tmp_path / "j"
    async with actors.open_system(LMDBJournal(path), processes=[report], now=clock) as system:
        await system.schedule("s", report, every=1, params=["x"], catch_up=2, overlap="allow")
    await trio.sleep(30 * DAY)  # 2.6 million ticks missed
    async with actors.open_system(LMDBJournal(path), processes=[report], now=clock) as system:
        await trio.sleep(0.5)
        started = await ids(system, report)
    assert started == ["report/x/2026-01-31T00:00:00Z", "report/x/2026-01-30T23:59:59Z"][::-1]


@process("strict/:tick")
async def strict(ctx: Context, tick: str, *, size: int) -> int:
    return size


@process("strict/:tick")
async def strict_v2(ctx: Context, tick: str, *, size: int, color: str) -> str:
    return color  # new code needs an input the stored schedule does not give


async def test_a_schedule_whose_input_no_longer_fits_waits_and_the_others_go_on(
    tmp_path, autojump_clock, caplog
):
    path = tmp_path / "j"
    async with actors.open_system(
        LMDBJournal(path), processes=[strict, nightly], now=clock
    ) as system:
        await system.schedule("strict", strict, every=3600, input={"size": 1})
        await system.schedule("nightly", nightly, every=3600)
    async with actors.open_system(
        LMDBJournal(path), processes=[strict_v2, nightly], now=clock
    ) as system:
        await trio.sleep(3 * 3600 + 1)
        assert len(await ids(system, nightly)) == 3
        assert await ids(system, strict_v2) == []
        failures = caplog.text.count("schedule 'strict' could not start its tick")
        assert 3 <= failures <= 3 * 60 + 2  # once a minute at most, not in a loop
        # Fixed by a new definition: the next look starts the latest tick.
        await system.schedule("strict", strict_v2, every=3600, input={"size": 1, "color": "red"})
        await trio.sleep(1)
        assert await ids(system, strict_v2) == ["strict/2026-01-01T03:00:00Z"]


ran: collections.Counter[str] = collections.Counter()


@process("counted/:tick")
async def counted(ctx: Context, tick: str) -> str:
    ran[tick] += 1
    return tick


class RefusesOneTick(MemoryJournal):
    """Answers the next commit of a tick (a transaction that expects a
    ``schedule/`` row and starts an instance) with ``fault``, once; with
    ``applied``, after writing it (an outcome the caller cannot know)."""

    fault: Exception | None = None
    applied = False

    def submit(self, txn: Txn) -> Ticket:
        fault = self.fault
        records = any(key.startswith("schedule/") for key, _ in txn.expects)
        if fault is not None and records and len(txn.ops) > 1:  # more than the row alone
            self.fault = None
            if self.applied:
                super().submit(txn)
            return Settled(fault)
        return super().submit(txn)


@pytest.mark.parametrize(
    "fault, applied",
    [
        (JournalFull("the map is full (test)"), False),
        (JournalDiskFull("no space left on device (test)", path="/nowhere"), False),
        (JournalUnavailable("the server does not answer (test)"), False),
        (CommitOutcomeUnknown("lost after COMMIT (test)"), True),
    ],
    ids=["JournalFull", "JournalDiskFull", "JournalUnavailable", "CommitOutcomeUnknown"],
)
async def test_a_tick_rides_out_a_journal_that_says_try_again_later(
    fault, applied, autojump_clock, caplog
):
    ran.clear()
    caplog.set_level(logging.WARNING)
    journal = RefusesOneTick()
    async with actors.open_system(journal, processes=[counted], now=clock) as system:
        await system.schedule("c", counted, every=60, overlap="allow")
        journal.fault, journal.applied = fault, applied
        await trio.sleep(3 * 60 + 30)
        assert journal.fault is None  # the first tick met it
        started = await ids(system, counted)
        assert [f"counted/2026-01-01T00:0{m}:00Z" for m in (1, 2, 3)] == started
        assert {1} == set(ran.values()) and 3 == len(ran)  # each tick ran once, late or not
        for address in started:
            assert address.split("/")[1] == await system.get(address).result()
        (info,) = await system.list_schedules()
        assert "2026-01-01T00:03:00Z" == info.last_tick
    said = [r for r in caplog.records if "the scheduler" in r.getMessage()]
    assert 1 == len(said), [r.getMessage() for r in said]
    assert logging.WARNING == said[0].levelno
    assert [] == [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
