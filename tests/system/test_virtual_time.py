"""Virtual time is cheap: long durable sleeps under `autojump_clock` take
milliseconds of wall time, and idle instances still passivate on time."""

from __future__ import annotations

import time

import trio

from actors import Context, Signal, process
from storage import instance_id

DAY = 86400.0
ping = Signal("ping")


@process("month/:name")
async def month(ctx: Context, name: str) -> str:
    await ctx.sleep(30 * DAY)
    return "slept"


@process("daily/:name")
async def daily(ctx: Context, name: str) -> int:
    for _ in range(30):
        await ctx.sleep(DAY)
    return 30


@process("idle/:name")
async def idle(ctx: Context, name: str) -> object:
    return await ctx.wait(ping)


async def test_thirty_day_sleep_costs_milliseconds(any_opener, autojump_clock):
    async with any_opener(month) as system:
        t0 = trio.current_time()
        wall = time.perf_counter()
        handle = await system.start(month, "a")
        assert "slept" == await handle.result()
        elapsed = time.perf_counter() - wall
        print(f"30 virtual days in one sleep: {elapsed * 1000:.1f} ms of wall time")
        assert 30 * DAY <= trio.current_time() - t0 < 30 * DAY + 1
        assert elapsed < 1.0


async def test_thirty_daily_sleeps_cost_milliseconds(any_opener, autojump_clock):
    async with any_opener(daily) as system:
        wall = time.perf_counter()
        t0 = trio.current_time()
        handle = await system.start(daily, "a")
        assert 30 == await handle.result()
        elapsed = time.perf_counter() - wall
        print(f"30 sleeps of one virtual day: {elapsed * 1000:.1f} ms of wall time")
        assert 30 * DAY <= trio.current_time() - t0 < 30 * DAY + 30
        assert elapsed < 1.0


async def test_idle_instance_passivates_after_passivate_after(any_opener, autojump_clock):
    async with any_opener(idle, passivate_after=60.0) as system:
        handle = await system.start(idle, "a")
        await trio.sleep(1)
        assert instance_id("idle/a") in system.registry.live
        await trio.sleep(58)
        assert instance_id("idle/a") in system.registry.live  # not before its time
        await trio.sleep(60 / 4 + 1)  # the sweep's granularity
        assert instance_id("idle/a") not in system.registry.live
        assert "suspended" == handle.status
        # Parked again later, it passivates again: the sweep is not left asleep.
        await system.send("idle/a", ping, "hi")
        assert "hi" == await handle.result()


async def test_instances_parking_at_different_times_all_passivate(any_opener, autojump_clock):
    async with any_opener(idle, month, passivate_after=10.0) as system:
        await system.start(month, "m")
        for i in range(5):
            await system.start(idle, str(i))
            await trio.sleep(1.5)  # 7.5 s in all, under passivate_after
        ids = {instance_id(f"idle/{i}") for i in range(5)} | {instance_id("month/m")}
        assert ids <= set(system.registry.live)
        await trio.sleep(10 + 10 / 4 + 0.1)
        assert set() == ids & set(system.registry.live)
        # A month later the sleeper is back, finished, and gone from memory.
        handle = system.get("month/m")
        assert "slept" == await handle.result()
        await system.start(idle, "late")
        await trio.sleep(13)
        assert instance_id("idle/late") not in system.registry.live
