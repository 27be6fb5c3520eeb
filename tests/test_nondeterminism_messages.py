"""A non-determinism error says what differs between the log and the code:
the kind of effect, its name (step name, signal, child address), or its
arguments (shown as the code gives them now, with both digests)."""

from __future__ import annotations

import pytest

from actors import Context, Signal, process
from actors.testing import replay_check
from tests.runtime_helpers import wait_status

go = Signal("go")
stop = Signal("stop")


def charge(order: str, amount: int, *, currency: str = "EUR") -> str:
    return f"{order}:{amount}{currency}"


def refund(order: str, amount: int, *, currency: str = "EUR") -> None:
    pass


@process("orders/:id")
async def v1(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="EUR")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def other_arguments(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 200, currency="EUR")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def other_step(ctx: Context, id: str) -> str:
    await ctx.step(refund, id, 100, currency="EUR")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def other_kind(ctx: Context, id: str) -> str:
    await ctx.sleep(5)
    await ctx.wait(go)
    return id


@process("orders/:id")
async def other_signal(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="EUR")
    await ctx.wait(stop)
    return id


async def _message_on(opener, changed) -> str:
    async with opener(v1) as system:
        await wait_status(await system.start(v1, "o-1"), "suspended")
        await system.send("orders/o-1", go)
        await wait_status(system.get("orders/o-1"), "completed")
    async with opener(changed) as system:
        problems = await replay_check(system.journal, [changed], include_finished=True)
    (problem,) = problems
    return problem.message


@pytest.mark.parametrize(
    "changed, says",
    [
        (
            other_arguments,
            "the log holds step 'charge' made with other arguments than the code gives now, "
            "ctx.step(charge, 'o-1', 200, currency='EUR') (the log keeps a digest of the "
            "arguments it ran with, ",
        ),
        (
            other_step,
            "the log holds step 'charge', the code asked for step 'refund': another step name "
            "('charge' in the log, 'refund' now)",
        ),
        (
            other_kind,
            "the log holds step 'charge', the code asked for sleep (ctx.sleep(5)), another "
            "kind of effect",
        ),
    ],
    ids=["arguments", "name", "kind"],
)
async def test_the_message_says_what_differs(opener, autojump_clock, changed, says):
    message = await _message_on(opener, changed)
    assert says in message, message


async def test_a_different_signal_is_named(opener, autojump_clock):
    async with opener(v1) as system:
        await wait_status(await system.start(v1, "o-1"), "suspended")
        await system.send("orders/o-1", go)
        await wait_status(system.get("orders/o-1"), "completed")
    async with opener(other_signal) as system:
        (problem,) = await replay_check(system.journal, [other_signal], include_finished=True)
    assert (
        "the log holds wait 'go', the code asked for wait 'stop': another signal "
        "('go' in the log, 'stop' now)"
    ) in problem.message
