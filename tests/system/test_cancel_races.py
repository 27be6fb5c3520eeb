"""A cancel against a restart that is pending or being written: the cancel
wins, and what `cancel` returns is true. Each test runs many rounds, with a
varying number of scheduler steps between the crash and the cancel, so the
cancel lands in every window of the restart (deciding it, writing it,
waiting out its delay, activating the new run)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors import Context, OneForAll, Signal, process
from tests.runtime_helpers import wait_status

crash = Signal("crash")
never = Signal("never")

ROUNDS = 160
runs: list[str] = []


@pytest.fixture(
    params=[pytest.param("lmdb", marks=pytest.mark.slow), "memory"]  # 160 rounds of fsyncs
)
def any_opener(request, tmp_path):
    """The shared ``any_opener``; its LMDB runs (several seconds of fsyncs
    on a busy disk) are in the slow lane, the in-memory ones in the fast."""
    from tests.runtime_helpers import Opener

    return Opener(tmp_path, request.param)


@pytest.fixture(autouse=True)
def _reset():
    runs.clear()


@process("kid/:id")
async def kid(ctx: Context, id: str) -> None:
    runs.append(ctx.id)  # once per activation, replays included
    await ctx.wait(crash)
    raise RuntimeError(f"kid {id} crashed")


@process("mom/:id")
async def mom(ctx: Context, id: str) -> None:
    await ctx.spawn(kid, id, restart="permanent")
    await ctx.wait(never)


@process("team/:id", supervision=OneForAll(max_restarts=1000, within=1))
async def team(ctx: Context, id: str) -> None:
    await ctx.spawn(kid, "a", restart="permanent")
    await ctx.spawn(kid, "b", restart="permanent")
    await ctx.wait(never)


@process("solo/:id", restart="transient")
async def solo(ctx: Context, id: str) -> None:
    runs.append(ctx.id)
    await ctx.wait(crash)
    raise RuntimeError(f"solo {id} crashed")


async def _steps(round_: int) -> None:
    """Some scheduler steps between crash and cancel: ``round_ % 40`` of
    them, each a single checkpoint, a wait until every task is blocked
    (which lets journal writes finish), the two in turn, or 5 ms of virtual
    time (so the cancel also lands inside the restart delay), by round."""
    kind = (round_ // 40) % 4
    for i in range(round_ % 40):
        if kind == 3:
            await trio.sleep(0.005)
        elif kind == 1 or (kind == 2 and i % 2):
            await trio.testing.wait_all_tasks_blocked()
        else:
            await trio.lowlevel.checkpoint()


async def test_cancelling_the_parent_wins_over_a_child_restart(any_opener, autojump_clock):
    async with any_opener(mom, kid) as system:
        for round_ in range(ROUNDS):
            name = f"r{round_}"
            parent = await system.start(mom, name)
            child_address = f"mom/{name}/kid/{name}"
            while system.get(child_address) is None:
                await trio.sleep(0.001)
            child = system.get(child_address)
            assert "suspended" == await wait_status(child, "suspended")
            await system.send(child_address, crash)
            await _steps(round_)
            assert (round_, True) == (round_, await parent.cancel())
            assert (round_, "cancelled", "cancelled") == (round_, parent.status, child.status)
            activations = runs.count(child_address)
            await trio.sleep(30)  # any restart delay is long over
            assert (round_, "cancelled", activations) == (
                round_,
                child.status,
                runs.count(child_address),
            )
            assert (round_, 0) == (round_, len(system.registry.live))


async def test_cancelling_the_parent_wins_over_restarting_all_children(any_opener, autojump_clock):
    # One child crashes; OneForAll restarts its sibling too (written from
    # outside the sibling when it is not in memory). The parent's cancel
    # wins over both restarts.
    async with any_opener(team, kid) as system:
        for round_ in range(ROUNDS):
            name = f"r{round_}"
            parent = await system.start(team, name)
            addresses = [f"team/{name}/kid/a", f"team/{name}/kid/b"]
            while any(system.get(a) is None for a in addresses):
                await trio.sleep(0.001)
            children = [system.get(a) for a in addresses]
            for child in children:
                assert "suspended" == await wait_status(child, "suspended")
            await system.send(addresses[round_ % 2], crash)
            await _steps(round_)
            assert (round_, True) == (round_, await parent.cancel())
            statuses = [parent.status] + [c.status for c in children]
            assert (round_, ["cancelled"] * 3) == (round_, statuses)
            activations = [runs.count(a) for a in addresses]
            await trio.sleep(30)
            statuses = [c.status for c in children]
            assert (round_, ["cancelled"] * 2, activations) == (
                round_,
                statuses,
                [runs.count(a) for a in addresses],
            )
            assert (round_, 0) == (round_, len(system.registry.live))


async def test_cancel_of_a_crashed_transient_instance_wins_over_its_restart(
    any_opener, autojump_clock
):
    async with any_opener(solo) as system:
        for round_ in range(ROUNDS):
            name = f"r{round_}"
            handle = await system.start(solo, name)
            assert "suspended" == await wait_status(handle, "suspended")
            await system.send(handle.id, crash)
            await _steps(round_)
            # Live (or waiting out its restart delay) until cancelled: True.
            assert (round_, True) == (round_, await handle.cancel())
            assert (round_, "cancelled") == (round_, handle.status)
            activations = runs.count(handle.id)
            await trio.sleep(30)
            assert (round_, "cancelled", activations) == (
                round_,
                handle.status,
                runs.count(handle.id),
            )
            assert (round_, 0) == (round_, len(system.registry.live))
            # A second cancel has nothing live to cancel.
            assert (round_, False) == (round_, await handle.cancel())


@process("once/:id")
async def once(ctx: Context, id: str) -> None:
    await ctx.wait(crash)
    raise RuntimeError(f"once {id} crashed")


async def test_cancel_says_true_exactly_when_it_cancelled(any_opener, autojump_clock):
    # A temporary instance is not restarted: a crash racing the cancel ends
    # it failed or cancelled, whichever comes first, and cancel says which.
    outcomes = set()
    async with any_opener(once) as system:
        # The cancel wins when it lands before the crash's run is stepped: in
        # the rounds with no step between them, a coin flip of trio's
        # scheduler (it orders each batch of runnable tasks at random), so
        # four such rounds missed both outcomes 1 run in 16. Rounds go on,
        # up to 4 x ROUNDS, until both were seen.
        for round_ in range(4 * ROUNDS):
            if round_ >= ROUNDS and len(outcomes) == 2:
                break
            handle = await system.start(once, f"r{round_}")
            assert "suspended" == await wait_status(handle, "suspended")
            await system.send(handle.id, crash)
            await _steps(round_)
            cancelled = await handle.cancel()
            status = handle.status
            outcomes.add(status)
            assert (round_, cancelled) == (round_, status == "cancelled")
            assert status in ("cancelled", "failed")
    assert {"cancelled", "failed"} == outcomes


@pytest.mark.parametrize("passivate_after", [0, 60])
async def test_concurrent_cancels_all_say_true(any_opener, autojump_clock, passivate_after):
    # In memory (60) or on disk only (0): each cancel came while it was live.
    async with any_opener(solo, passivate_after=passivate_after) as system:
        handle = await system.start(solo, "c")
        assert "suspended" == await wait_status(handle, "suspended")
        answers = []

        async def cancel() -> None:
            answers.append(await handle.cancel())

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(cancel)
        assert ([True] * 3, "cancelled") == (answers, handle.status)
        assert [False] == [await handle.cancel()]


async def test_a_cancel_meeting_an_activation_sleeps_until_it_is_through():
    """A cancel of an instance that is being brought into memory waits for
    that activation without polling: no task stays runnable meanwhile (a
    poll would keep the trio thread busy for as long as a slow read took)."""
    import actors
    from storage import MemoryJournal, instance_id

    async with actors.open_system(MemoryJournal(), [kid]) as system:
        handle = await system.start(kid, "held")
        iid = instance_id(handle.id)
        await wait_status(handle, "suspended")
        system.registry.live[iid].request_passivation()
        while iid in system.registry.live:
            await trio.sleep(0.001)
        system.registry.activating.add(iid)  # as an activation's read under way holds it
        cancelled: list[bool] = []

        async def cancel() -> None:
            cancelled.append(await system.cancel(handle.id))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel)
            with trio.fail_after(5):  # real seconds, only if a task never blocks
                await trio.testing.wait_all_tasks_blocked()
            assert cancelled == []
            system.registry.activating.discard(iid)  # the activation is through
        assert cancelled == [True]
        assert handle.status == "cancelled"
