"""A forgotten ``await``: an effect made and dropped unawaited raises
`ContextError` in the process at its next effect (which then does not run),
or at its return; uncaught, the instance fails with it, live and on replay,
on LMDB and in memory. Effects held for later, or passed to
``first``/``all``/``settled``, are fine."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import replay_check
from tests.runtime_helpers import wait_status

go = Signal("go")
charged: list[int] = []


def charge(amount: int) -> int:
    charged.append(amount)
    return amount


@pytest.fixture(autouse=True)
def _no_charges() -> None:
    charged.clear()


def _line(marker: str) -> int:
    """The line of this file that holds ``marker`` (a comment)."""
    lines = Path(__file__).read_text().splitlines()
    [number] = [n for n, text in enumerate(lines, 1) if text.endswith(f"# {marker}")]
    return number


def _message(call: str, marker: str) -> str:
    return (
        f"{call} made at {__file__}:{_line(marker)} was never awaited, so it never ran: "
        "await it, or pass it to ctx.first/all/settled"
    )


async def _failure(handle) -> actors.ProcessFailed:
    with pytest.raises(actors.ProcessFailed) as info:
        await handle.result()
    return info.value


@process("step/:id")
async def forgot_step(ctx: Context, id: str) -> str:
    ctx.step(charge, 5)  # forgotten step
    await ctx.sleep(60)
    return "done"


@process("sleep/:id")
async def forgot_sleep(ctx: Context, id: str) -> str:
    ctx.sleep(60)  # forgotten sleep
    await ctx.step(charge, 1)  # raises instead of running
    return "done"


@process("wait/:id")
async def forgot_wait(ctx: Context, id: str) -> str:
    ctx.wait(go)  # forgotten wait
    return "done"


async def test_a_forgotten_step_fails_the_instance_and_never_runs(any_opener, autojump_clock):
    async with any_opener(forgot_step) as system:
        handle = await system.start(forgot_step, "s")
        failure = await _failure(handle)
        expected = _message("ctx.step(charge)", "forgotten step")
        assert "actors.errors.ContextError" == failure.error_type
        assert expected == failure.error_message
        assert f"'step/s' failed: ContextError: {expected}" == str(failure)
        assert [] == charged
        assert "failed" == handle.status


async def test_a_forgotten_sleep_raises_at_the_next_effect_which_does_not_run(
    any_opener, autojump_clock
):
    async with any_opener(forgot_sleep) as system:
        t0 = trio.current_time()
        failure = await _failure(await system.start(forgot_sleep, "z"))
        assert _message("ctx.sleep(60)", "forgotten sleep") == failure.error_message
        assert [] == charged  # the step it was about to await never ran
        assert 0 == trio.current_time() - t0


async def test_a_forgotten_wait_raises_at_the_return(any_opener, autojump_clock):
    async with any_opener(forgot_wait) as system:
        failure = await _failure(await system.start(forgot_wait, "w"))
        assert _message("ctx.wait(go)", "forgotten wait") == failure.error_message


@process("caught/:id")
async def caught(ctx: Context, id: str) -> str:
    ctx.step(charge, 5)  # forgotten, then caught
    try:
        await ctx.sleep(1)
    except actors.ContextError as exc:
        return f"caught: {exc}"
    return "not raised"


async def test_the_error_is_raised_inside_the_process(any_opener, autojump_clock):
    async with any_opener(caught) as system:
        handle = await system.start(caught, "c")
        expected = _message("ctx.step(charge)", "forgotten, then caught")
        assert f"caught: {expected}" == await handle.result()


@process("fine/:id")
async def fine(ctx: Context, id: str) -> list:
    raced = await ctx.first(paid=ctx.step(charge, 1), late=ctx.sleep(60))
    joined = await ctx.all(ctx.step(charge, 2), ctx.sleep(1))
    timer = ctx.sleep(5)  # made first, raced after
    either = await ctx.first(go=ctx.wait(go), late=timer)
    later = ctx.step(charge, 3)  # held across other effects, awaited at the end
    await ctx.sleep(1)
    pending = [ctx.step(charge, 4), ctx.step(charge, 5)]
    await ctx.sleep(1)
    rest = [await each for each in pending]
    return [list(raced), joined, list(either), await later, rest]


async def test_effects_passed_to_first_all_or_held_and_awaited_later_are_fine(
    any_opener, autojump_clock
):
    async with any_opener(fine) as system:
        handle = await system.start(fine, "f")
        assert [["paid", 1], [2, None], ["late", None], 3, [4, 5]] == await handle.result()


@process("race/:id")
async def forgot_race(ctx: Context, id: str) -> str:
    ctx.first(msg=ctx.wait(go), late=ctx.sleep(60))  # forgotten race
    await ctx.sleep(1)
    return "done"


@process("two/:id")
async def forgot_two(ctx: Context, id: str) -> str:
    ctx.step(charge, 1)  # first of two
    ctx.emit("x")  # second of two
    await ctx.sleep(1)
    return "done"


async def test_a_forgotten_race_is_named_with_its_effects(any_opener, autojump_clock):
    async with any_opener(forgot_race, forgot_two) as system:
        failure = await _failure(await system.start(forgot_race, "r"))
        call = "ctx.first(msg=ctx.wait(go), late=ctx.sleep(60))"
        assert _message(call, "forgotten race") == failure.error_message
        failure = await _failure(await system.start(forgot_two, "t"))
        here = __file__
        assert (
            f"ctx.step(charge) made at {here}:{_line('first of two')} and ctx.emit(...) made "
            f"at {here}:{_line('second of two')} were never awaited, so they never ran: "
            "await each, or pass them to ctx.first/all/settled"
        ) == failure.error_message


@process("held/:id")
async def held(ctx: Context, id: str) -> str:
    receipt = ctx.step(charge, 9)  # held across a suspension, never awaited
    await ctx.wait(go)
    assert receipt is not None
    return "done"


async def test_same_on_replay_and_a_failed_instance_stays_failed(any_opener, autojump_clock):
    async with any_opener(held, passivate_after=0) as system:
        handle = await system.start(held, "h")
        await wait_status(handle, "suspended")  # held, so not raised yet
    expected = _message("ctx.step(charge)", "held across a suspension, never awaited")
    async with any_opener(held) as system:
        await system.send("held/h", go)  # wakes it by replay; then it returns
        failure = await _failure(system.get("held/h"))
        assert expected == failure.error_message
        assert [] == charged
    async with any_opener(held) as system:
        handle = system.get("held/h")
        assert "failed" == handle.status
        assert expected == (await _failure(handle)).error_message
    journal = any_opener.journal()
    assert [] == await replay_check(journal, [held], include_finished=True)


@process("child/:n")
async def child(ctx: Context, n: str) -> str:
    return n


def _making(verb: str):
    """A process that makes one ``verb`` effect, drops it, and returns."""
    makers = {
        "step": lambda ctx: ctx.step(charge, 1),
        "sleep": lambda ctx: ctx.sleep(1.5),
        "sleep_until": lambda ctx: ctx.sleep_until(dt.datetime(2030, 1, 2, tzinfo=dt.UTC)),
        "wait": lambda ctx: ctx.wait(go),
        "receive": lambda ctx: ctx.receive(go, Signal("stop")),
        "call": lambda ctx: ctx.call(child, "1"),
        "spawn": lambda ctx: ctx.spawn(child, "2"),
        "scope": lambda ctx: ctx.scope(["3", "4"], child),
        "ask": lambda ctx: ctx.ask("child/5", go),
        "ask_timeout": lambda ctx: ctx.ask("child/5", go, timeout=5),
        "reply": lambda ctx: ctx.reply(1),
        "emit": lambda ctx: ctx.emit(1),
        "publish": lambda ctx: ctx.publish({"a": 1}),
        "first": lambda ctx: ctx.first(a=ctx.sleep(1)),
        "all": lambda ctx: ctx.all(ctx.sleep(1), ctx.wait(go)),
        "settled": lambda ctx: ctx.settled(ctx.sleep(1)),
        "continue_as_new": lambda ctx: ctx.continue_as_new(),
    }

    @process(f"make-{verb.replace('_', '-')}/:id")
    async def making(ctx: Context, id: str) -> str:
        makers[verb](ctx)
        return "returned"

    return making


SHOWN = {
    "step": "ctx.step(charge)",
    "sleep": "ctx.sleep(1.5)",
    "sleep_until": "ctx.sleep_until(2030-01-02T00:00:00+00:00)",
    "wait": "ctx.wait(go)",
    "receive": "ctx.receive(go, stop)",
    "call": "ctx.call('make-call/x/child/1')",
    "spawn": "ctx.spawn('make-spawn/x/child/2')",
    "scope": "ctx.scope(...)",
    "ask": "ctx.ask('child/5', go)",
    "ask_timeout": "ctx.ask('child/5', go, timeout=5.0)",
    "reply": "ctx.reply(...)",
    "emit": "ctx.emit(...)",
    "publish": "ctx.publish(...)",
    "first": "ctx.first(a=ctx.sleep(1))",
    "all": "ctx.all(ctx.sleep(1), ctx.wait(go))",
    "settled": "ctx.settled(ctx.sleep(1))",
    "continue_as_new": "ctx.continue_as_new(...)",
}


@pytest.mark.parametrize("verb", sorted(SHOWN))
async def test_every_effect_a_process_awaits_is_tracked(any_opener, autojump_clock, verb):
    making = _making(verb)
    async with any_opener(making, child) as system:
        failure = await _failure(await system.start(making, "x"))
        message = failure.error_message
        assert message.startswith(f"{SHOWN[verb]} made at {__file__}:"), message
        assert message.endswith(
            " was never awaited, so it never ran: await it, or pass it to ctx.first/all/settled"
        )
        assert [] == charged


async def test_continue_as_new_cannot_be_raced(any_opener):
    @process("cont/:id")
    async def cont(ctx: Context, id: str) -> str:
        try:
            ctx.first(next=ctx.continue_as_new(), late=ctx.sleep(1))
        except actors.InvalidArguments as exc:
            return str(exc)
        return "accepted"

    async with any_opener(cont) as system:
        handle = await system.start(cont, "c")
        assert (
            "ctx.continue_as_new(...) ends the run, so it races and joins nothing: await it alone"
        ) == await handle.result()
