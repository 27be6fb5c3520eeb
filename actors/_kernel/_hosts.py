"""What a driver and the host that runs its process say to each other.

The driver (`Driver`) steps a process coroutine and answers from its log
what it can; its host runs the rest live (`Host`), ends the run (`RunEnds`),
and may ask it to stop at the next effect (`Interrupt`). The exceptions here
are the ways a host stops a drive; the kinds are what `Driver.advance`
stopped at.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Literal, Protocol

import attrs

from ..errors import NonDeterminismError
from . import _effects as fx
from ._effects import Effect
from ._log import LogEntry

__all__ = [
    "CONTINUED",
    "ENDED",
    "RAISE",
    "WAIT",
    "YIELD",
    "Host",
    "Interrupt",
    "Interrupted",
    "Owner",
    "Parked",
    "Passivated",
    "RunEnds",
    "outcome_of",
]


class Passivated(Exception):
    """The host dropped the instance from memory; nothing more to do."""


class Interrupted(Exception):
    """The instance was cancelled, restarted or escalated to from outside."""


class Parked(Exception):  # noqa: N818 - a signal to the driver, not an error
    """The host parked the instance without a task: it keeps the coroutine
    (see `Actor.wait_for`), and resumes it once the effect it waits on is done.
    `Driver.run` sets ``coro``: the coroutine it was running (the run's
    latest, after a continue-as-new)."""

    coro: Coroutine[Any, Any, Any] | None = None


# What `Driver.advance` stopped at (kinds compared by identity).
WAIT = 1  # an effect begun live and not done: wait for it
YIELD = 2  # a done effect after a long replay: let others run, then go on
ENDED = 3  # the run ended: ("complete" | "fail" | "diverge", argument)
CONTINUED = 4  # the run continues as new
RAISE = 5  # (only as `Driver.run`'s ``pending``) raise this exception: stepping failed


def outcome_of(effect: Effect[Any]) -> tuple[Any, BaseException | None]:
    """What the process gets for done ``effect``: (value to send, error to throw)."""
    error = effect.error
    return (None, error) if error is not None else (effect.value, None)


@attrs.frozen(slots=True)
class Interrupt:
    """A request from outside that the driver acts on at the instance's next
    effect (raising `Interrupted` there): the host's ``interrupt``.

    - ``cancel``: ``detail`` is the reason; ``compensate`` asks for the saga's
      compensations first.
    - ``restart``: ``detail`` is the reason (a sibling crashed).
    - ``escalate``: ``detail`` is the ESCALATE payload, ``message`` its
      mailbox id (taken with the failure it causes).
    - ``corrupt``: ``detail`` is the `JournalCorrupt` found elsewhere.
    - ``park``: ``detail`` is ``(error, held)``: keep the instance stuck
      (`Ends.diverge`), as a step whose crash budget is spent asks.
    """

    kind: Literal["cancel", "restart", "escalate", "corrupt", "park"]
    detail: Any
    compensate: bool = False
    message: int | None = None


class Host(Protocol):
    """What the driver asks of whoever runs the effects it does not replay."""

    interrupt: Interrupt | None  # not None: stop at the next effect (raise `Interrupted`)

    def begin(self, effect: Effect[Any], started: dict[Effect[Any], LogEntry]) -> None:
        """Start the leaves of ``effect`` that replay left open (called only
        if it left some: ``effect`` is not done, or ``started`` is not empty)."""

    async def wait_for(self, effect: Effect[Any]) -> bool:
        """Wait until ``effect`` is done; False to stop driving (nothing more to run)."""

    @property
    def ends(self) -> RunEnds:
        """How the run ends."""


class RunEnds(Protocol):
    """How a run a driver runs ends (`Host.ends`)."""

    async def complete(self, value: Any) -> None:
        """The process returned ``value``."""

    async def fail(self, exc: BaseException) -> None:
        """The process raised ``exc``."""

    async def diverge(self, exc: NonDeterminismError) -> None:
        """The code does not match the recorded history."""

    async def continue_as_new(self, effect: fx.ContinueAsNew) -> Coroutine[Any, Any, Any] | None:
        """Start the next run; its coroutine, or None to stop driving."""


class Owner(Protocol):
    """The instance a driver belongs to: what replaying a logged child effect
    tells it, and the status its journal row had when its run was loaded."""

    @property
    def persisted_status(self) -> str | None:
        """The status the journal holds for the instance (None: not read),
        as of `Driver.load`."""

    def add_child(self, address: str, seq: int) -> None: ...

    def child_handle(self, address: str) -> Any: ...
