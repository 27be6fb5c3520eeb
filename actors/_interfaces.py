"""What the runtime's parts may ask of the actor and of the system.

`ActorAPI` is the actor's internal API: what steps, sagas, streams,
supervision and the context call on the live instance they serve (they call
its methods; its state they only read). `SystemAPI` is what actors, handles,
timers and streams ask of the system.

They are Protocols so that those modules can name the actor and the system
without importing `_instance` or `_system`, which import them: the import
graph of ``actors/`` has no circle (``tests/test_structure.py`` checks it).
This module imports only modules below all of them.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import trio

from storage import InstanceRecord, Journal, Txn
from storage.errors import JournalCorrupt, JournalFull, JournalUnavailable

from . import _effects as fx
from ._driver import Driver, Interrupt
from ._log import LogEntry
from ._messages import StoredMessage
from ._outages import JournalWatch
from ._process import ProcessDef
from ._rides import Rides

__all__ = ["ActorAPI", "SystemAPI"]


class SystemAPI(Protocol):
    """The parts of `ActorSystem` that the runtime's modules use."""

    journal: Journal
    random: random.Random
    passivate_after: float
    log_debug: bool  # actors._events.debug_enabled(), read once at open
    tracing: bool  # actors._tracing.active(), read once at open
    timers: Any  # the TimerService
    step_limiter: trio.CapacityLimiter
    thread_limiter: trio.CapacityLimiter
    _procs: dict[str, ProcessDef[..., Any]]
    _cursors: dict[tuple[bytes, str], int]
    outages: JournalWatch
    queues: Any  # the QueueService (actors._queues)
    nodes: Any  # the NodeView (actors._nodes)
    asks: Any  # the Asks in flight (see _asks)
    keys: Any  # the KeyedSends: keyed sends in flight (see _keys)
    rides: Rides  # the timer of deferred writes
    max_payload: int

    @property
    def _live(self) -> Mapping[bytes, ActorAPI]: ...  # read only, outside the system

    @property
    def closing(self) -> bool: ...

    @property
    def node(self) -> str | None: ...

    def epoch_now(self) -> float: ...

    def trio_time(self, epoch: float) -> float: ...

    def _proc(self, proc: ProcessDef[..., Any] | str) -> ProcessDef[..., Any]: ...

    def _make_context(self, actor: ActorAPI) -> Any: ...

    def _snapshot(self, iid: bytes) -> tuple[str, InstanceRecord]: ...

    async def _refresh(self, iid: bytes) -> tuple[str, InstanceRecord]: ...

    def _status_event(self, iid: bytes) -> trio.Event: ...

    def _status_changed(self, iid: bytes) -> None: ...

    def _forget(self, actor: ActorAPI) -> None: ...

    def _ended(self, actor: ActorAPI, status: str) -> None: ...

    def _route(self, iid: bytes, seq: int, message: bytes) -> None: ...

    def _timer_due(self, iid: bytes, now: float) -> None: ...

    def _activate(self, iid: bytes) -> None: ...
    def _activate_for_mail(self, iid: bytes) -> None: ...

    def _mail_in_doubt(self, iid: bytes) -> None: ...

    def _sent_in_doubt(self, txn: Txn) -> None: ...

    def _run_admitted(self, row: Any, epoch: int) -> None: ...

    def _instance_idle(self) -> None: ...

    def _journal_lost(self, iid: bytes, exc: JournalUnavailable) -> None: ...

    def _activity_changed(self, iid: bytes) -> None: ...

    def _stalled(self, actor: ActorAPI, exc: JournalFull) -> None: ...

    def _reload_lost(self, iid: bytes) -> None: ...

    def _stuck(self, actor: ActorAPI, held: str, exc: BaseException) -> None: ...

    def _corrupt_error(self, iid: bytes, address: str) -> JournalCorrupt: ...

    def _run_created(
        self,
        iid: bytes,
        address: str,
        proc: ProcessDef[..., Any],
        record: InstanceRecord,
        epoch: int = 0,
    ) -> ActorAPI: ...

    def _spawn_system_task(self, fn: Callable[..., Any], *args: Any) -> None: ...

    async def _mark_corrupt(self, actor: ActorAPI, exc: JournalCorrupt) -> None: ...

    async def _records_damaged(self, iid: bytes, address: str, exc: JournalCorrupt) -> None: ...

    async def _cancel_iid(
        self, iid: bytes, address: str, reason: str, *, compensate: bool = False
    ) -> bool: ...

    async def _restart_iid(self, iid: bytes, address: str, reason: str) -> None: ...

    async def _activate_later(self, iid: bytes, delay: float) -> None: ...

    async def _reload_when_back(self, iid: bytes) -> None: ...

    async def _send_system(self, iid: bytes, address: str, signal: Any, payload: Any) -> None: ...

    async def cancel(self, address: str, *, compensate: bool = False) -> bool: ...

    async def _start(
        self,
        proc: ProcessDef[..., Any],
        params: tuple[Any, ...],
        input: dict[str, Any],
        message: Any,
        *,
        parent: str | None = None,
        address: str | None = None,
        queued: Any = None,
        extra: Callable[[Txn], None] | None = None,
    ) -> tuple[Any, bool]: ...


class ActorAPI(Protocol):
    """The parts of a live `Actor` that steps, sagas, streams, supervision
    and the context use: state to read, methods to change it."""

    # Read only, outside the actor.
    system: SystemAPI
    iid: bytes
    address: str
    proc: ProcessDef[..., Any]
    record: InstanceRecord
    run: int
    status: str
    driver: Driver
    live: set[fx.Effect[Any]]
    children: dict[str, int]
    timers: dict[int, fx.Timer]
    interrupt: Interrupt | None
    escalate_to: tuple[Any, ...] | None
    loaded: bool
    done: bool
    fenced: bool  # writes are fenced with epoch (a shared journal)
    epoch: int
    published: tuple[int, Any] | None  # the durable exports while a publish is in flight

    def finish(
        self,
        leaf: fx.Effect[Any],
        value: Any = None,
        error: BaseException | None = None,
        entry: LogEntry | None = None,
    ) -> None: ...

    def finish_step(self, step: fx.Step[Any], value: Any, entry: LogEntry) -> None: ...

    def register_compensation(
        self, step: fx.Step[Any], result: Any, *, possibly_applied: bool = False
    ) -> None: ...

    def start_task(
        self, fn: Callable[..., Awaitable[Any]], effect: fx.Effect[Any], *args: Any
    ) -> None: ...

    def task_finished(self) -> None: ...

    def add_child(self, address: str, seq: int) -> None: ...

    def add_wait(self, wait: fx.Wait[Any]) -> None: ...

    def remove_wait(self, wait: fx.Wait[Any]) -> None: ...

    def ride_log(self, seq: int, entry: LogEntry) -> None: ...

    def put_record(self, txn: Txn, status: str, **changes: Any) -> None: ...

    def update_record(self, **changes: Any) -> None: ...

    def publish(self, txn: Txn, exports: Any) -> int: ...

    def published_durably(self, version: int, exports: Any) -> None: ...

    def durable_record(self) -> InstanceRecord: ...

    def become(self, status: str) -> None: ...

    def begin_run(self, txn: Txn, **changes: Any) -> None: ...

    def escalate_on_end(self, parent: str, why: str, strategy: Any) -> None: ...

    def wakeup(self) -> None: ...

    def deliver(self, seq: int, message: StoredMessage) -> None: ...

    def request_passivation(self) -> None: ...

    def claimed_again(self, epoch: int) -> None: ...

    def write_lost(self, exc: BaseException) -> None: ...

    def flush(self, *, defer: bool = False) -> None: ...

    async def barrier(
        self, txn: Txn | None = None, *, durable: bool | None = None
    ) -> list[int]: ...
