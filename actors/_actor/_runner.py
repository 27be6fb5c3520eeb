"""Instances waiting without a task, and the runner that steps them.

An instance suspended on a wait or a timer, with nothing of it running,
holds no trio task (see `Actor.wait_for`): its coroutine is kept in
``actor.held``. Whatever completes the effect wakes it (`Actor.wakeup`),
which hands it to the registry's `Runner`: one task for the system, which
steps each woken instance's coroutine in place (`step`) to its next wait,
and parks it again. Anything that awaits (a step, a commit barrier, the
run's end, a stop request, passivation) goes on in a task of the instance's
own, made for it here at the point reached. docs/design.md says how
lifetime and cancellation are kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, cast

import trio

from storage import Parking

from .._kernel._driver import Driver
from .._kernel._effects import Effect
from .._kernel._hosts import RAISE, WAIT, Host, Interrupt

if TYPE_CHECKING:
    from .._kernel._interfaces import ActorAPI, SystemAPI

__all__ = ["NO_TASK", "Runner", "close_held", "may_park"]

# `Actor.parked` of an instance parked without a task.
NO_TASK: Any = object()


class Waiting(Host, Protocol):
    """What the runner uses of an `Actor` (``actors._actor._instance``, which
    imports this module)."""

    system: SystemAPI
    address: str
    driver: Driver
    busy: int
    woken: bool
    parked: trio.lowlevel.Task | None
    passivate_requested: bool
    root: Effect[Any] | None
    interrupt: Interrupt | None
    inline: tuple[Callable[..., Awaitable[Any]], Effect[Any], tuple[Any, ...]] | None
    tasks_to_start: list[tuple[Callable[..., Awaitable[Any]], Effect[Any], tuple[Any, ...]]] | None
    done: bool
    nursery: trio.Nursery | None
    held: Coroutine[Any, Any, Any] | None
    span: Any
    lost: BaseException | None

    async def main(self, pending: tuple[int, Any] | None = None) -> None: ...

    def gone(self) -> None: ...

    def suspend(self) -> None: ...

    def set_status(self, status: str) -> None: ...


class Runner:
    """The instances parked without a task that something woke, and the
    task that steps them: a part of the `Registry`."""

    __slots__ = ("_parking", "_ready", "_running", "system")

    def __init__(self, system: SystemAPI) -> None:
        self.system = system
        self._ready: deque[Waiting] = deque()
        self._parking = Parking()
        self._running = False

    def ready(self, actor: ActorAPI) -> None:
        """Something woke ``actor``, parked without a task: step it soon."""
        # (A `Waiting`: the registry makes every actor. No cast: a call.)
        self._ready.append(actor)  # type: ignore[arg-type]
        if self._running:
            parking = self._parking
            if parking.task is not None:  # (else it is stepping, or about to)
                parking.wake()
            return
        nursery = self.system.registry.nursery
        assert nursery is not None
        self._running = True
        nursery.start_soon(self._run, name="actors runner")

    async def _run(self) -> None:
        """Step every instance woken by now, let others run, and go on;
        with none, sleep. A message to a waiting instance so costs no task
        switch of its own, and a thousand woken together cost one."""
        ready = self._ready
        parking = self._parking
        try:
            while True:
                for _ in range(len(ready)):
                    step(ready.popleft())
                # Invariant: nothing yields between this check and parking,
                # so an instance made ready after it wakes the park. With
                # none ready, parking is the round's yield (no checkpoint
                # first, which would resume this frame only to park).
                if ready:
                    await trio.lowlevel.checkpoint()
                else:
                    await parking.park()
        finally:
            self._running = False

    def close(self) -> None:
        """The system closes: close every coroutine parked without a task,
        as the tasks of the others are cancelled (see `close_held`)."""
        self._ready.clear()
        for actor in list(self.system.registry.live.values()):
            close_held(cast(Waiting, actor))


def step(actor: Waiting) -> None:
    """Resume ``actor``, parked without a task, which something woke.

    The common case runs here, with no task switch: the effect it waited on
    is done, so its coroutine is stepped (`Driver.advance`) through what
    needs no waiting, to its next wait or timer, and parked again. Anything
    else continues in a task of its own, at the point reached."""
    coro = actor.held
    if coro is None or actor.done:
        return
    effect = actor.root
    assert effect is not None
    if (
        not effect.done
        or actor.interrupt is not None
        or actor.lost is not None
        or actor.passivate_requested
        or actor.system.registry.closing  # (the attribute: a property is a call)
    ):
        _resume(actor, (WAIT, effect))  # (woken stays set: wait_for acts on it)
        return
    actor.woken = False
    actor.root = None
    try:
        actor.set_status("running")
        error = effect.error  # (`outcome_of`, spelled out on the hot path)
        if error is None:
            kind, what = actor.driver.advance(coro, actor, effect.value)
        else:
            kind, what = actor.driver.advance(coro, actor, None, error)
        if kind == WAIT and may_park(actor):
            actor.root = what
            actor.suspend()
            if not actor.woken:
                actor.parked = NO_TASK
                return
            # (Woken as it went on: it goes on in a task, which sees that.)
    except Exception as exc:  # noqa: BLE001 - its task raises it where the driver would
        kind, what = RAISE, exc
    _resume(actor, (kind, what))


def _resume(actor: Waiting, pending: tuple[int, Any]) -> None:
    """Go on from ``pending`` in a task of the instance's own (`Actor.main`)."""
    registry = actor.system.registry
    if registry.closing or registry.nursery is None:  # it closes with the system
        actor.parked = NO_TASK
        return
    registry.nursery.start_soon(actor.main, pending, name=f"actor {actor.address}")


def may_park(actor: Waiting) -> bool:
    """Whether ``actor`` may wait with no task: nothing of it runs (no step,
    no task left over), no task waits to be started, no trace span is current
    in its task (tracing keeps the task), and the system is not closing."""
    nursery = actor.nursery
    return (
        not actor.busy
        and actor.inline is None
        and not actor.tasks_to_start
        and (nursery is None or not nursery.child_tasks)
        and actor.span is None
        and actor.system.passivate_after > 0
        and not actor.system.registry.closing
    )


def close_held(actor: Waiting) -> None:
    """Close ``actor``'s coroutine if it is parked without a task (the
    system closes): the process sees `GeneratorExit` at its await, as a
    cancelled task's `Driver.run` closes it, and resumes on the next open."""
    coro, actor.held = actor.held, None
    if coro is None or actor.done:
        return
    actor.parked = None
    try:
        coro.close()
    finally:
        actor.gone()
