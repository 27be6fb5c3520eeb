"""The host of a replay check (`Driver.check`): it runs nothing.

It stops where the history ends, and keeps the first mismatch the driver
found: the effects the code makes against those its log holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import NonDeterminismError
from . import _effects as fx
from ._effects import Effect
from ._hosts import Interrupt
from ._log import LogEntry

__all__ = ["Checker"]


class Checker:
    """The host of a replay check: runs nothing, stops where the history ends.

    ``consumed`` raises `NonDeterminismError` if the log goes on past the
    run's end (`Driver.check_consumed`)."""

    __slots__ = ("consumed", "interrupt", "problem")

    def __init__(self, consumed: Callable[[], None]) -> None:
        self.consumed = consumed
        self.interrupt: Interrupt | None = None
        self.problem: NonDeterminismError | None = None

    def begin(self, effect: Effect[Any], started: dict[Effect[Any], LogEntry]) -> None:
        pass

    async def wait_for(self, effect: Effect[Any]) -> bool:
        return False  # the history ends here: the rest would run live

    @property
    def ends(self) -> Checker:
        return self  # it ends as it checks

    async def complete(self, value: Any) -> None:
        self._consumed()

    async def fail(self, exc: BaseException) -> None:
        self._consumed()  # the process failed as recorded

    async def diverge(self, exc: NonDeterminismError) -> None:
        self.problem = exc

    async def continue_as_new(self, effect: fx.ContinueAsNew) -> None:
        return None  # the next run has a log of its own

    def _consumed(self) -> None:
        try:
            self.consumed()
        except NonDeterminismError as exc:
            self.problem = exc
