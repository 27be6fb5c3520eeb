"""Streams with durable cursors, exports, sagas, validation, error records and
cleanup, through the public API on LMDB, across close and reopen."""

from __future__ import annotations

from contextlib import aclosing

import pytest
import trio

import actors
from actors import Context, Retry, Signal, process
from actors.testing import wait_quiescent
from storage import instance_id
from tests.runtime_helpers import wait_status

more = Signal("more")
stop = Signal("stop")


@process("feed/:id")
async def feed(ctx: Context, id: str) -> int:
    count = 0
    while True:
        which, value = await ctx.first(more=ctx.wait(more), stop=ctx.wait(stop))
        if which == "stop":
            return count
        for item in value:
            await ctx.emit(item)
            count += 1


async def _consume(system, address, consumer, n, **kw):
    got = []
    async with system.stream(address, consumer=consumer, **kw) as stream:
        async for value in stream:
            got.append(value)
            if len(got) == n:
                break
    return got


async def test_consumer_cursor_semantics(opener):
    async with opener(feed) as system:
        await system.start(feed, "f")
        await system.send("feed/f", more, [0, 1, 2, 3, 4])
        # break: the value in hand counts as consumed.
        assert await _consume(system, "feed/f", "a", 2) == [0, 1]
        # an exception: the value in hand stays unconsumed.
        with pytest.raises(RuntimeError):
            async with system.stream("feed/f", consumer="a") as stream:
                async for value in stream:
                    assert value == 2
                    raise RuntimeError("handler failed")
        assert await _consume(system, "feed/f", "a", 1) == [2]
        # a second consumer has its own cursor, from the start.
        assert await _consume(system, "feed/f", "b", 4) == [0, 1, 2, 3]
        # from_="latest" skips what was emitted before it connected.
        while await system.journal.read(lambda r: r.stream_length(instance_id("feed/f"))) < 5:
            await trio.sleep(0.01)
        late = []

        async def latest():
            async with system.stream("feed/f", consumer="late", from_="latest") as stream:
                async for value in stream:
                    late.append(value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(latest)
            await trio.sleep(0.05)
            await system.send("feed/f", more, [5, 6])
            await system.send("feed/f", stop)
        assert late == [5, 6]  # live values arrived; iteration ended at the end
    async with opener(feed) as system:
        # After a restart each consumer continues right after its last value.
        assert await _consume(system, "feed/f", "a", 100) == [3, 4, 5, 6]
        assert await _consume(system, "feed/f", "b", 100) == [4, 5, 6]
        with system.journal.reader() as r:
            assert r.cursors(instance_id("feed/f")) == {"a": 7, "b": 7, "late": 7}


async def test_replay_never_emits_twice(opener):
    async with opener(feed, passivate_after=0) as system:
        await system.start(feed, "g")
        await system.send("feed/g", more, ["x", "y"])
        await wait_quiescent(system)
        await system.send("feed/g", more, ["z"])
        await wait_quiescent(system)
    async with opener(feed) as system:
        await system.send("feed/g", stop)
        assert await system.get("feed/g").result() == 3
        assert await _consume(system, "feed/g", "c", 100) == ["x", "y", "z"]


async def test_unknown_stream_is_a_clear_error(opener):
    async with opener(feed) as system:
        with pytest.raises(actors.NotDelivered, match="no instance"):
            async with system.stream("feed/none", consumer="c"):
                pass
        with pytest.raises(actors.InvalidArguments):
            system.stream("feed/none", consumer="c", from_="middle")


@process("board/:id")
async def board(ctx: Context, id: str) -> str:
    for n in range(1, 4):
        await ctx.publish({"n": n})
        await ctx.wait(more)
    return "done"


async def test_exports_and_watch(opener):
    async with opener(board) as system:
        handle = await system.start(board, "b")
        seen = []

        async def watcher():
            async with aclosing(handle.watch()) as values:
                async for value in values:
                    seen.append(value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watcher)
            await wait_status(handle, "suspended")
            assert handle.exports == {"n": 1}
            await system.send("board/b", more)
            while handle.exports != {"n": 2}:
                await trio.sleep(0.01)
            await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert seen[0] == {"n": 1} and seen[-1] == {"n": 2}
    async with opener(board) as system:
        handle = system.get("board/b")
        assert handle.exports == {"n": 2}  # survives the restart
        first = None
        async with aclosing(handle.watch()) as values:
            async for value in values:  # a new watcher gets the current value first
                first = value
                break
        assert first == {"n": 2}


ledger: list[str] = []


def charge(order: str, amount: int) -> str:
    ledger.append(f"charge {order} {amount} {actors.current_step().key}")
    return f"ch-{order}"


def refund(order: str, amount: int) -> None:
    info = actors.current_step()
    ledger.append(f"refund {order} {amount} {info.key} {info.forward_result}")


def reserve(order: str) -> str:
    ledger.append(f"reserve {order}")
    return "r-1"


def release(order: str) -> None:
    ledger.append(f"release {order} {actors.current_step().forward_result}")


flaky_state = {"fail": 0}


def flaky_release(order: str) -> None:
    if flaky_state["fail"] > 0:
        flaky_state["fail"] -= 1
        raise ConnectionError("warehouse down")
    ledger.append(f"release {order}")


@pytest.fixture(autouse=True)
def _reset():
    ledger.clear()
    flaky_state["fail"] = 0


@process("order/:id")
async def order(ctx: Context, id: str, *, fail: bool = True) -> str:
    await ctx.step(charge, id, 10, compensate=refund)
    await ctx.step(reserve, id, compensate=release)
    await ctx.wait(more)
    if fail:
        raise ValueError("no approval")
    return "shipped"


async def test_compensation_runs_in_reverse_order_and_the_process_fails(opener):
    async with opener(order) as system:
        handle = await system.start(order, "o1")
        await system.send("order/o1", more)
        with pytest.raises(actors.ProcessFailed, match="no approval"):
            await handle.result()
    charge_key = f"order/o1/1/0/{charge.__qualname__}/1"
    assert ledger == [
        f"charge o1 10 {charge_key}",
        "reserve o1",
        "release o1 r-1",
        f"refund o1 10 {charge_key}/compensate ch-o1",
    ]


@process("order2/:id")
async def order2(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 10, compensate=refund)
    await ctx.step(reserve, id, compensate=flaky_release, retry=Retry(attempts=2, backoff=0))
    raise ValueError("declined")


async def test_stuck_compensation_resume_and_abandon(opener, autojump_clock):
    flaky_state["fail"] = 10
    async with opener(order2) as system:
        handle = await system.start(order2, "s")
        assert await wait_status(handle, "compensation_stuck") == "compensation_stuck"
        assert "warehouse down" in handle.last_error
        assert ledger == ["charge s 10 " + f"order2/s/1/0/{charge.__qualname__}/1", "reserve s"]
        with pytest.raises(actors.NotDelivered):
            await system.send("order2/s", more)
    async with opener(order2) as system:
        handle = system.get("order2/s")
        assert handle.status == "compensation_stuck"  # parked across restarts
        flaky_state["fail"] = 0
        assert await system.resume_compensation("order2/s")
        with pytest.raises(actors.ProcessFailed, match="declined"):
            await handle.result()
        assert len(ledger) == 4 and ledger[2] == "release s"
        assert ledger[3].startswith("refund s 10")
        assert await system.resume_compensation("order2/s") is False
        # abandon: a second instance gets stuck and is abandoned.
        flaky_state["fail"] = 10
        other = await system.start(order2, "t")
        await wait_status(other, "compensation_stuck")
        assert await system.abandon_compensation("order2/t")
        with pytest.raises(actors.ProcessFailed, match="declined"):
            await other.result()
        assert not any(line.startswith("refund t") for line in ledger)


async def _blocking_release(order: str) -> None:
    attempt = actors.current_step().attempt
    ledger.append(f"slow-release {order} attempt {attempt}")
    if attempt == 1:
        await trio.sleep(3600)  # the system closes meanwhile


async def test_crash_during_compensation_resumes_without_repeating(opener):
    @process("order3/:id")
    async def order3(ctx: Context, id: str) -> None:
        await ctx.step(charge, id, 5, compensate=refund)
        await ctx.step(reserve, id, compensate=_blocking_release)
        await ctx.step(reserve, id + "-b", compensate=release)
        raise ValueError("fails")

    async with opener(order3) as system:
        handle = await system.start(order3, "c")
        # Stop the system in the middle of compensation: after release c-b
        # completed, while the slow release of c runs its first attempt.
        while not any(line.startswith("slow-release") for line in ledger):
            await trio.sleep(0.001)
        assert handle.status == "running"
    async with opener(order3) as system:
        with pytest.raises(actors.ProcessFailed, match="fails"):
            await system.get("order3/c").result()
    compensations = [line for line in ledger if not line.startswith(("charge", "reserve"))]
    assert compensations[:3] == [
        "release c-b r-1",
        "slow-release c attempt 1",
        "slow-release c attempt 2",
    ]  # release c-b ran once; the interrupted one continued with its next attempt
    assert compensations[3].startswith("refund c 5") and len(compensations) == 4


async def test_cancel_compensates_when_the_process_asks(opener):
    @process("order4/:id", compensate_on_cancel=True)
    async def order4(ctx: Context, id: str) -> None:
        await ctx.step(charge, id, 7, compensate=refund)
        await ctx.wait(more)

    async with opener(order4, order) as system:
        handle = await system.start(order4, "k")
        await wait_status(handle, "suspended")
        assert await system.cancel("order4/k")
        with pytest.raises(actors.ProcessCancelled):
            await handle.result()
        assert ledger[-1].startswith("refund k 7")
        # Without the flag, a cancel does not compensate.
        plain = await system.start(order, "p")
        await wait_status(plain, "suspended")
        await system.cancel("order/p")
        assert not any(line.startswith("refund p") for line in ledger)


async def test_validation_coerces_and_a_failure_is_not_retried(opener):
    calls = []

    def total(amount) -> int:
        calls.append(amount)
        return amount * 2

    def to_int(value):
        return int(value)

    def positive(value):
        if value <= 0:
            raise ValueError(f"{value} is not positive")
        return value

    @process("val/:id")
    async def val(ctx: Context, id: str) -> list:
        good = await ctx.step(total, "21", validate_input=to_int, validate_output=str)
        try:
            await ctx.step(
                total,
                "-1",
                validate_input=to_int,
                validate_output=positive,
                retry=Retry(attempts=5),
            )
        except actors.StepFailed as exc:
            return [good, str(exc)]
        return [good]

    async with opener(val) as system:
        good, message = await (await system.start(val, "v")).result()
    assert good == "42"  # the validators' returned values were used
    assert "output validation" in message and "-2 is not positive" in message
    assert calls == [21, -1]  # validation failures are not retried


class Weird(BaseException):
    def __str__(self):
        raise RuntimeError("no str for you")


async def test_odd_errors_are_recorded_readably(opener):
    @process("weird/:id")
    async def weird(ctx: Context, id: str) -> None:
        raise Weird()

    async with opener(weird) as system:
        with pytest.raises(actors.ProcessFailed) as info:
            await (await system.start(weird, "w")).result()
    assert info.value.error_type.endswith("Weird")
    assert "Weird" in str(info.value) and "object" not in str(info.value).lower()
    assert "Traceback" in info.value.error_traceback


async def test_cleanup_removes_every_record_of_old_finished_instances(opener, autojump_clock):
    async with opener(feed, order) as system:
        await system.start(feed, "old")
        await system.send("feed/old", more, [1, 2])
        await _consume(system, "feed/old", "c", 1)
        await system.send("feed/old", more, [3])
        await system.send("feed/old", stop)
        await system.get("feed/old").result()
        await system.start(feed, "live")
        failed = await system.start(order, "f")
        await system.send("order/f", more)
        with pytest.raises(actors.ProcessFailed):
            await failed.result()
        await trio.sleep(3600)
        await system.start(feed, "recent")
        await system.send("feed/recent", stop)
        await system.get("feed/recent").result()
        with pytest.raises(actors.InvalidArguments):
            await system.cleanup(older_than=60, statuses=("suspended",))
        assert await system.cleanup(older_than=60) == 2
        with system.journal.reader() as r:
            assert not r.has_records(instance_id("feed/old"))
            assert not r.has_records(instance_id("order/f"))
            assert r.has_records(instance_id("feed/recent"))
            assert r.has_records(instance_id("feed/live"))
        assert system.get("feed/old") is None
    async with opener(feed, order) as system:
        assert await system.cleanup(older_than=0) == 1  # the recent one, now
        assert [i.id async for i in system.query()] == ["feed/live"]
