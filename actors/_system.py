"""`ActorSystem`: the public calls, routing and the system's state.

Bringing instances into memory and out (activation, passivation, stalls,
recovery, shutdown) is in `_activation`; the internals of cancelling and
restarting in `_cancels`; `query`, `cleanup` and settling stuck
compensations in `_upkeep`; `send`, `ask` and `send_many`, and how a
committed message reaches its instance, in `_sending`. Each is a base of
`ActorSystem`, so each method still has one owner and one place to read it.
`open_system` (in `_open`) runs a system.
"""

from __future__ import annotations

import functools
import math
import random as _random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar, overload

import trio

from storage import (
    MAX_ADDRESS_BYTES,
    InstanceRecord,
    InstanceRow,
    Journal,
    Parking,
    Txn,
    encode,
    instance_id,
)
from storage.errors import Conflict, JournalCorrupt, JournalUnavailable

from . import _events, _fork, _guard, _mail, _protocol, _retry, _tracing
from ._activation import Activation, Holds
from ._asks import Asks
from ._cancels import Cancels
from ._checks import check_name, check_seconds, check_text
from ._context import Context
from ._flow import FlowControl
from ._handles import Handle
from ._instance import Actor
from ._interfaces import ActorAPI
from ._keys import KeyedSends
from ._nodes import NodeView
from ._outages import JournalWatch
from ._process import ProcessDef
from ._public import NoPublicConstructor
from ._queues import Queue, QueueService
from ._records import IfExists, Signal, StreamFrom
from ._rides import Rides
from ._schedules import ScheduleService
from ._sending import Sending, commit_through
from ._streams import Stream
from ._timers import TimerService
from ._upkeep import Upkeep
from .errors import AlreadyStarted, InvalidArguments, LimitExceeded, UnknownProcess

__all__ = ["ActorSystem"]

P = ParamSpec("P")  # a process function's parameters after ctx
R = TypeVar("R")  # its result

# What `_snapshot` gives for an instance it cannot read: incarnation 0 is
# none a handle holds, so a handle reads it as replaced.
NO_RECORD = InstanceRecord(incarnation=0)
SEEN_KEPT = 10_000  # instances of a remote journal whose last read state is kept
LEASE_LOOK = 0.1  # seconds between looks at a lost lease (see _activate_when_leased)


def _state_of(row: InstanceRow | None) -> tuple[str, InstanceRecord]:
    return ("unknown", NO_RECORD) if row is None else (row.status, row.record)


_IIDS_KEPT = 4096  # addresses whose instance ids are kept (see _address_iid)


class ActorSystem(Activation, Cancels, Upkeep, Sending, FlowControl, metaclass=NoPublicConstructor):
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
        self._procs: dict[str, ProcessDef[..., Any]] = {}
        for proc in processes:
            if not isinstance(proc, ProcessDef):
                raise InvalidArguments(
                    f"processes=[...] takes definitions made with @actors.process, got {proc!r}"
                )
            if proc.template in self._procs and self._procs[proc.template] is not proc:
                raise InvalidArguments(
                    f"two process definitions share the template {proc.template!r}; "
                    "a template names one definition (keep it when the code changes)"
                )
            self._procs[proc.template] = proc
        self._wall = now
        self._offset = 0.0
        self._live: dict[bytes, Actor] = {}
        self._activating = Holds()  # see _activate, _cancel_iid
        self._landing: dict[bytes, trio.Event] = {}  # see _activate
        # Instances mail was routed to while no actor was live (see _run_created)
        self._routed_absent: set[bytes] = set()
        self._cancelling: dict[bytes, trio.Event] = {}  # see _cancel_iid
        self._foreign: set[bytes] = set()  # instances of processes not registered here
        self._said_stuck: dict[bytes, str] = {}  # see _stuck
        # (An OrderedDict: dropping the oldest of a plain dict, del d[next(iter(d))],
        # scans the slots emptied before it, ~1.5 us a time at 10k entries.)
        self._ends: OrderedDict[bytes, tuple[str, InstanceRecord]] = OrderedDict()  # see _ended
        # A remote journal's instances as last read off the trio thread (see _snapshot).
        self._seen: OrderedDict[bytes, tuple[str, InstanceRecord]] = OrderedDict()
        self._iids: dict[str, bytes] = {}  # see _address_iid
        self._creating: dict[bytes, trio.Event] = {}
        self._stalled_iids: set[bytes] = set()  # see _stalled
        self._resuming = False
        self._status_events: dict[bytes, trio.Event] = {}
        self._cursors: dict[tuple[bytes, str], int] = {}  # consumer moves not yet durable
        # Why each instance marked corrupt in this session is: the record
        # that did not decode (see _corrupt_error).
        self._corrupt: dict[bytes, JournalCorrupt] = {}
        self.timers = TimerService(self)
        self.takeover_interval = 0.25 * journal.poll_scale
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._sweep_parking = Parking()  # see _sweep_idle
        self.outages = JournalWatch(journal)
        self.nodes = NodeView(self)
        self.queues = QueueService(self, queues)
        self.schedules = ScheduleService(self)
        self.asks = Asks(self)
        self.rides = Rides(journal)
        self.keys = KeyedSends(self)

    # -- time ------------------------------------------------------------------

    def epoch_now(self) -> float:
        """Wall-clock epoch seconds, advancing with trio's clock (so with a MockClock too)."""
        return trio.current_time() + self._offset

    def trio_time(self, epoch: float) -> float:
        """The trio clock reading at which epoch time ``epoch`` arrives."""
        return epoch - self._offset

    # -- lookups ---------------------------------------------------------------

    def _proc(self, proc: ProcessDef[..., Any] | str) -> ProcessDef[..., Any]:
        template = proc.template if isinstance(proc, ProcessDef) else proc
        found = self._procs.get(template)
        if found is None:
            known = ", ".join(sorted(self._procs)) or "none"
            raise UnknownProcess(
                f"process {template!r} is not registered with this system (registered: "
                f"{known}); pass it in open_system(journal, processes=[...])"
            )
        return found

    def _address_iid(self, address: Any, what: str) -> bytes:
        """The instance id of ``address`` (`InvalidArguments` naming ``what``
        if it is not a name). Ids of addresses seen lately are kept: a
        sender that sends to the same few instances pays for the check and
        the hash once."""
        iids = self._iids
        iid = iids.get(address) if type(address) is str else None
        if iid is None:
            iid = instance_id(check_name(address, what))
            if len(iids) >= _IIDS_KEPT:
                iids.clear()
            iids[address] = iid
        return iid

    def _make_context(self, actor: ActorAPI) -> Context:
        return Context(actor)

    def _final_end(self, iid: bytes) -> tuple[str, InstanceRecord] | None:
        """The end of ``iid`` that ran here, as kept (`_ended`), if it is
        still what the journal holds: on a shared journal another node may
        have started a cancelled address afresh, so only a completion is
        taken from memory there."""
        ended = self._ends.get(iid)
        if ended is not None and self.journal.node is not None and ended[0] != "completed":
            return None
        return ended

    def _snapshot(self, iid: bytes) -> tuple[str, InstanceRecord]:
        """The instance's status and record, as this system knows them.

        Invariant: no journal I/O on the trio thread for a remote journal (a
        read there is a round trip, unbounded when the server is slow, and
        every task would wait on it): what is not in memory is what the
        last read off the thread found (`_refresh`), or ``"unread"``.
        A local journal reads at once."""
        actor = self._live.get(iid)
        if actor is not None and actor.loaded:
            if self.nodes.trusted(iid):
                return actor.status, actor.durable_record()
            if not self.journal.reads_at_once:  # its memory may be stale: only a read tells
                return self._seen.get(iid) or ("unread", NO_RECORD)
        ended = self._final_end(iid)
        if ended is not None:
            return ended
        if not self.journal.reads_at_once:
            return self._seen.get(iid) or ("unread", NO_RECORD)
        try:
            with self.journal.reader() as r:
                row = r.instance(iid)
        except JournalCorrupt:
            return "corrupt", NO_RECORD
        state = _state_of(row)
        if actor is not None and not actor.done and actor.record.incarnation > state[1].incarnation:
            # Its start is submitted and not written yet (an "async" journal
            # acknowledges first): the journal still shows the incarnation
            # it replaces, which must not read as this one's end.
            return "running", actor.record
        return state

    async def _refresh(self, iid: bytes) -> tuple[str, InstanceRecord]:
        """`_snapshot`, reading the journal (off the trio thread) for what
        is not in memory."""
        if self.journal.reads_at_once:
            return self._snapshot(iid)
        actor = self._live.get(iid)
        if (actor is not None and actor.loaded and self.nodes.trusted(iid)) or (
            self._final_end(iid) is not None
        ):
            return self._snapshot(iid)
        try:
            row = await self.journal.read(lambda r: r.instance(iid))
        except JournalCorrupt:
            state = ("corrupt", NO_RECORD)
        else:
            state = _state_of(row)
        self._remember(iid, state)
        return self._snapshot(iid)  # (it may have come into memory meanwhile)

    def _remember(self, iid: bytes, state: tuple[str, InstanceRecord]) -> None:
        """Keep what a read off the thread found (remote journals), oldest out."""
        if self.journal.reads_at_once:
            return
        seen = self._seen
        seen[iid] = state
        seen.move_to_end(iid)
        if len(seen) > SEEN_KEPT:
            seen.popitem(last=False)

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
        handle, created = await self._start(self._proc(proc), params, input, None, queued=queued)
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
        handle, created = await self._start(self._proc(proc), params, input, (signal, payload))
        return handle

    async def _start(
        self,
        proc: ProcessDef[..., Any],
        params: tuple[Any, ...],
        input: dict[str, Any],
        message: tuple[Signal, Any] | None,
        *,
        parent: str | None = None,
        address: str | None = None,
        queued: tuple[Queue, int] | None = None,
        extra: Callable[[Txn], None] | None = None,
    ) -> tuple[Handle[Any], bool]:
        for param in params:
            # ASCII is always valid: only other text pays for the message.
            if isinstance(param, str) and not (param.isascii() and param.isprintable()):
                check_text(param, f"a path param of {proc.template!r}")
        own_address = proc.resolve(*params)
        address = address or own_address
        size = len(address.encode())
        if size > MAX_ADDRESS_BYTES:
            raise LimitExceeded(
                f"the address {address[:40]!r}... is {size} bytes, over the limit of "
                f"{MAX_ADDRESS_BYTES} (storage.MAX_ADDRESS_BYTES); use short ids as path "
                "params and put the data in the input"
            )
        proc.check_input(params, input)
        encoded_input = encode(input, what="input") if input else None  # refused before a read
        iid = instance_id(address)
        while True:
            actor = self._live.get(iid)
            if actor is not None and actor.loaded and not actor.done:
                if message is not None:
                    await self._send_iid(iid, address, *message)
                return Handle._create(self, iid, address, actor.record.incarnation), False
            waiting = self._creating.get(iid)
            if waiting is None:
                break
            await waiting.wait()
        self._creating[iid] = done = trio.Event()
        try:
            while True:  # once more each time another start (another node's) commits first
                row, floor = await self.journal.read(lambda r: _protocol.read_for_start(r, iid))
                if row is not None and row.address != address:
                    raise InvalidArguments(
                        f"address {address!r} collides with {row.address!r} in the journal"
                    )
                if row is not None and row.status != "cancelled":
                    self._remember(iid, _state_of(row))
                    if message is not None:
                        await self._send_iid(iid, address, *message)
                    return Handle._create(self, iid, address, row.record.incarnation), False
                start = _protocol.start_txn(
                    iid,
                    address=address,
                    process=proc.template,
                    params=params,
                    input=input,
                    parent=parent,
                    previous=row,  # a cancelled one starts afresh
                    floor=floor,
                    now=self.epoch_now(),
                    max_payload=self.max_payload,
                    message=None if message is None else (message[0].name, message[1]),
                    trace=_tracing.traceparent(self),
                    status="running" if queued is None else "queued",
                    encoded_input=encoded_input,
                )
                record = start.record
                if queued is not None:  # not in memory: what handles read
                    self._remember(iid, ("queued", record))
                if extra is not None:  # what the caller records with the start (a schedule's tick)
                    extra(start.txn)
                try:
                    if queued is not None:  # it waits for a slot: the queue's pump starts it
                        await self._enqueue(start.txn, queued, iid, address)
                        return Handle._create(self, iid, address, record.incarnation), True
                    # (If written with its outcome unknown, it runs once the journal answers.)
                    results = await commit_through(
                        self.journal,
                        start.txn,
                        lambda _: self._spawn_system_task(self._reload_when_back, iid),
                    )
                except Conflict as exc:
                    if exc.reason not in _protocol.START_RACED:
                        raise
                    continue
                break
            actor = await self._run_started(iid, address, proc, record)
            if actor is None:
                return Handle._create(self, iid, address, record.incarnation), True
            if start.message is not None and results:
                actor.deliver(
                    results[start.message.slot], _protocol.unpack_message(start.message.message)
                )
            self._status_changed(iid)
            return Handle._create(self, iid, address, record.incarnation), True
        finally:
            del self._creating[iid]
            done.set()
            if iid in self._routed_absent and iid not in self._live:
                self._activate(iid)  # mail noticed meanwhile (see _activate_for_mail)

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
        return self._closing

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
        iid = self._address_iid(address, "get's address")
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
        iid = self._address_iid(address, "lookup's address")
        known = self._in_memory(iid, address)
        if known is not None:
            return known
        try:
            row = await self.journal.read(lambda r: r.instance(iid))
        except JournalCorrupt:
            return Handle._create(self, iid, address, 0)
        return self._found(iid, address, row)

    def _in_memory(self, iid: bytes, address: str) -> Handle[Any] | None:
        actor = self._live.get(iid)
        if actor is not None and actor.loaded:
            return Handle._create(self, iid, address, actor.record.incarnation)
        ended = self._final_end(iid)
        if ended is not None:
            return Handle._create(self, iid, address, ended[1].incarnation)
        return None

    def _found(self, iid: bytes, address: str, row: InstanceRow | None) -> Handle[Any] | None:
        if row is None:
            return None
        self._remember(iid, _state_of(row))
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
        iid = self._address_iid(address, "cancel's address")
        if self._snapshot(iid)[0] == "corrupt":
            raise self._corrupt_error(iid, address)
        return await self._cancel_iid(
            iid, address, "cancelled by system.cancel", compensate=compensate
        )

    def _spawn_system_task(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the background; a full or lost journal runs it
        again (backing off) rather than ending the system."""
        if self._nursery is not None and not self._closing:
            task = functools.partial(fn, *args)
            self._nursery.start_soon(
                self.outages.keep_running, task, f"the system task {fn.__name__}"
            )

    async def _run_started(
        self, iid: bytes, address: str, proc: ProcessDef[..., Any], record: InstanceRecord
    ) -> Actor | None:
        """Claim and run an instance whose start (or retry) was just
        committed; None where it runs elsewhere (another node took it over
        at once) or later (this node's lease is lost: once it is back)."""
        try:
            epoch = await self._claim_written(iid)
        except JournalUnavailable:  # it is written: it runs once the journal answers
            self._spawn_system_task(self._reload_when_back, iid)
            raise
        self.nodes.claimed(iid, epoch)
        if epoch is None:
            if self.journal.lease_term() is None:
                # No node took it: this one claims nothing while its lease
                # is lost, and the instance is its own.
                self._spawn_system_task(self._activate_when_leased, iid)
            return None
        return self._run_created(iid, address, proc, record, epoch)

    async def _claim_written(self, iid: bytes) -> int | None:
        """Claim ``iid``, whose start is written: shielded where a claim
        waits (a shared journal), so it runs whatever its caller's
        cancellation (else a live instance nobody runs until the next open)."""
        if not self.journal.shared:
            return await self.journal.claim(iid)  # (at once: this node owns everything)
        with trio.CancelScope(shield=True):
            epoch = await self.journal.claim(iid)
        return epoch

    async def _activate_when_leased(self, iid: bytes) -> None:
        """Bring the instance in once this node holds its lease again (an
        instance it made while the lease was lost is its own, and would
        otherwise wait for something to need it)."""
        while self.journal.lease_term() is None:
            await trio.sleep(LEASE_LOOK)
        self._activate(iid)

    async def _activate_later(self, iid: bytes, delay: float) -> None:
        await trio.sleep(delay)
        self._activate(iid)

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

    # -- status notifications ------------------------------------------------------

    def _status_event(self, iid: bytes) -> trio.Event:
        event = self._status_events.get(iid)
        if event is None:
            event = self._status_events[iid] = trio.Event()
        return event

    def _status_changed(self, iid: bytes) -> None:
        self.queues.status_changed(iid)
        self.schedules.status_changed(iid)
        actor = self._live.get(iid)
        if actor is None or not actor.done:
            self._ends.pop(iid, None)  # changed by other means than its actor's end
        self._activity_changed(iid)

    def _activity_changed(self, iid: bytes) -> None:
        """A live instance went from running to suspended or back (twice
        per message it takes): only its status watchers need to know. The
        queue and schedule services wait for instances to end, which comes
        through `_status_changed`; no end of it is cached while it is live."""
        event = self._status_events.pop(iid, None)
        if event is not None:
            event.set()
