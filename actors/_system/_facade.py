"""`ActorSystem`: the public calls, over the parts that do the work.

Each part is made here, handed what it uses, and reaches into no other
part's state: `Registry` (live instances, definitions, activation,
passivation, takeover, shutdown), `Statuses` (each instance's status as
this system knows it), `Corruption` and `Stalls` (`_troubles`), `Router`
(`_sending`: send, ask, send_many), `Lifecycle` (start, cancel, restart),
`Upkeep` (`_upkeep`: query, cleanup); then the services: timers,
queues, schedules, asks, keyed sends, deferred writes, the node view. The
operator's calls (`_operations`) and the schedules' (`_schedule_calls`)
are bases holding no state. The features are wired in first (`_wiring`).
`open_system` (`_open`) runs a system.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar, overload

import trio

from storage import Journal

from .._features import _schedules
from .._features._asks import Asks
from .._features._queue_state import QueueInfo
from .._features._queues import Queue, QueueService
from .._features._schedule_calls import ScheduleCalls
from .._features._sending import Router
from .._features._sends import KeyedSends
from .._features._signals import SignalRouter
from .._features._streams import Stream
from .._features._timers import TimerService
from .._kernel import _reports, _tracing
from .._kernel._compensations import Compensations
from .._kernel._handles import Handle
from .._kernel._interfaces import Service
from .._kernel._outages import JournalWatch
from .._kernel._process import ProcessDef
from .._kernel._public import NoPublicConstructor
from .._kernel._rides import Rides
from .._kernel._values import IfExists, Signal, StreamFrom
from ..errors import InvalidArguments
from ._lifecycle import Lifecycle
from ._nodes import NodeView
from ._operations import Operations
from ._registry import Registry
from ._status_watch import Statuses
from ._troubles import Corruption, Stalls
from ._upkeep import Upkeep
from ._wiring import wire

__all__ = ["ActorSystem"]

P = ParamSpec("P")  # a process function's parameters after ctx
R = TypeVar("R")  # its result


class ActorSystem(Operations, ScheduleCalls, metaclass=NoPublicConstructor):
    """The runtime: owns a journal, routes messages, runs live instances.

    Get one from `open_system`; every method is safe to call from any task
    of the trio run that opened it.
    """

    _made_by = "open one with `async with actors.open_system(journal, processes=[...])`"

    def __init__(
        self,
        journal: Journal,
        processes: Iterable[ProcessDef[..., Any]],
        random: _random.Random | None,
        *,
        passivate_after: float,
        max_sync_steps: int,
        max_payload: int,
        now: Callable[[], float],
        queues: Iterable[Queue] = (),
        compensations: Iterable[Callable[..., Any]] = (),
    ) -> None:
        self.journal = journal
        # Given by the application, and learnt from its compensate= (never
        # from stored names: see _compensations).
        self.compensations = Compensations(compensations)
        self.random = random if random is not None else _random.Random()
        self.passivate_after = passivate_after
        self.log_debug = _reports.debug_enabled()  # cached: DEBUG records are on the hot path
        self.tracing = _tracing.active()  # likewise (see _tracing)
        self.tracer = _tracing.tracer() if self.tracing else None  # the provider's at open
        self.max_payload = max_payload
        self.step_limiter = trio.CapacityLimiter(max_sync_steps)
        # Steps acquire step_limiter themselves (so a queued step's timeout
        # starts only when it runs); abandoned threads still hold this one.
        self.thread_limiter = trio.CapacityLimiter(math.inf)
        # `trio.current_time` in one call (the run's clock's), not three: hot.
        self.trio_now: Callable[[], float] = trio.lowlevel.current_clock().current_time
        self._offset = now() - self.trio_now()  # wall clock minus trio's
        self.cursors: dict[tuple[bytes, str], int] = {}  # consumer moves not yet durable
        # How the features' effects run live and what they owe at a run's end
        # (`_wiring`), with the services it binds: wired once, before any instance runs.
        self.asks = asks = Asks(self)
        self.wiring = wire(asks)
        # The parts, each handed what it uses; the registry first, since the
        # others read its live table or call it. It makes the actors, which
        # hold the whole system; the asks read the others through it still
        # (`SystemAPI`).
        self.outages = outages = JournalWatch(journal)
        self.registry = registry = Registry(self, processes, journal, outages, passivate_after)
        # The node view and the statuses use each other: the view, made
        # first, tells the statuses of a change through the system.
        self.nodes = nodes = NodeView(
            journal, registry, outages, changed=lambda iid: self.statuses.changed(iid)
        )
        self.statuses: Statuses = Statuses(journal, registry.live, nodes.trusted)
        statuses = self.statuses
        self.corruption = Corruption(journal, registry.live, statuses.changed)
        self.stalls = Stalls(registry, statuses)
        self.keys = KeyedSends(journal)
        self.router = Router(
            journal,
            registry,
            statuses,
            nodes,
            self.corruption,
            outages,
            self.epoch_now,
            claim_mail=asks.noticed,  # (mail noticed: a reply of a caller's?)
            keyed_send=self.keys.send,
            max_payload=max_payload,
            tracing=self.tracing,
        )
        self.upkeep = Upkeep(
            journal,
            registry.live,
            activate=registry.activate,
            trusted=nodes.trusted,
            changed=statuses.changed,
            drop_end=statuses.drop_end,
            epoch_now=self.epoch_now,
        )
        # The services.
        self.timers = TimerService(journal, self.epoch_now, self.trio_time, registry.timer_due)
        self.queues = self.gates = QueueService(  # (its gates: `GatesAPI`)
            queues,
            journal,
            outages,
            self.epoch_now,
            procs=registry.procs,
            activate=registry.activate,
            run_admitted=registry.run_admitted,
            spawn=registry.spawn_system_task,
            watch_end=registry.watch_end,
            closing=lambda: registry.closing,
            changed=statuses.changed,
            watch=statuses.watch,
            unwatch=statuses.unwatch,
            claimed=nodes.claimed,
        )
        # (Made after the gates it starts behind.)
        self.lifecycle = lifecycle = Lifecycle(
            self,
            journal,
            registry,
            statuses,
            send_iid=self.router.send_iid,
            send_system=self.router.send_system,
            choose=self.queues.choose,
            claimed=nodes.claimed,
            ended_on_disk=self.wiring.ended_on_disk,
            epoch_now=self.epoch_now,
            max_payload=max_payload,
            tracing=self.tracing,
        )
        # What the registry calls back, made after it (see `Registry.attach`).
        registry.attach(statuses, nodes, self.corruption.record, lifecycle.creating)
        self.schedules = _schedules.ScheduleService(
            journal,
            procs=registry.procs,
            live=registry.live,
            definition=registry.definition,
            activate=registry.activate,
            watch=statuses.watch,
            unwatch=statuses.unwatch,
            start_instance=lifecycle.start,
            epoch_now=self.epoch_now,
            trio_time=self.trio_time,
        )
        self.rides = Rides(journal)
        self.signals = SignalRouter(
            journal, registry.procs, self.router, self.epoch_now, max_payload, self.tracing
        )
        self.services: tuple[Service, ...] = (self.timers, self.queues, self.schedules)

    # -- time ------------------------------------------------------------------

    def epoch_now(self) -> float:
        """Wall-clock epoch seconds, advancing with trio's clock (so with a MockClock too)."""
        return self.trio_now() + self._offset

    def trio_time(self, epoch: float) -> float:
        """The trio clock reading at which epoch time ``epoch`` arrives."""
        return epoch - self._offset

    def use_clock(self, epoch: float, at: float) -> float:
        """From now on, epoch time ``epoch`` is trio time ``at`` (the
        journal's clock: see `_clocks`; called at open, before anything
        reads the time). Returns how far ahead of it the clock read at
        open was (seconds)."""
        skew = at + self._offset - epoch
        self._offset = epoch - at
        return skew

    # -- public API ------------------------------------------------------------

    # For type checkers: the handle's result is what the process returns;
    # without if_exists=, queue= or priority= (a ParamSpec takes no
    # keywords beside it), the params and input must also fit its function.
    @overload
    async def start(
        self, proc: ProcessDef[P, R], *params: P.args, **input: P.kwargs
    ) -> Handle[R]: ...

    @overload
    async def start(
        self,
        proc: ProcessDef[..., R],
        *params: str,
        if_exists: IfExists,
        queue: Queue | str | None = None,
        priority: int = 0,
        **input: Any,
    ) -> Handle[R]: ...

    @overload
    async def start(
        self,
        proc: ProcessDef[..., R],
        *params: str,
        if_exists: IfExists = "return",
        queue: Queue | str | None,
        priority: int = 0,
        **input: Any,
    ) -> Handle[R]: ...

    @overload
    async def start(
        self,
        proc: ProcessDef[..., R],
        *params: str,
        if_exists: IfExists = "return",
        queue: Queue | str | None = None,
        priority: int,
        **input: Any,
    ) -> Handle[R]: ...

    @overload
    async def start(
        self,
        proc: str,
        *params: str,
        if_exists: IfExists = "return",
        queue: Queue | str | None = None,
        priority: int = 0,
        **input: Any,
    ) -> Handle[Any]: ...

    async def start(  # type: ignore[misc]  # @process refuses these keywords as input
        self,
        proc: ProcessDef[..., Any] | str,
        *params: Any,
        if_exists: IfExists = "return",
        queue: Queue | str | None = None,
        priority: int = 0,
        **input: Any,
    ) -> Handle[Any]:
        """Start an instance of ``proc`` at the address its params give.

        A cancelled instance at that address (or none) starts afresh, as a
        new incarnation. Any other one (running, suspended, completed,
        failed, compensation_stuck, corrupt) is kept as it is: with
        ``if_exists="return"`` (the default) its handle is returned, so a
        retried start is harmless; with ``"error"`` `AlreadyStarted` is
        raised. Returns once the instance is durably recorded.

        Args:
            proc: a registered definition, or its path template.
            *params: fill the template's path params, in order.
            if_exists: ``"return"`` or ``"error"``, for an instance that is there.
            queue: a `Queue` registered with ``open_system(queues=...)`` (or
                its name): the instance is stored ``"queued"`` and starts
                when the queue's limits allow, in ``priority`` then FIFO order.
            priority: with ``queue``: lower numbers start first (default 0).
            **input: the process's keyword input.

        Raises:
            AlreadyStarted: (``if_exists="error"``) an instance is there;
                the error names it and its status. Nothing is written.
            UnknownProcess: ``proc`` is not registered with this system.
            InvalidArguments: wrong params or input for the process, or a
                queue that is not registered.
            EncodeError: input the codec cannot store (nothing is written).
        """
        start = self.lifecycle.start_public(proc, params, input, if_exists, queue, priority)
        return (await start)[0]  # (refused in process code, and checked, as it is made)

    @overload
    async def signal_with_start(
        self,
        proc: ProcessDef[..., R],
        *params: str,
        signal: Signal,
        payload: Any = None,
        **input: Any,
    ) -> Handle[R]: ...

    @overload
    async def signal_with_start(
        self,
        proc: str,
        *params: str,
        signal: Signal,
        payload: Any = None,
        **input: Any,
    ) -> Handle[Any]: ...

    async def signal_with_start(
        self,
        proc: ProcessDef[..., Any] | str,
        *params: str,
        signal: Signal,
        payload: Any = None,
        **input: Any,
    ) -> Handle[Any]:
        """Send ``signal`` to the instance, creating it first if it is absent
        or cancelled, in one transaction.

        Raises:
            NotDelivered: the instance exists and is finished; nothing stored.
            UnknownProcess, InvalidArguments, EncodeError: as for `start`.
        """
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"signal= takes an actors.Signal, not {signal!r}")
        proc = self.registry.definition(proc)
        return (await self.lifecycle.start(proc, params, input, (signal, payload)))[0]

    @property
    def closing(self) -> bool:
        """True once the system has begun to close (instances stay as they are)."""
        return self.registry.closing

    @property
    def node(self) -> str | None:
        """This system's node name on a shared journal, or None."""
        return self.journal.node

    async def queue_info(self, queue: Queue | str) -> QueueInfo:
        """How deep the queue is, how many of its instances hold a slot, and
        how long its oldest waiting instance has waited (read from the
        journal, so over every node sharing it).

        Raises:
            InvalidArguments: the queue is not registered with this system.
        """
        return await self.queues.info(queue)

    def stream(self, address: str, consumer: str, from_: StreamFrom = "start") -> Stream:
        """The values the instance at ``address`` emitted, from ``consumer``'s
        durable cursor: ``async with system.stream(a, consumer="c") as s: async for v in s:``.

        A value counts as consumed once the consumer asks for the next one or
        leaves the block without an exception (``break`` included); leaving
        with an exception leaves the value it was handling unconsumed.
        Reconnecting continues right after the last consumed value. A new
        consumer starts at the beginning, or with ``from_="latest"`` after
        the values emitted so far. Iteration ends once the instance is
        finished and every value is read.

        Raises:
            NotDelivered: (on entering) no instance at that address.
        """
        return Stream(self, address, consumer, from_)

    async def send(
        self, address: str, signal: Signal, payload: Any = None, *, key: str | None = None
    ) -> None:
        """Persist a message in the mailbox of the instance at ``address``.

        Returns once the message is durable (not once it is processed). A
        passivated instance is live: the message wakes it.

        With ``key`` (a client's request id, say), a send whose key this
        incarnation of the instance has had already stores nothing and
        returns normally, so a retried send is taken once. Keys are kept
        for the incarnation's life (across continue-as-new, restarts and
        reopens); a new incarnation after a cancel takes them afresh. A
        key is a non-empty str of at most 200 bytes of UTF-8 without
        control characters; it shares no names with stream consumers.

        Raises:
            NotDelivered: no live instance has that address (unknown, or
                finished, cancelled, parked); ``reason`` says which. Nothing
                is stored.
            EncodeError: a payload the codec cannot store; nothing is stored.
            InvalidArguments: a key that is not a non-empty str, or holds a
                control character (NUL included); nothing is stored.
            LimitExceeded: a key over 200 bytes of UTF-8; nothing is stored.
            JournalCorrupt: the instance's records do not decode (it is
                marked ``corrupt``); the error names the database and key.
        """
        return await self.router.send(address, signal, payload, key=key)

    async def ask(
        self, address: str, signal: Signal, payload: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Send ``signal`` to the instance at ``address`` as an ask and wait
        for the value its process gives ``ctx.reply`` after taking it.

        The ask is durable before the wait begins, like `send`; the reply is
        recorded in the replier's log, so a restart of the replier between
        taking and replying neither loses nor repeats it, and an asker on
        another node of a shared journal gets it too (see `actors._features._asks`).

        Raises:
            NotDelivered: no live instance at ``address`` (nothing stored),
                or it ended without replying (the message says so).
            AskTimeout: no reply within ``timeout`` seconds of the ask
                being stored (a `TimeoutError` too); the message stays asked.
            EncodeError: a payload the codec cannot store; nothing is stored.
        """
        return await self.asks.ask(address, signal, payload, timeout=timeout)

    async def send_many(self, messages: Iterable[tuple[str, Signal, Any]]) -> None:
        """Persist many messages, ``(address, signal, payload)`` each, in one
        durable commit: all of them are stored, or none.

        The cheap way to fan a batch of events out to many instances: one
        commit (one fsync) for the whole batch. Messages to one address keep
        their order.

        Raises:
            NotDelivered: an address has no live instance; it names the
                first such address and nothing is stored.
            EncodeError, LimitExceeded: a payload the codec cannot store (a
                note names its position); nothing is stored.
            InvalidArguments: an item that is not ``(address, Signal, payload)``.
            JournalCorrupt: an addressed instance's records do not decode.
        """
        return await self.router.send_many(messages)
