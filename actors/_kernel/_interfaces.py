"""What the runtime's parts may ask of the actor and of the system.

`ActorAPI` is the actor's internal API: what steps, sagas, streams,
supervision and the context call on the live instance they serve (they call
its methods; its state they only read). `SystemAPI` is what actors, handles,
streams and the parts made with the system ask of it (a part handed only
what it uses needs none of the system's Protocols: see ``actors._system._facade``).

They are Protocols so that those modules can name the actor and the system
without importing `_instance` or `_system`, which import them: the import
graph of ``actors/`` has no circle (``tests/project/test_structure.py`` checks it).
The system's services (``_services_api``) and the actor's own parts
(``_actor_parts_api``) are described in modules of their own; their
Protocols are importable from here too. This module imports only modules
below all of them.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

import trio

from storage import InstanceRecord, Journal, Parking, Txn
from storage.errors import JournalCorrupt, JournalFull, JournalUnavailable

from . import _effects as fx, _hosts
from ._actor_parts_api import ArrivalsAPI, EndsAPI, WritesAPI
from ._compensations import Compensations
from ._driver import Driver
from ._holds import Holds
from ._log import LogCache, LogEntry
from ._mailbox import Mailbox
from ._message_txns import Notice
from ._process import ProcessDef
from ._rides import Rides
from ._services_api import (
    KeysAPI,
    NodesAPI,
    Service,
    SignalsAPI,
    TimersAPI,
)
from ._values import Signal

if TYPE_CHECKING:  # (its hooks name these Protocols back)
    from ._hooks import Wiring

__all__ = [
    "ActorAPI",
    "ArrivalsAPI",
    "CorruptionAPI",
    "EndsAPI",
    "GatesAPI",
    "KeysAPI",
    "LifecycleAPI",
    "NodesAPI",
    "RegistryAPI",
    "RouterAPI",
    "Service",
    "SignalsAPI",
    "StallsAPI",
    "StatusesAPI",
    "SystemAPI",
    "TimersAPI",
    "WritesAPI",
]


class RegistryAPI(Protocol):
    """What the runtime's modules use of the `Registry` (``actors._system._registry``):
    the instances in memory, the process definitions, the system's tasks."""

    procs: dict[str, ProcessDef[..., Any]]
    activating: Holds
    routed_absent: set[bytes]
    nursery: trio.Nursery | None
    closing: bool
    idle_sweep: Parking  # an instance that parks wakes the idle sweep
    logs: LogCache  # the decoded logs of runs read recently (a wake reads through it)

    @property
    def runner(self) -> RunnerAPI: ...

    @property
    def live(self) -> Mapping[bytes, ActorAPI]: ...  # read only, outside the registry

    def definition(self, proc: ProcessDef[..., Any] | str) -> ProcessDef[..., Any]: ...

    def spawn_system_task(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def run_created(
        self,
        iid: bytes,
        address: str,
        proc: ProcessDef[..., Any],
        record: InstanceRecord,
        epoch: int = 0,
        written: str | None = None,
    ) -> ActorAPI: ...

    def activate(self, iid: bytes) -> None: ...

    def activate_for_mail(self, iid: bytes) -> None: ...

    async def activate_later(self, iid: bytes, delay: float) -> None: ...

    async def reload_when_back(self, iid: bytes) -> None: ...

    def journal_lost(self, iid: bytes, exc: JournalUnavailable) -> None: ...

    def forget(self, actor: ActorAPI) -> None: ...

    def ended(self, actor: ActorAPI, status: str) -> None: ...


class RunnerAPI(Protocol):
    """What instances use of the `Runner` (``actors._actor._runner``), a part of the registry."""

    def ready(self, actor: ActorAPI) -> None: ...


class StallsAPI(Protocol):
    """What the runtime's modules use of `Stalls` (``actors._system._troubles``)."""

    def stalled(self, actor: ActorAPI, exc: JournalFull) -> None: ...

    def reload_lost(self, iid: bytes) -> None: ...

    def stuck(self, actor: ActorAPI, held: str, exc: BaseException) -> None: ...


class CorruptionAPI(Protocol):
    """What the runtime's modules use of `Corruption` (``actors._system._troubles``)."""

    def error(self, iid: bytes, address: str) -> JournalCorrupt: ...

    async def mark(self, actor: ActorAPI, exc: JournalCorrupt) -> None: ...

    async def records_damaged(self, iid: bytes, address: str, exc: JournalCorrupt) -> None: ...


class StatusesAPI(Protocol):
    """What the runtime's modules use of `Statuses` (``actors._system._status_watch``)."""

    def snapshot(self, iid: bytes) -> tuple[str, InstanceRecord]: ...

    async def refresh(self, iid: bytes) -> tuple[str, InstanceRecord]: ...

    def remember(self, iid: bytes, state: tuple[str, InstanceRecord]) -> None: ...

    async def removed(self, iid: bytes, incarnation: int) -> bool: ...

    def event(self, iid: bytes) -> trio.Event: ...

    @property
    def events(self) -> Mapping[bytes, object]: ...  # the instances someone waits on

    def changed(self, iid: bytes) -> None: ...

    def activity_changed(self, iid: bytes) -> None: ...


class RouterAPI(Protocol):
    """What the runtime's modules use of the `Router` (``actors._features._sending``)."""

    def address_iid(self, address: Any, what: str) -> bytes: ...

    async def send_iid(
        self,
        iid: bytes,
        address: str,
        signal: Signal,
        payload: Any,
        *,
        extra: list[Any] | None = None,
        key: str | None = None,
    ) -> None: ...

    async def send_system(self, iid: bytes, address: str, signal: Signal, payload: Any) -> None: ...

    def route(self, notice: Notice, results: Sequence[int]) -> None: ...

    def mail_in_doubt(self, iid: bytes) -> None: ...

    def sent_in_doubt(self, txn: Txn) -> None: ...


class LifecycleAPI(Protocol):
    """What the runtime's modules use of the `Lifecycle` (``actors._system._lifecycle``)."""

    retrying: dict[bytes, Any]  # instance id -> the retry of it under way (_retry._Flight)

    def deciding(
        self, *iids: bytes, activate: bool = True
    ) -> AbstractAsyncContextManager[None]: ...

    async def run_started(
        self, iid: bytes, address: str, proc: ProcessDef[..., Any], record: InstanceRecord
    ) -> ActorAPI | None: ...

    async def cancel_iid(
        self, iid: bytes, address: str, reason: str, *, compensate: bool = False
    ) -> bool: ...

    async def restart_iid(self, iid: bytes, address: str, reason: str) -> None: ...


class GatesAPI(Protocol):
    """Who keeps the gates a start may wait behind (`StartGate`): the
    system's queue service (``actors._features._queues``), the one
    feature with gates. ``choose`` gives the gate of what a start or a
    child's start asked for (the arguments of its ``queue=`` and
    ``priority=``; None: it runs at once); that feature's code keeps it."""

    def choose(self, where: object, rank: int) -> fx.StartGate | None: ...


class SystemAPI(Protocol):
    """What the runtime's modules use of `ActorSystem`: its settings, its
    parts and its services."""

    journal: Journal
    random: random.Random
    passivate_after: float
    log_debug: bool  # actors._kernel._reports.debug_enabled(), read once at open
    tracing: bool  # actors._kernel._tracing.active(), read once at open
    tracer: Any  # the tracer provider's tracer for "actors" (when tracing), taken at open
    max_payload: int
    step_limiter: trio.CapacityLimiter
    thread_limiter: trio.CapacityLimiter
    cursors: dict[tuple[bytes, str], int]  # stream consumers' moves not yet durable
    rides: Rides  # the timer of deferred writes
    compensations: Compensations  # the callables a recorded compensation may name
    wiring: Wiring  # the features' hooks, wired as the system was built (`_system._wiring`)

    # The parts (see actors._system._facade).
    @property
    def registry(self) -> RegistryAPI: ...

    @property
    def statuses(self) -> StatusesAPI: ...

    @property
    def corruption(self) -> CorruptionAPI: ...

    @property
    def stalls(self) -> StallsAPI: ...

    @property
    def router(self) -> RouterAPI: ...

    @property
    def lifecycle(self) -> LifecycleAPI: ...

    # The services.
    @property
    def timers(self) -> TimersAPI: ...

    @property
    def gates(self) -> GatesAPI: ...

    @property
    def nodes(self) -> NodesAPI: ...

    @property
    def keys(self) -> KeysAPI: ...

    @property
    def signals(self) -> SignalsAPI: ...

    @property
    def closing(self) -> bool: ...

    @property
    def node(self) -> str | None: ...

    def epoch_now(self) -> float: ...

    def trio_now(self) -> float: ...

    def use_clock(self, epoch: float, at: float) -> float: ...

    async def cancel(self, address: str, *, compensate: bool = False) -> bool: ...


class ActorAPI(Protocol):
    """The parts of a live `Actor` that steps, sagas, streams, supervision
    and the context use: state to read, methods to change it; and its own
    parts (``writes``, ``arrivals``, ``ends``), which change its state too."""

    # Read only, outside the actor and its parts.
    system: SystemAPI
    journal: Journal
    iid: bytes
    address: str
    proc: ProcessDef[..., Any]
    record: InstanceRecord
    run: int
    status: str
    driver: Driver
    mailbox: Mailbox[fx.Wait[Any]]
    children: dict[str, int] | None  # (None: none yet)
    interrupt: _hosts.Interrupt | None
    root: fx.Effect[Any] | None
    loaded: bool
    done: bool
    woken: bool
    lost: BaseException | None
    fenced: bool  # writes are fenced with epoch (a shared journal)
    epoch: int

    @property
    def live(self) -> Collection[fx.Effect[Any]]:
        """Its live leaves (read only: a tuple or a set, see `Actor.live`)."""
        ...

    # Its parts.
    @property
    def writes(self) -> WritesAPI: ...

    @property
    def arrivals(self) -> ArrivalsAPI: ...

    @property
    def ends(self) -> EndsAPI: ...

    def finish(
        self,
        leaf: fx.Effect[Any],
        value: Any = None,
        error: BaseException | None = None,
        entry: LogEntry | None = None,
    ) -> None: ...

    def abandon(self, leaf: fx.Effect[Any]) -> None: ...

    def register_compensation(
        self, step: fx.Step[Any], result: Any, *, possibly_applied: bool = False
    ) -> None: ...

    async def replay_for_compensations(self) -> None: ...

    def start_task(
        self, fn: Callable[..., Awaitable[Any]], effect: fx.Effect[Any], *args: Any
    ) -> None: ...

    def task_finished(self) -> None: ...

    def add_child(self, address: str, seq: int) -> None: ...

    def become(self, status: str) -> None: ...

    def new_coroutine(self) -> Coroutine[Any, Any, Any]: ...

    def wakeup(self) -> None: ...

    def request_passivation(self) -> None: ...

    def claimed_again(self, epoch: int) -> None: ...
