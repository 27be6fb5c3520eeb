"""How many trio scheduling rounds a message costs: the journal hands a
committed message to its receiver before it wakes the sender, so the
receiver has it by the round the sender resumes in (not the one after),
and an ask's answer reaches its asker as the reply commits.

A round is one pass of trio's run loop (one I/O wait, then every task
runnable by then); an instrument counts them."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import MemoryJournal, SimulatedJournal

ping = Signal("ping")

SEEN: list[int] = []  # the round each message reached the process code in


class Rounds(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0

    def after_io_wait(self, timeout: float) -> None:
        self.count += 1


ROUNDS = Rounds()


@process("rounds/:id")
async def receiver(ctx: Context, id: str) -> None:
    while True:
        await ctx.wait(ping)
        SEEN.append(ROUNDS.count)


@process("replier/:id")
async def replier(ctx: Context, id: str) -> None:
    while True:
        _, payload = await ctx.receive(ping)
        await ctx.reply(payload)


def _journals() -> list[Any]:
    return [
        pytest.param(MemoryJournal, id="memory"),
        pytest.param(lambda: SimulatedJournal(__import__("random").Random(1)), id="simulated"),
    ]


@pytest.mark.parametrize("make", _journals())
async def test_a_signal_reaches_its_suspended_receiver_in_the_round_its_sender_resumes(
    make: Any,
) -> None:
    SEEN.clear()
    async with actors.open_system(make(), processes=[receiver]) as system:
        await system.start(receiver, "r")
        await trio.sleep(0.01)  # suspended on its wait
        trio.lowlevel.add_instrument(ROUNDS)
        try:
            for n in range(20):
                await system.send("rounds/r", ping, n)
                sent_in = ROUNDS.count
                await trio.lowlevel.checkpoint()  # the rest of this round
                # Taken by the round the sender resumed in (or earlier).
                assert len(SEEN) == n + 1, (n, SEEN[-3:], sent_in)
                assert SEEN[-1] <= sent_in, (n, SEEN[-3:], sent_in)
        finally:
            trio.lowlevel.remove_instrument(ROUNDS)


async def test_an_ask_costs_three_rounds() -> None:
    async with actors.open_system(MemoryJournal(), processes=[replier]) as system:
        await system.start(replier, "r")
        for n in range(3):  # warm: the replier suspended on its receive
            assert await system.ask("replier/r", ping, n) == n
        trio.lowlevel.add_instrument(ROUNDS)
        try:
            costs = []
            for n in range(20):
                before = ROUNDS.count
                assert await system.ask("replier/r", ping, n) == n
                costs.append(ROUNDS.count - before)
        finally:
            trio.lowlevel.remove_instrument(ROUNDS)
    # The asker's commit (1), the replier's reply commit (2), the asker
    # resumed with the answer in the round the replier resumes in (3).
    assert max(costs) <= 3, costs
