"""`ActorSystem`: the public calls, over the parts that do the work.

The system is a facade over its parts, each made here with what it needs
(the system itself, read through `SystemAPI`) and reaching into no other
part's state:

- `Registry` (`_registry`): the live instances and the process definitions;
  activation, passivation, takeover, shutdown; the system's own
  tasks (recovery at open is in `_recovery`).
- `Statuses` (`_statuses`): each instance's status and record as this
  system knows them, and events for whoever waits for a change.
- `Corruption` (`_corruption`): instances whose records do not decode.
- `Stalls` (`_stalls`): instances that left memory on a full journal, a
  lost write or a stuck replay, and come back.
- `Router` (`_sending`): `send`, `ask`, `send_many`; how a committed message
  reaches its instance.
- `Lifecycle` (`_lifecycle`): starts, cancels, restarts.
- `Upkeep` (`_upkeep`): `query`, `cleanup`, settling stuck compensations.
- the services: timers, queues, schedules, asks, keyed sends, deferred
  writes, the node view.

`open_system` (in `_open`) runs a system.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, ParamSpec, TypeVar, overload

import trio

from storage import TERMINAL_STATUSES, InstanceRow, Journal
from storage.errors import JournalCorrupt

from . import (
    _asks,
    _events,
    _fork,
    _guard,
    _joins,
    _mail,
    _retry,
    _sends,
    _steps,
    _streams,
    _supervision,
    _tracing,
)
from ._asks import Asks
from ._checks import check_seconds
from ._corruption import Corruption
from ._handles import Handle
from ._keys import KeyedSends
from ._lifecycle import Lifecycle
from ._nodes import NodeView
from ._outages import JournalWatch
from ._process import ProcessDef
from ._public import NoPublicConstructor
from ._queues import QueueService
from ._records import IfExists, InstanceInfo, Queue, QueueInfo, Signal, StreamFrom
from ._registry import Registry
from ._rides import Rides
from ._schedules import ScheduleInfo, ScheduleService
from ._sending import Router
from ._stalls import Stalls
from ._statuses import Statuses, state_of
from ._streams import Stream
from ._timers import TimerService
from ._upkeep import Upkeep
from .errors import AlreadyStarted, InvalidArguments

__all__ = ["ActorSystem"]

# The features that hook into the core: each module registers, as it is
# imported, how its effects run live (`_effects.runs_live`; waits and
# timers: `_arrivals`) and what it owes when a run ends (`_hooks`), so
# that neither the actor nor its parts name a feature. Imported here, with
# the system, so that all of it is registered before any instance runs.
FEATURES = (_asks, _joins, _sends, _steps, _streams, _supervision)

P = ParamSpec("P")  # a process function's parameters after ctx
R = TypeVar("R")  # its result


class ActorSystem(metaclass=NoPublicConstructor):
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
    ) -> None:
        if passivate_after != math.inf:  # inf: never passivate
            passivate_after = check_seconds(passivate_after, "open_system(passivate_after=...)")
        for name, value in (("max_sync_steps", max_sync_steps), ("max_payload", max_payload)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArguments(
                    f"open_system({name}=...) takes a whole number, 1 or more, not {value!r}"
                )
        self.journal = journal
        self.random = random if random is not None else _random.Random()
        self.passivate_after = passivate_after
        self.log_debug = _events.debug_enabled()  # cached: DEBUG records are on the hot path
        self.tracing = _tracing.active()  # likewise (see _tracing)
        self.max_payload = max_payload
        self.step_limiter = trio.CapacityLimiter(max_sync_steps)
        # Steps acquire step_limiter themselves (so a queued step's timeout
        # starts only when it runs); abandoned threads still hold this one.
        self.thread_limiter = trio.CapacityLimiter(math.inf)
        self._wall = now
        self._offset = 0.0
        self.cursors: dict[tuple[bytes, str], int] = {}  # consumer moves not yet durable
        # The parts (each keeps the system, and reads the others through it).
        self.registry = Registry(self, processes)
        self.statuses = Statuses(self)
        self.corruption = Corruption(self)
        self.stalls = Stalls(self)
        self.router = Router(self)
        self.lifecycle = Lifecycle(self)
        self.upkeep = Upkeep(self)
        # The services.
        self.timers = TimerService(self)
        self.outages = JournalWatch(journal)
        self.nodes = NodeView(self)
        self.queues = QueueService(self, queues)
        self.schedules = ScheduleService(self)
        self.asks = Asks(self)
        self.rides = Rides(journal)
        self.keys = KeyedSends(self)

    def _start_flow(self, nursery: trio.Nursery) -> None:
        """Run the queue pumps and the scheduler (again after each outage)."""
        for run, what in (
            (self.queues.run, "the queue pumps"),
            (self.schedules.run, "the scheduler"),
        ):
            nursery.start_soon(self.outages.keep_running, run, what, name=f"actors: {what}")

    # -- time ------------------------------------------------------------------

    def epoch_now(self) -> float:
        """Wall-clock epoch seconds, advancing with trio's clock (so with a MockClock too)."""
        return trio.current_time() + self._offset

    def trio_time(self, epoch: float) -> float:
        """The trio clock reading at which epoch time ``epoch`` arrives."""
        return epoch - self._offset

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
        _guard.refuse(
            "system.start()",
            "start children with ctx.call or ctx.spawn",
        )
        if if_exists not in ("return", "error"):
            raise InvalidArguments(
                f"start(if_exists=...) takes 'return' or 'error', not {if_exists!r}"
            )
        queued = self.queues.choose(queue, priority)
        handle, created = await self.lifecycle.start(
            self.registry.definition(proc), params, input, None, queued=queued
        )
        if not created and if_exists == "error":
            status = handle.status
            raise AlreadyStarted(
                f"an instance is already at {handle.id!r} ({status}); use its "
                "handle (system.get), cancel it to start a new incarnation, or start "
                "with if_exists='return'",
                address=handle.id,
                status=status,
            )
        return handle

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
        handle, created = await self.lifecycle.start(
            self.registry.definition(proc), params, input, (signal, payload)
        )
        return handle

    async def retry(self, address: str, *, input: dict[str, Any] | None = None) -> Handle[Any]:
        """Run a failed (or cancelled) instance again: a new incarnation at
        ``address`` with the params and input it had (or ``input``), running.

        A compare-and-set, like every start: of two retries of one
        incarnation (here or on another node) one commits, and the other
        returns its handle. The replaced incarnation's record is kept for
        ``actors show ADDRESS --incarnation N`` until cleanup; failed
        children it named start afresh when the new run calls them (see
        `actors._retry`).

        Returns:
            The handle of the new incarnation, once it is durably recorded.

        Raises:
            InvalidArguments: it is live, queued, compensation_stuck or
                completed, or a child (retry its parent); or ``input`` does
                not fit the process.
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
            UnknownProcess: its process is not registered with this system.
            JournalCorrupt: its records do not decode.
        """
        return await _retry.retry(self, address, input)

    async def fork(
        self,
        address: str,
        *,
        from_effect: int | None = None,
        after_step: str | None = None,
        to: str | None = None,
        input: dict[str, Any] | None = None,
    ) -> Handle[Any]:
        """Run an ended instance again from a point in its log: a new
        incarnation (at ``address``, or at ``to``) whose run keeps the first
        ``from_effect`` positions of the source's last run, replayed and
        never run again (a payment step before the fork point is not
        charged twice), and runs the rest on the current code.

        ``after_step="charge_card"`` forks just after the first step of that
        name with an outcome (it is kept). A compare-and-set, like every
        start: of two forks or starts of one address, one commits.

        What becomes of the rest (see `actors._fork` for all of it):
        children that the discarded part made were cancelled when the source
        ended, and the fork removes them (their records kept in their
        address's history), so the new run starts them afresh if it calls
        them again; children of the kept part stay as they are. Compensations
        the kept steps registered are kept (not run); a kept step whose
        compensation already ran refuses the fork. Timers the discarded part
        armed are gone with the source's run. Stream values the discarded
        part emitted are dropped; earlier ones are kept. Messages the
        discarded part took are put back in the mailbox, ahead of the
        source's unread ones, except those dropped to the dead letters.
        The replaced record (the source, or an ended instance at ``to``) is
        kept for ``actors show ADDRESS --incarnation N`` until cleanup.

        Returns:
            The handle of the new incarnation, once it is durably recorded.

        Raises:
            InvalidArguments: the source is live, queued or
                compensation_stuck, or a child (fork its parent); the fork
                point is past the end of its log, or has no step of that
                name; the kept part does not replay on the current code;
                ``to`` is live or completed, or another process's address;
                ``input`` does not fit the process.
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
            UnknownProcess: its process is not registered with this system.
            JournalCorrupt: its records do not decode.
        """
        return await _fork.fork(
            self,
            address,
            from_effect=from_effect,
            after_step_name=after_step,
            to=to,
            input=input,
        )

    async def mail(self, address: str) -> list[_mail.Message]:
        """The unread messages of the instance at ``address``, oldest first,
        as stored (each with ``.id``, ``.signal``, ``.payload``, ``.sent``).

        Raises:
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
        """
        return await _mail.mail(self, address)

    async def poison(self, address: str) -> _mail.Message | None:
        """The message a failed instance was handling when it failed (the
        latest its last run took: for one that crashed past its restart
        limit, the message of the last crash), read from its run's log,
        which stays with it until cleanup; None if it is not failed or took
        none. ``actors show`` names it; `drop_message` takes its id.

        Raises:
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
        """
        return await _mail.poison(self, address)

    async def dropped(self, address: str) -> list[_mail.DeadLetter]:
        """The messages dropped from the instances at ``address``
        (`drop_message`), oldest first; kept until the cleanup that removes
        the instance."""
        return await _mail.dropped(self, address)

    async def drop_message(self, address: str, message_id: int) -> _mail.Message:
        """Move an unread message (or the message a failed instance was
        handling when it failed) to the address's dead letters, in one
        transaction: the instance never takes it, and a fork does not put
        it back. Kept for `dropped` and ``actors mail --dropped`` until
        cleanup.

        Returns:
            The message dropped.

        Raises:
            InvalidArguments: there is no such unread message (or it was
                dropped already); or the instance is running a step in this
                system's memory (try again once it waits).
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
        """
        return await _mail.drop_message(self, address, message_id)

    @property
    def closing(self) -> bool:
        """True once the system has begun to close (instances stay as they are)."""
        return self.registry.closing

    @property
    def node(self) -> str | None:
        """This system's node name on a shared journal, or None."""
        return self.journal.node

    def get(self, address: str) -> Handle[Any] | None:
        """The handle of the instance at ``address``, live, passivated or
        finished; None if there is none.

        On a remote journal (PostgreSQL) an instance this system holds
        nothing of in memory is read on the trio thread, one round trip that
        every task waits for: there, prefer ``await system.lookup(address)``."""
        iid = self.router.address_iid(address, "get's address")
        known = self._in_memory(iid, address)
        if known is not None:
            return known
        try:
            with self.journal.reader() as r:
                row = r.instance(iid)
        except JournalCorrupt:
            return Handle._create(self, iid, address, 0)
        return self._found(iid, address, row)

    async def lookup(self, address: str) -> Handle[Any] | None:
        """`get`, reading the journal off the trio thread: the way to find an
        instance on a remote journal without stalling the other tasks."""
        iid = self.router.address_iid(address, "lookup's address")
        known = self._in_memory(iid, address)
        if known is not None:
            return known
        try:
            row = await self.journal.read(lambda r: r.instance(iid))
        except JournalCorrupt:
            return Handle._create(self, iid, address, 0)
        return self._found(iid, address, row)

    def _in_memory(self, iid: bytes, address: str) -> Handle[Any] | None:
        actor = self.registry.live.get(iid)
        if actor is not None and actor.loaded:
            return Handle._create(self, iid, address, actor.record.incarnation)
        ended = self.statuses.final_end(iid)
        if ended is not None:
            return Handle._create(self, iid, address, ended[1].incarnation)
        return None

    def _found(self, iid: bytes, address: str, row: InstanceRow | None) -> Handle[Any] | None:
        if row is None:
            return None
        self.statuses.remember(iid, state_of(row))
        return Handle._create(self, iid, address, row.record.incarnation)

    async def cancel(self, address: str, *, compensate: bool = False) -> bool:
        """Cancel the instance at ``address`` (and its live children, first).

        A cancel wins over a restart: an instance that crashes as the cancel
        comes, or is waiting out its restart delay, ends cancelled and does
        not run again.

        Saga compensations run on a cancel only when asked: by default a
        cancelled instance's registered compensations never run (they run
        when it fails). With ``compensate=True`` (or for a process defined
        with ``compensate_on_cancel=True``) it runs its pending
        compensations first, newest first, as after a failure: the cancel is
        recorded before the first one starts, so a restart of the system
        meanwhile finishes them (each that returned is not run again), and
        it ends cancelled after the last. Its children are cancelled as usual.

        Args:
            address: the instance's address.
            compensate: run its pending compensations before it ends.

        Returns True once it is recorded as cancelled (after its
        compensations, if it ran them; also when another cancel of it was
        under way); False if there was nothing live to cancel (it had ended,
        or ended otherwise meanwhile, e.g. failed past its restart limit),
        or a compensation gave up and parked it ``compensation_stuck``. A
        cancelled address can be started afresh.

        Raises:
            JournalCorrupt: the instance's records do not decode; the error
                names the database and key of the one that fails.
            UnknownProcess: ``compensate=True``, and its process is not
                registered by this system, which cannot run them (nothing is
                written).
        """
        _guard.refuse(
            "system.cancel()",
            "cancel from a step (ctx.step), or let the child end with its parent",
        )
        iid = self.router.address_iid(address, "cancel's address")
        if self.statuses.snapshot(iid)[0] == "corrupt":
            raise self.corruption.error(iid, address)
        return await self.lifecycle.cancel_iid(
            iid, address, "cancelled by system.cancel", compensate=compensate
        )

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
        another node of a shared journal gets it too (see `actors._asks`).

        Raises:
            NotDelivered: no live instance at ``address`` (nothing stored),
                or it ended without replying (the message says so).
            AskTimeout: no reply within ``timeout`` seconds of the ask
                being stored (a `TimeoutError` too); the message stays asked.
            EncodeError: a payload the codec cannot store; nothing is stored.
        """
        return await self.router.ask(address, signal, payload, timeout=timeout)

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

    def query(
        self, status: str | None = None, process: ProcessDef[..., Any] | str | None = None
    ) -> AsyncIterator[InstanceInfo]:
        """Iterate instances (live and on disk) with that status and process.

        Args:
            status: one of the statuses, or None for any.
            process: a definition or its template, or None for any.
        """
        return self.upkeep.query(status, process)

    async def resume_compensation(self, address: str) -> bool:
        """Retry the compensation of a ``compensation_stuck`` instance from
        where it stopped. Returns False if it is not stuck."""
        return await self.upkeep.resume_compensation(address)

    async def abandon_compensation(self, address: str) -> bool:
        """End a ``compensation_stuck`` instance as failed, keeping its record
        (which compensations ran, which did not, and why). Returns False if
        it is not stuck."""
        return await self.upkeep.abandon_compensation(address)

    async def cleanup(
        self,
        older_than: float,
        statuses: Iterable[str] = tuple(sorted(TERMINAL_STATUSES)),
    ) -> int:
        """Remove finished instances last updated more than ``older_than``
        seconds ago, with every record they own (log, mailbox, stream,
        cursors, timers, index entries). Returns how many were removed.

        Raises:
            InvalidArguments: a status that is not finished (running,
                suspended and parked instances are never cleaned up).
        """
        return await self.upkeep.cleanup(older_than, statuses)

    async def schedule(
        self,
        name: str,
        proc: ProcessDef[..., Any] | str,
        *,
        cron: str | None = None,
        every: float | None = None,
        params: Iterable[str] = (),
        input: dict[str, Any] | None = None,
        overlap: str = "skip",
        catch_up: int = 1,
        timezone: str = "UTC",
    ) -> ScheduleInfo:
        """Create (or update) the durable schedule ``name``: at every tick of
        ``cron`` (in ``timezone``) or every ``every`` seconds, start one
        instance of ``proc`` whose last path param is the tick's time (ISO
        8601 UTC, e.g. ``2026-01-01T03:00:00Z``); ``params`` fill the path
        params before it, ``input`` is its keyword input.

        Idempotent by name: the same call again changes nothing; a changed
        definition replaces the stored one and keeps the last tick. A tick
        is started once, across crashes and nodes (see `actors._schedules`).

        Args:
            overlap: what a tick does while the instance of the previous one
                is unfinished: ``"skip"`` it, ``"buffer_one"`` (start it when
                that one ends; one tick kept, later ones skipped) or
                ``"allow"`` (start it anyway).
            catch_up: after a downtime, how many of the ticks that fell due
                run (the latest ones, oldest first); 1 or more.

        Raises:
            UnknownProcess: ``proc`` is not registered.
            InvalidArguments: a bad cron expression, interval, policy, zone,
                or params that do not leave exactly the last path param.
            EncodeError: input the codec cannot store.
        """
        return await self.schedules.define(
            name,
            proc,
            cron=cron,
            every=every,
            params=params,
            input=input,
            overlap=overlap,
            catch_up=catch_up,
            timezone=timezone,
        )

    async def pause_schedule(self, name: str) -> bool:
        """Stop starting ticks of schedule ``name`` (kept in the journal).
        Returns False if there is no such schedule."""
        return await self.schedules.change(name, paused=True)

    async def resume_schedule(self, name: str) -> bool:
        """Start ticks of a paused schedule again, from the next one due (the
        ticks while paused are not caught up). False if there is none."""
        return await self.schedules.change(name, paused=False)

    async def delete_schedule(self, name: str) -> bool:
        """Remove schedule ``name`` (instances it started are left as they
        are). False if there was none."""
        return await self.schedules.change(name, deleted=True)

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule in the journal, by name."""
        return [
            self.schedules.info(row.key[len("schedule/") :], row.value)
            for row in await self.schedules.rows()
        ]

    async def queue_info(self, queue: Queue | str) -> QueueInfo:
        """How deep the queue is, how many of its instances hold a slot, and
        how long its oldest waiting instance has waited (read from the
        journal, so over every node sharing it).

        Raises:
            InvalidArguments: the queue is not registered with this system.
        """
        return await self.queues.info(queue)
