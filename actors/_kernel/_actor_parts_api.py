"""What an actor's own parts offer the runtime's modules: its journal
writes (`WritesAPI`), what reaches it from outside (`ArrivalsAPI`) and how
its run ends (`EndsAPI`).

`ActorAPI` (``actors._kernel._interfaces``) hands them out as ``writes``,
``arrivals`` and ``ends``. This module imports only modules below all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from storage import InstanceRecord, Txn
from storage.errors import JournalCorrupt

from . import _effects as fx
from ._log import LogEntry

__all__ = ["ArrivalsAPI", "EndsAPI", "WritesAPI"]


class WritesAPI(Protocol):
    """An actor's journal writes (`_writes.Writes`)."""

    persisted_status: str | None
    published: tuple[int, Any] | None  # the durable exports while a publish is in flight

    @property
    def txn(self) -> Txn:
        """The ridden writes: add to it, they go with the next commit."""

    def flush(self, *, defer: bool = False) -> None: ...

    def drop(self) -> None: ...

    async def barrier(
        self,
        txn: Txn | None = None,
        *,
        durable: bool | None = None,
        then: Callable[[list[int]], None] | None = None,
    ) -> list[int]: ...

    def submit(self, txn: Txn, then: Callable[[list[int]], None]) -> None: ...

    async def settle(self) -> None: ...

    async def landed(self) -> None: ...

    def ride_log(self, seq: int, entry: LogEntry) -> None: ...

    def put_record(self, txn: Txn, status: str, **changes: Any) -> None: ...

    def update_record(self, **changes: Any) -> None: ...

    def publish(self, txn: Txn, exports: Any) -> int: ...

    def published_durably(self, version: int, exports: Any) -> None: ...

    def durable_record(self) -> InstanceRecord: ...


class ArrivalsAPI(Protocol):
    """What reaches an actor from outside (`_arrivals.Arrivals`)."""

    timers: dict[int, fx.Timer] | None  # its live timers, by seq (None: none yet)

    def deliver(self, seq: int, stored: Sequence[Any]) -> None: ...

    def timers_due(self, now: float) -> None: ...

    def add_wait(self, wait: fx.Wait[Any]) -> None: ...

    def match_mail(self) -> None: ...

    def remove_wait(self, wait: fx.Wait[Any]) -> None: ...

    def cancel(self, reason: str, *, compensate: bool = False) -> None: ...

    def restart(self, reason: str) -> None: ...

    def corrupted(self, exc: JournalCorrupt) -> None: ...

    def park(self, error: BaseException, held: str) -> None: ...

    def take_timers(self) -> list[tuple[int, int]]: ...

    def start_timer(self, timer: fx.Timer, entry: LogEntry | None) -> None: ...

    def stop_timer(self, timer: fx.Timer) -> None: ...

    def drop_timer(self, timer: fx.Timer) -> None: ...

    def withhold(self, seq: int) -> tuple[str, Any] | None: ...

    def release(self, seq: int, message: tuple[str, Any] | None, *, dropped: bool) -> None: ...


class EndsAPI(Protocol):
    """How an actor's run ends (`_ends.Ends`)."""

    escalate_to: tuple[Any, ...] | None

    def escalate_on_end(self, parent: str, why: str, strategy: Any) -> None: ...

    def begin_run(self, txn: Txn, **changes: Any) -> None: ...
