"""An actor's task (`Actor.main`): load the instance, replay its run, and
drive it until it ends, passivates or parks without a task.

`Activation` is a base of `_instance.Actor`: the attributes it declares are
the actor's, made in its ``__init__``. Invariant: when ``main`` returns
without having parked, the actor is gone from memory (`Actor.gone`); parked,
its coroutine is held in ``held`` for whoever resumes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import trio

from storage import InstanceRecord, Journal

from .._kernel import _driver, _effects as fx, _tracing
from .._kernel._hosts import WAIT, Interrupt, Interrupted, Parked, Passivated
from .._kernel._interfaces import SystemAPI
from .._kernel._log import LoadedState, LogEntry
from .._kernel._mailbox import Mailbox
from ..errors import InvalidArguments
from ._arrivals import Arrivals
from ._ends import Ends
from ._writes import Writes

__all__ = ["BLANK", "Activation"]

# The record of an actor that has not loaded its own yet (records are
# frozen: one serves them all).
BLANK = InstanceRecord()


class Activation:
    """The task of a live instance (a base of `Actor`; see the module docstring)."""

    __slots__ = (
        "arrivals",
        "busy",
        "driver",
        "ends",
        "held",
        "iid",
        "interrupt",
        "journal",
        "loaded",
        "mailbox",
        "nursery",
        "preloaded",
        "record",
        "root",
        "run",
        "span",
        "status",
        "system",
        "tasks_to_start",
        "writes",
    )

    system: SystemAPI
    journal: Journal
    iid: bytes
    interrupt: Interrupt | None
    record: InstanceRecord
    run: int
    status: str
    loaded: bool
    busy: int
    root: fx.Effect[Any] | None
    span: Any
    driver: _driver.Driver
    mailbox: Mailbox[fx.Wait[Any]]
    nursery: trio.Nursery | None
    held: Coroutine[Any, Any, Any] | None
    tasks_to_start: (
        list[tuple[Callable[..., Awaitable[Any]], fx.Effect[Any], tuple[Any, ...]]] | None
    )
    preloaded: LoadedState | None
    writes: Writes
    arrivals: Arrivals
    ends: Ends

    def gone(self) -> None:
        raise NotImplementedError

    def new_coroutine(self) -> Coroutine[Any, Any, Any]:
        raise NotImplementedError

    async def _load(self) -> bool:
        raise NotImplementedError

    # What the driver asks of its host (`_hosts.Host`), which the actor is.

    def begin(self, effect: fx.Effect[Any], started: dict[fx.Effect[Any], LogEntry]) -> None:
        raise NotImplementedError

    async def wait_for(self, effect: fx.Effect[Any]) -> bool:
        raise NotImplementedError

    async def main(self, pending: tuple[int, Any] | None = None) -> None:
        """The actor's task: load, replay, run until terminal, passivated, or
        parked without a task (see `wait_for`); with ``pending``, resume the
        coroutine it parked with there (`_runner.step`), at that point of
        `Driver.run`.

        The task opens a nursery only once the run has leaves to run in
        tasks of their own (a race or a join: see `start_task`). Most runs
        never do, and a nursery costs a cancel scope and a scheduling round
        more per activation (a third of a 1-step process's task work)."""
        if pending is not None and self.held is None:
            return  # closed meanwhile, with the system (`close_held`)
        parked = False
        try:
            if pending is not None and self.tasks_to_start:  # leaves the runner began
                parked = await self._in_nursery(pending)
            else:
                if pending is None:
                    # (Two steps, so that no frame of the preparation stays
                    # under the driver's: each resumption re-enters them all.)
                    coro = await self._start_run()
                    held = coro is not None and await self._drive(coro, None)
                else:
                    coro, self.held = self.held, None
                    assert coro is not None
                    held = await self._drive(coro, pending)
                if held and self.tasks_to_start:
                    # Stopped for a nursery (see `wait_for`), not parked: go
                    # on in one, from the wait it stopped at. Parked only if
                    # that run parks (if it raises, the instance is gone).
                    parked = await self._in_nursery((WAIT, self.root))
                else:
                    parked = held
        except Exception as exc:
            if not self.ends.broke(exc):
                raise
        finally:
            if not parked:
                self.gone()

    async def _start_run(self) -> Coroutine[Any, Any, Any] | None:
        """Load the instance and begin its current run: the process's
        coroutine to drive (`_drive`), or None if there is none to (it is
        gone, or was ended here: a compensation resumed, code that does not
        take the stored arguments)."""
        if not (self.loaded or await self._load()):
            return None
        self.span = _tracing.begin_run(self) if self.system.tracing else None
        failure = self.record.failure
        if failure is not None:  # resuming a compensation after a crash
            end = self.record.failure_end or "failed"
            await self.ends.finish_compensation(failure, end)
            return None
        try:
            return self.new_coroutine()
        except InvalidArguments as exc:
            # Stored params or input this code does not take: kept suspended
            # (never failed or lost), as for changed code, until matching
            # code is deployed.
            await self.ends.diverge(exc)
            return None

    async def _in_nursery(self, pending: tuple[int, Any]) -> bool:
        """Go on from ``pending`` with a nursery for the leaves that run in
        tasks, those waiting to start first; True if it parked without a task."""
        coro, self.held = self.held, None
        assert coro is not None
        parked = False
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            try:
                to_start, self.tasks_to_start = self.tasks_to_start, None
                for fn, effect, args in to_start or ():
                    nursery.start_soon(fn, self, effect, *args)
                parked = await self._drive(coro, pending)
                if nursery.child_tasks and not parked:  # what it left (abandoned steps, ...)
                    nursery.cancel_scope.cancel()
            finally:
                self.nursery = None
        return parked

    async def _drive(self, coro: Coroutine[Any, Any, Any], pending: tuple[int, Any] | None) -> bool:
        """Run ``coro`` by the driver; True if it parked without a task or
        stopped for a nursery (`wait_for`): either way it is kept in
        ``held``."""
        try:
            await self.driver.run(coro, self, pending)
        except Passivated:
            pass
        except Interrupted:
            await self.ends.interrupted()
        except Parked as parked:
            # Invariant: nothing yields from the park (wait_for) to here, so
            # whatever wakes it finds the coroutine held.
            self.held = parked.coro
            return True
        if self.tasks_to_start:  # begun for a race decided without them: they never run
            self.busy -= len(self.tasks_to_start)
            self.tasks_to_start = None
        return False
