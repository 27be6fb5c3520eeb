"""Durable timers: a reminder that waits days for an answer, on virtual time.

open_test_system follows trio's clock, so under a MockClock that jumps ahead
whenever every task is waiting, three days pass in milliseconds.
"""

import argparse

import trio
import trio.testing

from actors import Context, Signal, process
from actors.testing import open_test_system

answered = Signal("answered")


@process("reminders/:who")
async def reminder(ctx: Context, who: str, *, days: int) -> str:
    start = ctx.now()  # recorded, so a replay sees the same time
    for nudge in range(1, 4):
        which, value = await ctx.first(answer=ctx.wait(answered), later=ctx.sleep(days * 86400))
        if which == "answer":
            return f"{who} answered {value!r} after {nudge - 1} nudge(s)"
        day = (ctx.now() - start).days  # an effect: made on replay too
        if not ctx.replaying:  # a passivated instance replays from the top
            print(f"nudge {nudge} to {who} on day {day}")
    return f"{who} never answered"


async def main() -> None:
    async with open_test_system([reminder]) as system:
        quiet = await system.start(reminder, "bob", days=3)
        print(await quiet.result())

        chatty = await system.start(reminder, "ann", days=2)
        await trio.sleep(3 * 86400)  # virtual: after the first nudge on day 2
        await system.send(chatty.id, answered, "yes")
        print(await chatty.result())
        print(f"virtual time passed: {trio.current_time() / 86400:.0f} days")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
