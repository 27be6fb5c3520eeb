"""Effects through the public API: timers, races and joins, steps, recorded
values, continue-as-new, replay; durable paths across close and reopen.
Time is trio's MockClock (autojump): days pass in milliseconds."""

from __future__ import annotations

import random
import time

import pytest
import trio

import actors
from actors import Context, Retry, Signal, process
from actors.testing import wait_quiescent
from storage import instance_id
from tests.runtime_helpers import EPOCH, wait_status

approve = Signal("approve")
ping = Signal("ping")
DAY = 86400


@process("nap/:id")
async def nap(ctx: Context, id: str, *, days: int) -> float:
    await ctx.sleep(days * DAY)
    return ctx.now().timestamp()


@process("deal/:id")
async def deal(ctx: Context, id: str) -> tuple:
    which, value = await ctx.first(ok=ctx.wait(approve), late=ctx.sleep(3 * DAY))
    return which, value


async def test_durable_sleep_takes_exact_virtual_time(opener, autojump_clock):
    async with opener(nap) as system:
        t0 = trio.current_time()
        handle = await system.start(nap, "a", days=30)
        finished = await handle.result()
        assert trio.current_time() - t0 == pytest.approx(30 * DAY)
        assert finished == pytest.approx(EPOCH + t0 + 30 * DAY)


async def test_timer_survives_restart_and_fires_when_due_during_downtime(opener, autojump_clock):
    async with opener(nap) as system:
        t0 = trio.current_time()
        await system.start(nap, "b", days=3)
        await trio.sleep(DAY)
    # The system is down for five days: the timer falls due meanwhile.
    await trio.sleep(5 * DAY)
    async with opener(nap) as system:
        handle = system.get("nap/b")
        done_at = await handle.result()
        assert done_at == pytest.approx(EPOCH + t0 + 6 * DAY)  # at once on recovery
        with system.journal.reader() as r:
            assert r.timers(instance_id("nap/b")) == []


async def test_timer_resumes_with_its_original_due_time(opener, autojump_clock):
    async with opener(nap) as system:
        t0 = trio.current_time()
        await system.start(nap, "c", days=3)
        await trio.sleep(DAY)
    async with opener(nap) as system:
        done_at = await system.get("nap/c").result()
        assert done_at == pytest.approx(EPOCH + t0 + 3 * DAY)


async def test_first_signal_wins_and_loser_timer_is_deleted(opener, autojump_clock):
    async with opener(deal) as system:
        handle = await system.start(deal, "d1")
        await trio.sleep(DAY)
        await system.send("deal/d1", approve, {"by": "ann"})
        assert await handle.result() == ["ok", {"by": "ann"}] or (
            await handle.result() == ("ok", {"by": "ann"})
        )
        with system.journal.reader() as r:
            assert r.timers(instance_id("deal/d1")) == []


async def test_first_timer_wins_and_the_late_message_stays_unread(opener, autojump_clock):
    async with opener(deal) as system:
        t0 = trio.current_time()
        handle = await system.start(deal, "d2")
        assert tuple(await handle.result()) == ("late", None)
        assert trio.current_time() - t0 == pytest.approx(3 * DAY)
        with pytest.raises(actors.NotDelivered):
            await system.send("deal/d2", approve, {"by": "late"})


async def test_first_across_restart(opener, autojump_clock):
    async with opener(deal, passivate_after=0) as system:
        await system.start(deal, "d3")
        await trio.sleep(DAY)
    async with opener(deal) as system:
        await system.send("deal/d3", approve, {"by": "bob"})
        assert tuple(await system.get("deal/d3").result()) == ("ok", {"by": "bob"})


@process("recv/:id")
async def collector(ctx: Context, id: str, *, n: int) -> list:
    got = []
    for _ in range(n):
        signal, payload = await ctx.receive(approve, ping)
        got.append((signal.name, payload))
    return got


async def test_selective_receive_keeps_unmatched_messages(opener):
    @process("picky/:id")
    async def picky(ctx: Context, id: str) -> list:
        first = await ctx.wait(approve)
        second = await ctx.wait(ping)
        third = await ctx.wait(ping)
        return [first, second, third]

    async with opener(picky, passivate_after=0) as system:
        handle = await system.start(picky, "p")
        await system.send("picky/p", ping, 1)
        await system.send("picky/p", ping, 2)
        await wait_status(handle, "suspended")
        with system.journal.reader() as r:
            assert len(r.mailbox(instance_id("picky/p"))) == 2
    async with opener(picky) as system:
        await system.send("picky/p", approve, "a")
        assert await system.get("picky/p").result() == ["a", 1, 2]


async def test_receive_gives_the_signal_object_in_mailbox_order(opener):
    async with opener(collector) as system:
        handle = await system.start(collector, "r", n=3)
        for signal, payload in [(ping, 1), (approve, 2), (ping, 3)]:
            await system.send("recv/r", signal, payload)
        assert await handle.result() == [["ping", 1], ["approve", 2], ["ping", 3]] or (
            await handle.result() == [("ping", 1), ("approve", 2), ("ping", 3)]
        )


async def test_all_and_settled(opener, autojump_clock):
    def double(x: int) -> int:
        return 2 * x

    def fail(x: int) -> int:
        raise KeyError(x)

    async def fail_later(x: int, delay: float) -> int:
        await trio.sleep(delay)
        raise KeyError(x)

    @process("join/:id")
    async def join(ctx: Context, id: str) -> dict:
        values = await ctx.all(ctx.step(double, 1), ctx.wait(ping), ctx.sleep(5))
        outcomes = await ctx.settled(ctx.step(double, 2), ctx.step(fail, 3))
        try:
            await ctx.all(
                ctx.sleep(100), ctx.step(fail_later, 4, 2.0), ctx.step(fail_later, 5, 1.0)
            )
        except actors.StepFailed as exc:
            lowest = str(exc)
        return {
            "values": values,
            "ok": [(o.ok, o.value) for o in outcomes],
            "error": type(outcomes[1].error).__name__,
            "lowest": lowest,
        }

    async with opener(join) as system:
        t0 = trio.current_time()
        handle = await system.start(join, "j")
        await system.send("join/j", ping, "p")
        result = await handle.result()
        assert result["values"] == [2, "p", None]
        assert result["ok"] == [(True, 4), (False, None)]
        assert result["error"] == "StepFailed"
        assert "KeyError: 5" in result["lowest"]  # the first failure; step 4 was cancelled
        assert trio.current_time() - t0 < 100  # the failing join cancelled its sleep
        with system.journal.reader() as r:
            assert r.timers(instance_id("join/j")) == []


async def test_effect_numbering_is_by_creation_so_replay_matches(opener, autojump_clock):
    order = []

    async def slow(x: int, delay: float) -> int:
        await trio.sleep(delay)
        order.append(x)
        return x

    @process("race/:id")
    async def race(ctx: Context, id: str) -> list:
        a = ctx.step(slow, 1, 5.0)
        b = ctx.step(slow, 2, 1.0)
        values = await ctx.all(a, b)
        await ctx.wait(ping)
        return values

    async with opener(race, passivate_after=0) as system:
        handle = await system.start(race, "x")
        await wait_status(handle, "suspended")
        assert order == [2, 1]
    async with opener(race) as system:
        await system.send("race/x", ping)
        assert await system.get("race/x").result() == [1, 2]
        assert order == [2, 1]  # replayed, not run again


async def test_step_retries_with_backoff_then_succeeds(opener, autojump_clock):
    attempts = []

    def flaky(n: int) -> str:
        info = actors.current_step()
        attempts.append((info.attempt, info.key, trio.current_time() if False else None))
        if info.attempt < 3:
            raise ConnectionError("try again")
        return f"ok {n}"

    @process("flaky/:id")
    async def proc(ctx: Context, id: str) -> str:
        return await ctx.step(flaky, 7, retry=Retry(attempts=5, backoff=1, max_backoff=10))

    rng = random.Random(1)
    expect = [Retry(attempts=5, backoff=1, max_backoff=10).delay(i, rng.random()) for i in (1, 2)]
    async with opener(proc, random=random.Random(1)) as system:
        t0 = trio.current_time()
        handle = await system.start(proc, "f")
        assert await handle.result() == "ok 7"
        assert trio.current_time() - t0 == pytest.approx(sum(expect), abs=1e-3)
        assert [a for a, _, _ in attempts] == [1, 2, 3]
        assert {k for _, k, _ in attempts} == {f"flaky/f/1/0/{flaky.__qualname__}/1"}


async def test_step_exhausts_retries_and_non_retryable(opener, autojump_clock):
    calls = []

    def always(kind: str) -> None:
        calls.append(kind)
        raise (TypeError if kind == "type" else OSError)(f"bad {kind}")

    @process("fail/:id")
    async def proc(ctx: Context, id: str) -> list:
        out = []
        for kind in ("os", "type"):
            try:
                await ctx.step(always, kind, retry=Retry(attempts=3, non_retryable=(TypeError,)))
            except actors.StepFailed as exc:
                out.append(str(exc))
        return out

    async with opener(proc) as system:
        handle = await system.start(proc, "e")
        messages = await handle.result()
        assert calls == ["os", "os", "os", "type"]
        assert "OSError: bad os" in messages[0] and "attempt 3" in messages[0]
        assert "TypeError: bad type" in messages[1]


async def test_step_timeout(opener, autojump_clock):
    async def hang() -> None:
        await trio.sleep(3600)

    @process("slow/:id")
    async def proc(ctx: Context, id: str) -> str:
        try:
            await ctx.step(hang, timeout=10, retry=Retry(attempts=2, backoff=0))
        except actors.StepTimeout as exc:
            return str(exc)
        return "no"

    async with opener(proc) as system:
        t0 = trio.current_time()
        message = await (await system.start(proc, "t")).result()
        assert "timed out after 10" in message and "attempt 2" in message
        assert trio.current_time() - t0 == pytest.approx(20)


async def test_recorded_step_is_not_run_again_after_restart(opener, autojump_clock):
    runs = []

    def charge(amount: int) -> dict:
        runs.append(actors.current_step().key)
        return {"charged": amount}

    @process("pay/:id")
    async def pay(ctx: Context, id: str) -> list:
        first = await ctx.step(charge, 10)
        await ctx.wait(ping)
        second = await ctx.step(charge, 20)
        return [first, second]

    async with opener(pay) as system:
        handle = await system.start(pay, "p")
        await wait_status(handle, "suspended")
    async with opener(pay) as system:
        await system.send("pay/p", ping)
        assert await system.get("pay/p").result() == [{"charged": 10}, {"charged": 20}]
    assert runs == [f"pay/p/1/0/{charge.__qualname__}/1", f"pay/p/1/0/{charge.__qualname__}/2"]


async def test_interrupted_step_continues_with_the_next_attempt(opener, autojump_clock):
    seen = []
    release = trio.Event()

    async def once(x: int) -> int:
        info = actors.current_step()
        seen.append(info.attempt)
        if info.attempt == 1:
            await release.wait()  # the system closes while attempt 1 runs
        return x

    @process("int/:id")
    async def proc(ctx: Context, id: str) -> int:
        return await ctx.step(once, 5)

    async with opener(proc) as system:
        handle = await system.start(proc, "i")
        while not seen:
            await trio.sleep(0.01)
        assert handle.status == "running"
    async with opener(proc) as system:
        assert await system.get("int/i").result() == 5
    assert seen == [1, 2]


async def test_sync_step_holds_autojump_off(opener, autojump_clock):
    def blocking() -> float:
        time.sleep(0.2)  # real time in a worker thread
        return 1.0

    @process("sync/:id")
    async def proc(ctx: Context, id: str) -> float:
        return await ctx.step(blocking)

    async with opener(proc, nap) as system:
        sleeper = await system.start(nap, "z", days=1)
        t0 = trio.current_time()
        assert await (await system.start(proc, "s")).result() == 1.0
        # Virtual time did not jump to the sleeper's timer while the thread ran.
        assert trio.current_time() - t0 < 1
        assert sleeper.status == "suspended"


async def test_now_random_uuid_are_stable_across_replay(opener, autojump_clock):
    @process("rec/:id")
    async def rec(ctx: Context, id: str) -> list:
        values = [ctx.now().timestamp(), ctx.random(), str(ctx.uuid())]
        await ctx.wait(ping)
        return [*values, ctx.now().timestamp()]

    async with opener(rec, passivate_after=0, random=random.Random(5)) as system:
        handle = await system.start(rec, "r")
        await wait_status(handle, "suspended")
        await trio.sleep(100)
    async with opener(rec, random=random.Random(99)) as system:
        await system.send("rec/r", ping)
        values = await system.get("rec/r").result()
    rng = random.Random(5)
    assert values[1] == rng.random()
    assert values[3] - values[0] == pytest.approx(100, abs=1)


async def test_idempotency_key_is_persisted_before_the_first_attempt(opener, autojump_clock):
    seen_in_journal = []

    @process("key/:id")
    async def proc(ctx: Context, id: str) -> str:
        return await ctx.step(check_key)

    async def check_key() -> str:
        info = actors.current_step()
        with system.journal.reader() as r:  # what is durable while the step runs
            seen_in_journal.append(r.log(instance_id("key/k"), 0)[1])
        return info.key

    async with opener(proc) as system:
        handle = await system.start(proc, "k")
        key = await handle.result()
        assert key == f"key/k/1/0/{check_key.__qualname__}/1"
        [started] = seen_in_journal
        assert started["key"] == key and started["a"] == 1 and "v" not in started


async def test_continue_as_new_drops_the_log_and_keeps_the_mailbox(opener):
    @process("loop/:id")
    async def loop(ctx: Context, id: str, *, total: int = 0, runs: int = 0) -> dict:
        for _ in range(3):
            total += await ctx.wait(ping)
        if total >= 30:
            return {"total": total, "runs": runs, "run": ctx.run}
        await ctx.continue_as_new(total=total, runs=runs + 1)

    async with opener(loop, passivate_after=0) as system:
        await system.start(loop, "l")
        for _ in range(4):
            await system.send("loop/l", ping, 2)
        await wait_quiescent(system)
        with system.journal.reader() as r:
            iid = instance_id("loop/l")
            assert r.log_runs(iid) == [1]
            assert r.instance(iid).record.run == 1
    async with opener(loop) as system:
        for _ in range(11):
            await system.send("loop/l", ping, 2)
        assert await system.get("loop/l").result() == {"total": 30, "runs": 4, "run": 4}


async def test_changed_code_is_a_nondeterminism_error_and_the_instance_is_kept(opener):
    @process("nd/:id")
    async def v1(ctx: Context, id: str) -> str:
        await ctx.step(str, 1, name="first")
        await ctx.wait(ping)
        return "v1"

    @process("nd/:id")
    async def v2(ctx: Context, id: str) -> str:
        await ctx.step(str, 1, name="renamed")
        await ctx.wait(ping)
        return "v2"

    @process("nd/:id")
    async def v3(ctx: Context, id: str) -> str:
        await ctx.step(str, 1, name="first")
        await ctx.wait(ping)
        return "fixed"

    async with opener(v1) as system:
        handle = await system.start(v1, "n")
        await wait_status(handle, "suspended")
    async with opener(v2) as system:
        await system.send("nd/n", ping)
        handle = system.get("nd/n")
        for _ in range(100):
            if handle.last_error:
                break
            await trio.sleep(0.01)
        assert handle.status == "suspended"
        assert "NonDeterminismError" in handle.last_error
        assert "'first'" in handle.last_error and "'renamed'" in handle.last_error
        [info] = [i async for i in system.query(process="nd/:id")]
        assert info.last_error == handle.last_error
    async with opener(v3) as system:
        assert await system.get("nd/n").result() == "fixed"
        assert system.get("nd/n").last_error is None


async def test_passivation_drops_idle_instances_and_a_message_brings_them_back(opener):
    @process("idle/:id")
    async def idle(ctx: Context, id: str) -> int:
        return await ctx.wait(ping)

    async with opener(idle, passivate_after=0) as system:
        handles = [await system.start(idle, str(i)) for i in range(50)]
        await wait_quiescent(system)
        assert len(system.registry.live) == 0  # nothing in memory
        assert {h.status for h in handles} == {"suspended"}
        await system.send("idle/7", ping, 7)
        assert await handles[7].result() == 7
        assert len(system.registry.live) == 0


async def test_closing_is_not_a_cancel(opener):
    @process("busy/:id")
    async def busy(ctx: Context, id: str) -> int:
        total = 0
        while total < 3:
            total += await ctx.wait(ping)
        return total

    async with opener(busy) as system:
        handle = await system.start(busy, "b")
        await system.send("busy/b", ping, 1)
    async with opener(busy) as system:
        handle = system.get("busy/b")
        assert handle.status in ("running", "suspended")
        await system.send("busy/b", ping, 2)
        assert await handle.result() == 3
