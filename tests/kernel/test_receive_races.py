"""``ctx.receive`` is an effect, as ``ctx.wait`` is: awaited alone, or raced
and joined through ``ctx.first``/``all``/``settled``, giving ``(signal,
payload)`` live and on replay, on LMDB and in memory. Its log entry is the
one a lone ``receive`` always wrote, so older journals replay unchanged.
Time is trio's MockClock (autojump)."""

from __future__ import annotations

import inspect

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import replay_check, wait_quiescent
from storage import instance_id
from tests.runtime_helpers import EPOCH, wait_status

paid = Signal("paid")
status = Signal("status")
go = Signal("go")
DAY = 86400


@process("pay/:id")
async def pay(ctx: Context, id: str) -> list:
    which, got = await ctx.first(msg=ctx.receive(paid, status), late=ctx.sleep(3 * DAY))
    at = ctx.now().timestamp()
    if which == "msg":
        signal, payload = got
        return ["msg", signal.name, signal is paid or signal is status, payload, at]
    # The losing receive took nothing: a message sent after the timer is
    # there for the next receive.
    signal, payload = await ctx.receive(paid, status)
    return ["late", got, signal.name, payload, at]


@process("alone/:id")
async def alone(ctx: Context, id: str) -> list:
    effect = ctx.receive(paid, status)
    made = [inspect.iscoroutine(effect), inspect.isawaitable(effect)]
    signal, payload = await effect
    return [*made, signal.name, signal is status, payload]


@process("decided/:id")
async def decided(ctx: Context, id: str) -> list:
    which, (signal, payload) = await ctx.first(
        msg=ctx.receive(paid, status), late=ctx.sleep(3 * DAY)
    )
    await ctx.wait(go)  # suspends with the race decided and logged
    return [which, signal.name, signal is status, payload]


@process("joins/:id")
async def joins(ctx: Context, id: str) -> list:
    pairs = await ctx.all(ctx.receive(paid), ctx.receive(paid, status))
    outcomes = await ctx.settled(ctx.receive(status), ctx.sleep(DAY))
    return [
        [[signal.name, payload] for signal, payload in pairs],
        [outcome.ok for outcome in outcomes],
        [outcomes[0].value[0].name, outcomes[0].value[1]],
    ]


def _rows(value: list) -> list:
    return [list(v) if isinstance(v, tuple) else v for v in value]


async def test_receive_alone_is_an_effect_giving_signal_and_payload(any_opener):
    async with any_opener(alone) as system:
        handle = await system.start(alone, "a")
        await system.send("alone/a", status, {"state": "shipped"})
        assert [False, True, "status", True, {"state": "shipped"}] == await handle.result()


async def test_the_message_wins_the_race_and_the_timer_is_deleted(any_opener, autojump_clock):
    async with any_opener(pay) as system:
        t0 = trio.current_time()
        handle = await system.start(pay, "m")
        await trio.sleep(DAY)
        await system.send("pay/m", status, {"state": "shipped"})
        result = await handle.result()
        assert ["msg", "status", True, {"state": "shipped"}] == result[:4]
        assert DAY == pytest.approx(result[4] - EPOCH - t0, abs=1e-3)
        with system.journal.reader() as r:
            assert [] == r.timers(instance_id("pay/m"))


async def test_the_timer_wins_the_race_and_the_receive_takes_nothing(any_opener, autojump_clock):
    async with any_opener(pay) as system:
        t0 = trio.current_time()
        handle = await system.start(pay, "t")
        await wait_status(handle, "suspended")
        await trio.sleep(4 * DAY)  # the timer fell due at 3 days
        assert 4 * DAY == trio.current_time() - t0
        await system.send("pay/t", paid, 7)
        result = await handle.result()
        assert ["late", None, "paid", 7] == result[:4]
        assert 3 * DAY == pytest.approx(result[4] - EPOCH - t0, abs=1e-3)


@pytest.mark.parametrize("outcome", ["message first", "timer first"])
async def test_a_process_suspended_in_the_race_resumes_after_reopen(
    any_opener, autojump_clock, outcome
):
    async with any_opener(pay, passivate_after=0) as system:
        t0 = trio.current_time()
        handle = await system.start(pay, "r")
        await wait_status(handle, "suspended")
    # Closed with the process suspended inside the race: what it awaits
    # replays as it was (nothing logged, the timer pending), nothing differs.
    assert [] == await replay_check(any_opener.journal(), [pay])
    await trio.sleep(DAY)
    async with any_opener(pay) as system:
        handle = system.get("pay/r")
        if outcome == "message first":
            await system.send("pay/r", status, "shipped")
            result = await handle.result()
            assert ["msg", "status", True, "shipped"] == result[:4]
            assert DAY == pytest.approx(result[4] - EPOCH - t0, abs=1e-3)
        else:
            await trio.sleep(3 * DAY)
            await system.send("pay/r", paid, 7)
            result = await handle.result()
            assert ["late", None, "paid", 7] == result[:4]
            assert 3 * DAY == pytest.approx(result[4] - EPOCH - t0, abs=1e-3)
        with system.journal.reader() as r:
            assert [] == r.timers(instance_id("pay/r"))


async def test_a_decided_race_replays_to_the_same_pair_from_the_log_it_always_wrote(
    any_opener, autojump_clock
):
    async with any_opener(decided, passivate_after=0) as system:
        handle = await system.start(decided, "d")
        await system.send("decided/d", status, {"n": 1})
        await wait_status(handle, "suspended")
        await wait_quiescent(system)  # the take is durable by then
        with system.journal.reader() as r:
            entry = r.log(instance_id("decided/d"), 0)[1]
    # A lone receive of these signals writes this entry too: the shape an
    # earlier version's journal holds.
    assert {
        "k": "wait",
        "n": "paid,status",
        "h": b"",
        "v": {"n": 1},
        "m": entry["m"],
        "s": "status",
    } == entry
    assert [] == await replay_check(any_opener.journal(), [decided])
    async with any_opener(decided) as system:
        await system.send("decided/d", go)
        # Replayed from the log: the Signal object itself, and the payload.
        assert ["msg", "status", True, {"n": 1}] == await system.get("decided/d").result()


async def test_receive_joins_in_all_and_settled(any_opener, autojump_clock):
    async with any_opener(joins) as system:
        handle = await system.start(joins, "j")
        await system.send("joins/j", paid, 1)
        await system.send("joins/j", status, 2)
        await system.send("joins/j", status, 3)
        assert [[["paid", 1], ["status", 2]], [True, True], ["status", 3]] == [
            _rows(part) for part in await handle.result()
        ]


async def test_receive_still_needs_a_signal(any_opener):
    @process("bare/:id")
    async def bare(ctx: Context, id: str) -> list:
        refused = []
        for make in (lambda: ctx.receive(), lambda: ctx.receive("paid")):
            try:
                make()
            except actors.InvalidArguments as exc:
                refused.append(str(exc))
        return refused

    async with any_opener(bare) as system:
        handle = await system.start(bare, "b")
        assert [
            "ctx.receive needs at least one Signal",
            "expected an actors.Signal, got 'paid'",
        ] == await handle.result()


@process("teller/:id")
async def teller(ctx: Context, id: str) -> None:
    while True:
        _signal, amount = await ctx.receive(paid)
        await ctx.reply(amount * 2)


@process("asker/:id")
async def asker(ctx: Context, id: str) -> list:
    # ctx.ask is an effect too: it races like receive does.
    which, value = await ctx.first(reply=ctx.ask("teller/t", paid, 21), late=ctx.sleep(DAY))
    return [which, value]


async def test_an_ask_races_too(any_opener, autojump_clock):
    async with any_opener(teller, asker) as system:
        await system.start(teller, "t")
        handle = await system.start(asker, "a")
        assert ["reply", 42] == list(await handle.result())
