"""A suspending instance's writes are deferred to the next commit (see
actors._kernel._rides): they reach the journal within the window even when nothing
else is written, go with the next send otherwise, and a crash before either
only makes replay take the message again."""

from __future__ import annotations

import trio

from actors import Context, Signal, process
from actors._kernel._rides import WINDOW
from storage import instance_id

go = Signal("go")
seen: list[object] = []


@process("counter/:name")
async def counter(ctx: Context, name: str) -> None:
    while True:
        seen.append(await ctx.wait(go))


def _journal_view(system, address):
    iid = instance_id(address)
    with system.journal.reader() as r:
        return r.instance(iid).status, [m[1] for _, m in r.mailbox(iid)]


async def test_a_suspended_instances_take_reaches_the_journal_within_the_window(
    any_opener, autojump_clock
):
    seen.clear()
    async with any_opener(counter) as system:
        await system.start(counter, "a")
        await system.send("counter/a", go, 1)
        with trio.fail_after(5):
            while seen != [1]:
                await trio.lowlevel.checkpoint()
        t0 = trio.current_time()  # it suspends now, its take deferred
        # Nothing else is written: the window's timer submits the take. The
        # window is measured on virtual time, which stands still while a
        # commit runs (autojump is held), so a loaded machine cannot
        # stretch it; without the timer the take would never be written.
        step = WINDOW / 5
        while _journal_view(system, "counter/a") != ("suspended", []):
            assert trio.current_time() - t0 <= WINDOW + step, "the take missed its window"
            await trio.sleep(step)


async def test_deferred_takes_go_with_the_next_sends_and_survive_a_reopen(any_opener):
    seen.clear()
    async with any_opener(counter) as system:
        await system.start(counter, "a")
        for n in range(50):
            await system.send("counter/a", go, n)
        with trio.fail_after(5):
            while len(seen) < 50:
                await trio.lowlevel.checkpoint()
    # Closing submitted what was still deferred: every take is durable, so
    # the reopened instance replays the 50 from its log and takes none again.
    async with any_opener(counter) as system:
        assert _journal_view(system, "counter/a") == ("suspended", [])
        await system.send("counter/a", go, "after")
        with trio.fail_after(5):
            while seen[-1:] != ["after"]:
                await trio.lowlevel.checkpoint()
    assert seen == [*range(50), *range(50), "after"]
