"""One driver for the live instance and for `replay_check`: the same code
meets the same history with the same verdict, at the same position."""

from __future__ import annotations

import contextlib
import gc

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import open_test_system, replay_check, wait_quiescent
from storage import LMDBJournal, LogEntry, instance_id

go = Signal("go")


def _note(x: int) -> int:
    return x


@process("order/:id")
async def order_v1(ctx: Context, id: str) -> str:
    await ctx.step(_note, 1, name="reserve")
    await ctx.sleep(5)
    await ctx.wait(go)
    await ctx.wait(go)
    return "shipped"


@process("order/:id")
async def order_renamed(ctx: Context, id: str) -> str:
    await ctx.step(_note, 1, name="reserve")
    await ctx.sleep(5)
    await ctx.step(_note, 2, name="audit")  # where the history has the first wait
    await ctx.wait(go)
    return "shipped"


@process("order/:id")
async def order_shorter(ctx: Context, id: str) -> str:
    await ctx.step(_note, 1, name="reserve")
    return "shipped"  # the history goes on with a sleep and a wait


@process("order/:id")
async def order_awaits_trio(ctx: Context, id: str) -> str:
    await ctx.step(_note, 1, name="reserve")
    # Not an effect: the driver throws ContextError in.
    with contextlib.suppress(actors.ContextError):
        await trio.lowlevel.checkpoint()
    await ctx.sleep(6)  # the history has a sleep of 5 here
    await ctx.wait(go)
    await ctx.wait(go)
    return "shipped"


@pytest.mark.parametrize(
    "changed, position, message",
    [(order_renamed, 3, "replayed a different effect"), (order_shorter, 2, "its log goes on")],
)
async def test_the_live_driver_and_replay_check_agree(
    tmp_path, autojump_clock, changed, position, message
):
    path = tmp_path / "j"
    async with open_test_system([order_v1], journal=LMDBJournal(path)) as system:
        handle = await system.start(order_v1, "o-1")
        await system.send("order/o-1", go)
        await trio.sleep(60)  # virtual: all but the second wait is done
        assert "suspended" == handle.status
    [problem] = await replay_check(path, [changed])
    assert ("order/o-1", position) == (problem.address, problem.position)
    assert message in problem.message
    # Live, the same code meets the same history: the instance stays
    # suspended with the same verdict as its last error.
    async with open_test_system([changed], journal=LMDBJournal(path)) as system:
        await system.send("order/o-1", go)
        await trio.sleep(60)
        [info] = [i async for i in system.query()]
    assert "suspended" == info.status
    assert f"position {position}" in info.last_error
    assert message in info.last_error


async def test_replay_check_follows_the_live_answer_to_a_non_effect(tmp_path, autojump_clock):
    path = tmp_path / "j"
    async with open_test_system([order_v1], journal=LMDBJournal(path)) as system:
        handle = await system.start(order_v1, "o-1")
        await system.send("order/o-1", go)
        await trio.sleep(60)  # virtual: all but the second wait is done
        assert "suspended" == handle.status
    # Live, awaiting trio directly gets ContextError thrown in; the check
    # does the same, so it replays on past it and meets the changed sleep.
    [problem] = await replay_check(path, [order_awaits_trio])
    assert ("order/o-1", 2) == (problem.address, problem.position)
    assert "replayed a different effect" in problem.message


@process("ticker/:id")
async def ticker(ctx: Context, id: str) -> None:
    while True:
        await ctx.wait(go)


async def test_a_passivated_instance_lets_go_of_its_log_at_once(autojump_clock):
    # The actor and its driver refer to each other, so the actor leaves as
    # cyclic garbage; its log (every entry of the run, read at each wake)
    # must not wait in it for the cycle collector.
    def entries_alive() -> int:
        return sum(type(o) is LogEntry for o in gc.get_objects())

    async with open_test_system([ticker], always_replay=True) as system:
        await system.start(ticker, "t")
        for _ in range(20):
            await system.send("ticker/t", go)
            await wait_quiescent(system)
        gc.collect()
        gc.disable()
        try:
            await system.send("ticker/t", go)  # woken: 20 entries read and replayed
            await wait_quiescent(system)
            # Alive only where the system's log cache keeps them for the next
            # wake; let go of there, none is left in cyclic garbage.
            assert system.registry.logs.decoded() == entries_alive() == 20
            system.registry.logs.forget(instance_id("ticker/t"))
            assert 0 == entries_alive()
        finally:
            gc.enable()


stop = Signal("stop")


@process("ticker/:id")
async def ticker_stopped(ctx: Context, id: str) -> None:
    while True:
        await ctx.wait(stop)  # where the history took go


@process("ticker/:id")
async def ticker_then_step(ctx: Context, id: str) -> None:
    await ctx.wait(go)
    await ctx.step(_note, 1, name="audit")  # where the history has the second wait


@pytest.mark.parametrize(
    ("changed", "position", "found"),
    [
        (ticker_stopped, 1, "wait 'stop': another signal ('go' in the log, 'stop' now)"),
        (ticker_then_step, 2, "step 'audit' (ctx.step(audit)), another kind of effect"),
    ],
)
async def test_a_logged_wait_that_the_code_changed_is_named_live_and_in_the_check(
    tmp_path, autojump_clock, changed, position, found
):
    # The commonest entry of a long log (a wait that took its message) is
    # answered on the driver's short way; a mismatch there reads as any other.
    path = tmp_path / "j"
    async with open_test_system([ticker], journal=LMDBJournal(path)) as system:
        await system.start(ticker, "t")
        for _ in range(3):
            await system.send("ticker/t", go)
        await wait_quiescent(system)
    message = (
        f"instance 'ticker/t' replayed a different effect at position {position}: the log "
        f"holds wait 'go', the code asked for {found}. The code changed"
    )
    [problem] = await replay_check(path, [changed])
    assert (position, {"k": "wait", "n": "go"}) == (problem.position, problem.expected)
    assert problem.message.startswith(message)
    async with open_test_system([changed], journal=LMDBJournal(path)) as system:
        await system.send("ticker/t", go)
        await trio.sleep(60)
        [info] = [i async for i in system.query()]
    assert "suspended" == info.status
    assert info.last_error is not None and message in info.last_error
