"""A waiting instance holds no trio task: its coroutine is parked in the
registry and a runner steps it when its wait is answered. What a task gave
it must hold all the same: messages and timers resume it, a step still runs
in a task (and is cancelled with it), a cancel reaches it, passivation and
the system's close still take it out of memory, and it resumes after a
reopen."""

from __future__ import annotations

import trio

from actors import ActorSystem, Context, Signal, process
from actors.testing import wait_quiescent
from storage import instance_id

ping = Signal("ping")
stop = Signal("stop")

CLOSED: list[str] = []  # addresses whose coroutine saw GeneratorExit


@process("held/:id")
async def waiter(ctx: Context, id: str) -> list[object]:
    seen: list[object] = []
    try:
        while True:
            signal, payload = await ctx.receive(ping, stop)
            if signal is stop:
                return seen
            seen.append(payload)
            if payload == "step":
                seen.append(await ctx.step(_double, 21))
            elif payload == "sleep":
                await ctx.sleep(5)
                seen.append("slept")
    except GeneratorExit:
        CLOSED.append(id)
        raise


async def _double(n: int) -> int:
    return 2 * n


def _actor_tasks() -> list[str]:
    """The names of the tasks named for an actor, anywhere under the root task."""
    names: list[str] = []

    def walk(task: trio.lowlevel.Task) -> None:
        if task.name.startswith("actor "):
            names.append(task.name)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return names


async def _settle(system: ActorSystem) -> None:
    """Until every instance waits (parked) with its writes durable."""
    await wait_quiescent(system)


async def test_a_waiting_instance_holds_no_task(any_opener, autojump_clock) -> None:
    async with any_opener(waiter) as system:
        handles = [await system.start(waiter, str(n)) for n in range(50)]
        await _settle(system)
        assert all(h.status == "suspended" for h in handles)
        assert len(system.registry.live) == 50
        assert _actor_tasks() == []
        # Messages resume them where they wait, and they wait again, task-less.
        for n in range(50):
            await system.send(f"held/{n}", ping, n)
        await _settle(system)
        assert _actor_tasks() == []
        for n in range(50):
            await system.send(f"held/{n}", stop)
        assert [await h.result() for h in handles] == [[n] for n in range(50)]


async def test_a_step_and_a_timer_run_from_a_parked_instance(any_opener, autojump_clock) -> None:
    async with any_opener(waiter) as system:
        handle = await system.start(waiter, "a")
        await _settle(system)
        await system.send("held/a", ping, "step")  # the step runs in a task of its own
        await system.send("held/a", ping, "sleep")  # the timer resumes it, parked
        await trio.sleep(6)
        assert _actor_tasks() == []
        await system.send("held/a", stop)
        assert await handle.result() == ["step", 42, "sleep", "slept"]


async def test_a_cancel_reaches_a_parked_instance(any_opener, autojump_clock) -> None:
    async with any_opener(waiter) as system:
        handle = await system.start(waiter, "c")
        await _settle(system)
        assert _actor_tasks() == []
        assert await system.cancel("held/c") is True
        assert handle.status == "cancelled"
        assert instance_id("held/c") not in system.registry.live


async def test_a_parked_instance_passivates(any_opener, autojump_clock) -> None:
    async with any_opener(waiter, passivate_after=10.0) as system:
        handle = await system.start(waiter, "p")
        await system.send("held/p", ping, 1)
        await trio.sleep(30)
        assert instance_id("held/p") not in system.registry.live
        assert handle.status == "suspended"
        await system.send("held/p", ping, 2)
        await system.send("held/p", stop)
        assert await handle.result() == [1, 2]


async def test_close_ends_parked_coroutines_and_reopen_resumes_them(opener) -> None:
    CLOSED.clear()
    async with opener(waiter) as system:
        for n in range(5):
            await system.start(waiter, f"r{n}")
            await system.send(f"held/r{n}", ping, n)
        await _settle(system)
        assert _actor_tasks() == []
    # Closed as a cancelled task's coroutine is: its process sees GeneratorExit.
    assert sorted(CLOSED) == [f"r{n}" for n in range(5)]
    async with opener(waiter) as system:
        for n in range(5):
            await system.send(f"held/r{n}", ping, "again")
            await system.send(f"held/r{n}", stop)
        for n in range(5):
            handle = await system.lookup(f"held/r{n}")
            assert handle is not None
            assert await handle.result() == [n, "again"]


async def test_a_waiting_instance_awaits_its_effect_itself(any_opener, autojump_clock) -> None:
    # What a waiting instance keeps is its coroutine, which awaits the effect
    # itself: no generator per await (200 B each). Replayed awaits, answered
    # at once, still take the faster generator, and resume the same.
    async with any_opener(waiter) as system:
        handle = await system.start(waiter, "w")
        await _settle(system)
        await system.send("held/w", ping, 1)
        await _settle(system)
        actor = system.registry.live[instance_id("held/w")]
        assert actor.held is not None and actor.held.cr_await is actor.root
    async with any_opener(waiter) as system:  # a replay of the take, then the live wait
        handle = system.get("held/w")
        await system.send("held/w", ping, 2)
        await _settle(system)
        actor = system.registry.live[instance_id("held/w")]
        assert actor.held is not None and actor.held.cr_await is actor.root
        await system.send("held/w", stop)
        assert await handle.result() == [1, 2]


GATE: dict[str, trio.Event] = {}  # set by the test: the step may return
STARTED: dict[str, trio.Event] = {}  # set by the step as it begins


async def _blocked(name: str) -> str:
    STARTED[name].set()
    await GATE[name].wait()
    return name


@process("racer/:id")
async def racer(ctx: Context, id: str) -> list[object]:
    alone = await ctx.step(_blocked, "alone")  # in the actor's own task
    # A race: its leaves each run in a task of their own.
    _, raced = await ctx.first(step=ctx.step(_blocked, "raced"), mail=ctx.wait(ping))
    after = await ctx.step(_blocked, "after")  # its task has the nursery now
    return [alone, raced, after]


def _nurseries_of(address: str) -> int | None:
    """How many nurseries the task of the instance at ``address`` has open
    (None: it has no task)."""
    found: list[int] = []

    def walk(task: trio.lowlevel.Task) -> None:
        if task.name == f"actor {address}":
            found.append(len(task.child_nurseries))
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found[0] if found else None


async def test_a_task_opens_a_nursery_only_for_a_race(any_opener, autojump_clock) -> None:
    for events in (GATE, STARTED):
        events.update(alone=trio.Event(), raced=trio.Event(), after=trio.Event())
    async with any_opener(racer) as system:
        handle = await system.start(racer, "n")
        await STARTED["alone"].wait()
        assert _nurseries_of("racer/n") == 0  # a lone step runs bare
        GATE["alone"].set()
        await STARTED["raced"].wait()
        assert _nurseries_of("racer/n") == 1  # its leaves race in tasks of its own
        await system.send("racer/n", ping, "won")  # the wait wins; the step is abandoned
        GATE["after"].set()
        assert await handle.result() == ["alone", "won", "after"]
