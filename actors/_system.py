"""`ActorSystem` and `open_system`: the public calls, routing and the system's life.

Bringing instances into memory and out (activation, passivation, stalls,
recovery, shutdown) is in `_activation`; the internals of cancelling and
restarting in `_cancels`. Both are bases of `ActorSystem`, so each method
still has one owner and one place to read it.
"""

from __future__ import annotations

import math
import random as _random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio

from storage import (
    MAX_ADDRESS_BYTES,
    STATUS_WORDS,
    LIVE_STATUSES,
    STATUSES,
    TERMINAL_STATUSES,
    CorruptRecord,
    InstanceRecord,
    Journal,
    LMDBJournal,
    decode,
    encode,
    instance_id,
)
from storage.errors import Conflict, JournalCorrupt, JournalUnavailable

from . import _control, _events, _guard, _protocol, _tracing
from ._checks import check_name, check_seconds, check_text
from ._activation import YIELD_EVERY, Activation
from ._asks import Asks
from ._cancels import Cancels
from ._context import Context
from ._handles import Handle
from ._instance import Actor
from ._keys import KeyedSends
from ._nodes import NodeView
from ._outages import JournalWatch
from ._process import ProcessDef
from ._records import InstanceInfo, Signal
from ._streams import Stream
from ._timers import TimerService
from .errors import AlreadyStarted, InvalidArguments, LimitExceeded, NotDelivered, UnknownProcess

__all__ = ["ActorSystem", "open_system"]

# What `_snapshot` gives for an instance it cannot read: incarnation 0 is
# none a handle holds, so a handle reads it as replaced.
NO_RECORD = InstanceRecord(incarnation=0)


class ActorSystem(Activation, Cancels):
    """The runtime: owns a journal, routes messages, runs live instances.

    Get one from `open_system`; every method is safe to call from any task
    of the trio run that opened it.
    """

    def __init__(
        self,
        journal: Journal,
        processes: Iterable[ProcessDef],
        random: _random.Random | None,
        *,
        passivate_after: float,
        max_sync_steps: int,
        max_payload: int,
        now: Callable[[], float],
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
        self._procs: dict[str, ProcessDef] = {}
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
        self._activating: set[bytes] = set()
        self._cancelling: dict[bytes, trio.Event] = {}  # see _cancel_iid
        self._foreign: set[bytes] = set()  # instances of processes not registered here
        self._ends: dict[bytes, tuple[str, InstanceRecord]] = {}  # see _ended
        self._creating: dict[bytes, trio.Event] = {}
        self._stalled_iids: set[bytes] = set()  # see _stalled
        self._resuming = False
        self._status_events: dict[bytes, trio.Event] = {}
        self._cursors: dict[tuple[bytes, str], int] = {}  # consumer moves not yet durable
        # Why each instance marked corrupt in this session is: the record
        # that did not decode (see _corrupt_error).
        self._corrupt: dict[bytes, JournalCorrupt] = {}
        self.timers = TimerService(self)
        self.takeover_interval = 0.25
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._sweep_parked: trio.lowlevel.Task | None = None  # see _sweep_idle
        self.outages = JournalWatch(journal)
        self.nodes = NodeView(self)
        self.asks = Asks(self)
        self.keys = KeyedSends(self)

    # -- time ------------------------------------------------------------------

    def epoch_now(self) -> float:
        """Wall-clock epoch seconds, advancing with trio's clock (so with a MockClock too)."""
        return trio.current_time() + self._offset

    def trio_time(self, epoch: float) -> float:
        """The trio clock reading at which epoch time ``epoch`` arrives."""
        return epoch - self._offset

    # -- lookups ---------------------------------------------------------------

    def _proc(self, proc: ProcessDef | str) -> ProcessDef:
        template = proc.template if isinstance(proc, ProcessDef) else proc
        found = self._procs.get(template)
        if found is None:
            known = ", ".join(sorted(self._procs)) or "none"
            raise UnknownProcess(
                f"process {template!r} is not registered with this system (registered: "
                f"{known}); pass it in open_system(journal, processes=[...])"
            )
        return found

    def _make_context(self, actor: Actor) -> Context:
        return Context(actor)

    def _snapshot(self, iid: bytes) -> tuple[str, InstanceRecord]:
        actor = self._live.get(iid)
        if actor is not None and actor.loaded and self.nodes.trusted(iid):
            return actor.status, actor.record
        ended = self._ends.get(iid)
        if ended is not None:
            return ended
        try:
            with self.journal.reader() as r:
                row = r.instance(iid)
        except JournalCorrupt:
            return "corrupt", NO_RECORD
        if row is None:
            return "unknown", NO_RECORD
        return row.status, row.record

    # -- public API ------------------------------------------------------------

    async def start(
        self, proc: ProcessDef | str, *params: str, if_exists: str = "return", **input: Any
    ) -> Handle:
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
            **input: the process's keyword input.

        Raises:
            AlreadyStarted: (``if_exists="error"``) an instance is there;
                the error names it and its status. Nothing is written.
            UnknownProcess: ``proc`` is not registered with this system.
            InvalidArguments: wrong params or input for the process.
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
        handle, created = await self._start(self._proc(proc), params, input, None)
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

    async def signal_with_start(
        self,
        proc: ProcessDef | str,
        *params: str,
        signal: Signal,
        payload: Any = None,
        **input: Any,
    ) -> Handle:
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
        proc: ProcessDef,
        params: tuple[Any, ...],
        input: dict[str, Any],
        message: tuple[Signal, Any] | None,
        *,
        parent: str | None = None,
        address: str | None = None,
    ) -> tuple[Handle, bool]:
        for param in params:
            if isinstance(param, str):
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
        encode(input, what="input")
        iid = instance_id(address)
        while True:
            actor = self._live.get(iid)
            if actor is not None and actor.loaded and not actor.done:
                if message is not None:
                    await self._send_iid(iid, address, *message)
                return Handle(self, iid, address, actor.record.incarnation), False
            waiting = self._creating.get(iid)
            if waiting is None:
                break
            await waiting.wait()
        self._creating[iid] = done = trio.Event()
        try:
            row = await self.journal.read(lambda r: r.instance(iid))
            if row is not None and row.address != address:
                raise InvalidArguments(
                    f"address {address!r} collides with {row.address!r} in the journal"
                )
            if row is not None and row.status != "cancelled":
                if message is not None:
                    await self._send_iid(iid, address, *message)
                return Handle(self, iid, address, row.record.incarnation), False
            start = _protocol.start_txn(
                iid, address=address, process=proc.template, params=params, input=input,
                parent=parent, previous=row,  # a cancelled one starts afresh
                now=self.epoch_now(), max_payload=self.max_payload,
                message=None if message is None else (message[0].name, message[1]),
                trace=_tracing.traceparent(self),
            )  # fmt: skip
            record = start.record
            results = await self.journal.commit(start.txn)
            try:
                epoch = await self.journal.claim(iid)
            except JournalUnavailable:  # it is written: it runs once the journal answers
                self._spawn_system_task(self._reload_when_back, iid)
                raise
            self.nodes.claimed(iid, epoch)
            if epoch is None:  # another node took it over at once: it runs there
                return Handle(self, iid, address, record.incarnation), True
            actor = self._run_created(iid, address, proc, record, epoch)
            if start.message is not None and results:
                actor.deliver(results[start.message.slot], *_unpack_message(start.message.message))
            self._status_changed(iid)
            return Handle(self, iid, address, record.incarnation), True
        finally:
            del self._creating[iid]
            done.set()

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
        reopens); a new incarnation after a cancel takes them afresh.

        Raises:
            NotDelivered: no live instance has that address (unknown, or
                finished, cancelled, parked); ``reason`` says which. Nothing
                is stored.
            EncodeError: a payload the codec cannot store; nothing is stored.
            JournalCorrupt: the instance's records do not decode (it is
                marked ``corrupt``); the error names the database and key.
        """
        _guard.refuse(
            "system.send()",
            "send from a step (ctx.step) so the send is recorded",
        )
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"send takes an actors.Signal, not {signal!r}")
        check_name(address, "send's address")
        if key is None:
            await self._send_iid(instance_id(address), address, signal, payload)
        else:
            await self.keys.send(instance_id(address), address, signal, payload, key, self._send_iid)

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
        _guard.refuse("system.ask()", "ask from the process with ctx.ask, which is recorded")
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"ask takes an actors.Signal, not {signal!r}")
        check_name(address, "ask's address")
        if timeout is not None:
            timeout = check_seconds(timeout, "ask(timeout=...)")
        return await self.asks.ask(
            instance_id(address), address, signal, payload, timeout, self._send_iid
        )

    async def _send_iid(
        self, iid: bytes, address: str, signal: Signal, payload: Any, *,
        ask: list[Any] | None = None, key: str | None = None,
    ) -> None:  # fmt: skip
        txn, notice = _protocol.send_txn(
            iid, signal.name, payload, self.epoch_now(), max_payload=self.max_payload,
            trace=_tracing.traceparent(self), ask=ask, key=key,
        )
        try:
            (seq,) = await self.journal.commit(txn)
        except Conflict as exc:
            if exc.status == "corrupt" or self._snapshot(iid)[0] == "corrupt":
                raise self._corrupt_error(iid, address) from None
            raise self._not_delivered(address, exc) from None
        self._route(iid, seq, notice.message)

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
        _guard.refuse("system.send_many()", "send from a step (ctx.step) so the send is recorded")
        batch = []
        addresses: dict[bytes, str] = {}
        for n, item in enumerate(messages):
            if not (isinstance(item, tuple) and len(item) == 3 and isinstance(item[1], Signal)):
                raise InvalidArguments(
                    f"send_many takes (address, actors.Signal, payload) tuples; item {n} is "
                    f"{item!r}"
                )
            check_name(item[0], f"send_many's address (item {n})")
            iid = instance_id(item[0])
            addresses.setdefault(iid, item[0])
            batch.append((iid, item[1].name, item[2]))
        if not batch:
            return
        txn, notices = _protocol.send_many_txn(
            batch, self.epoch_now(), max_payload=self.max_payload,
            trace=_tracing.traceparent(self),
        )  # fmt: skip
        try:
            results = await self.journal.commit(txn)
        except Conflict as exc:
            raise await self._first_undeliverable(addresses, exc) from None
        for notice in notices:
            self._route(notice.iid, results[notice.slot], notice.message)

    async def _first_undeliverable(self, addresses: dict[bytes, str], exc: Conflict) -> Exception:
        """The error for a `send_many` that one of its instances refused: the
        first address (in the batch's order) that is not live now, as read
        after the refusal."""

        def statuses(r: Any) -> dict[bytes, str]:
            found = {}
            for iid in addresses:
                try:
                    row = r.instance(iid)
                except JournalCorrupt:
                    found[iid] = "corrupt"
                    continue
                found[iid] = "missing" if row is None else row.status
            return found

        for iid, status in (await self.journal.read(statuses)).items():
            address = addresses[iid]
            if status == "corrupt":
                return self._corrupt_error(iid, address)
            if status == "missing":
                return self._not_delivered(address, Conflict("", reason="missing"))
            if status not in LIVE_STATUSES:
                return self._not_delivered(address, Conflict("", reason="status", status=status))
        return NotDelivered(
            f"an instance addressed by send_many ended while the batch was committed "
            f"({exc}); nothing was stored: send the batch again",
            address=next(iter(addresses.values())), reason="finished",
        )

    def _route(self, iid: bytes, seq: int, message: bytes) -> None:
        """A message was committed to ``iid``'s mailbox: hand it over, or wake it.

        ``message`` is the mailbox record as encoded for the journal.
        Invariant: a live receiver gets the payload decoded from those bytes,
        never the sender's object, so what it sees is what a replay reads
        (a tuple stays what the codec makes of it; a sender mutating its
        dict after ``send`` returns changes nothing)."""
        actor = self._live.get(iid)
        if actor is not None and not actor.done:
            actor.deliver(seq, *_unpack_message(message))
        elif not self.nodes.owned_elsewhere(iid):
            # (Owned elsewhere: the commit notified the owner. If that node
            # dies, the takeover scan finds the instance and its mail.)
            self._activate(iid)

    async def _send_system(self, iid: bytes, address: str, signal: Signal, payload: Any) -> None:
        """Send a runtime message (no liveness check: the receiver decides)."""
        txn, notice = _protocol.system_send_txn(iid, signal.name, payload, self.epoch_now())
        (seq,) = await self.journal.commit(txn)
        self._route(iid, seq, notice.message)

    def _mail_noticed(self, iid: bytes) -> None:
        """Another node wrote mail for ``iid``: a reply to an ask of this
        system's, or a message for an instance this node owns."""
        if not self.asks.noticed(iid):
            self.nodes.mail_noticed(iid)

    @property
    def closing(self) -> bool:
        """True once the system has begun to close (instances stay as they are)."""
        return self._closing

    @property
    def node(self) -> str | None:
        """This system's node name on a shared journal, or None."""
        return self.journal.node

    def _not_delivered(self, address: str, exc: Conflict) -> NotDelivered:
        if exc.reason == "missing":
            return NotDelivered(
                f"no instance at {address!r}; start one first (system.start or "
                "signal_with_start) or check the address",
                address=address,
                reason="unknown",
            )
        status = exc.status or "finished"
        words = STATUS_WORDS.get(status, f"it is {status}")
        return NotDelivered(
            f"no live instance at {address!r} ({words}); start a new one or check the address",
            address=address,
            reason=status,
        )

    def get(self, address: str) -> Handle | None:
        """The handle of the instance at ``address``, live, passivated or
        finished; None if there is none."""
        iid = instance_id(check_name(address, "get's address"))
        actor = self._live.get(iid)
        if actor is not None and actor.loaded:
            return Handle(self, iid, address, actor.record.incarnation)
        ended = self._ends.get(iid)
        if ended is not None:
            return Handle(self, iid, address, ended[1].incarnation)
        try:
            with self.journal.reader() as r:
                row = r.instance(iid)
        except JournalCorrupt:
            return Handle(self, iid, address, 0)
        if row is None:
            return None
        return Handle(self, iid, address, row.record.incarnation)

    async def query(
        self, status: str | None = None, process: ProcessDef | str | None = None
    ) -> AsyncIterator[InstanceInfo]:
        """Iterate instances (live and on disk) with that status and process.

        Args:
            status: one of the statuses, or None for any.
            process: a definition or its template, or None for any.
        """
        template = None
        if process is not None:
            template = process.template if isinstance(process, ProcessDef) else process
            check_name(template, "query(process=...)")
        if status is not None and status not in STATUSES:
            raise InvalidArguments(f"status must be one of {STATUSES}, not {status!r}")
        broken: list[CorruptRecord] = []  # a record that does not decode hides only itself
        rows = await self.journal.read(lambda r: list(r.instances(None, template, corrupt=broken)))
        for bad in broken:
            if bad.address is not None and status in (None, "corrupt"):
                yield InstanceInfo(
                    id=bad.address, process=bad.process, status="corrupt", created=None,
                    updated=None, last_error=str(bad.error),
                )  # fmt: skip
        for n, row in enumerate(rows, 1):
            if n % YIELD_EVERY == 0:
                await trio.lowlevel.checkpoint()  # a long listing starves no one
            actor = self._live.get(row.iid)
            mine = actor is not None and actor.loaded and self.nodes.trusted(row.iid)
            current = actor.status if mine else row.status  # type: ignore[union-attr]
            record = actor.record if mine else row.record  # type: ignore[union-attr]
            if status is not None and current != status:
                continue
            yield InstanceInfo(
                id=row.address,
                process=row.process,
                status=current,
                created=record.created,
                updated=record.updated,
                last_error=record.last_error,
            )

    async def cancel(self, address: str) -> bool:
        """Cancel the instance at ``address``.

        A cancel wins over a restart: an instance that crashes as the cancel
        comes, or is waiting out its restart delay, ends cancelled and does
        not run again.

        Returns True once it is recorded as cancelled (also when another
        cancel of it was under way); False if there was nothing live to
        cancel (it had ended, or ended otherwise meanwhile, e.g. failed past
        its restart limit). A cancelled address can be started afresh.

        Raises:
            JournalCorrupt: the instance's records do not decode; the error
                names the database and key of the one that fails.
        """
        _guard.refuse(
            "system.cancel()",
            "cancel from a step (ctx.step), or let the child end with its parent",
        )
        iid = instance_id(check_name(address, "cancel's address"))
        if self._snapshot(iid)[0] == "corrupt":
            raise self._corrupt_error(iid, address)
        return await self._cancel_iid(iid, address, "cancelled by system.cancel")

    def _spawn_system_task(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._nursery is not None and not self._closing:
            self._nursery.start_soon(fn, *args)

    async def _activate_later(self, iid: bytes, delay: float) -> None:
        await trio.sleep(delay)
        self._activate(iid)

    def stream(self, address: str, consumer: str, from_: str = "start") -> Stream:
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

    async def resume_compensation(self, address: str) -> bool:
        """Retry the compensation of a ``compensation_stuck`` instance from
        where it stopped. Returns False if it is not stuck."""
        iid = instance_id(check_name(address, "resume_compensation's address"))
        row = await self.journal.read(lambda r: r.instance(iid))
        if row is None or row.status != "compensation_stuck":
            return False
        txn = _protocol.resume_compensation_txn(row, self.epoch_now())
        await self.journal.commit(txn, durable=True)
        self._status_changed(iid)
        self._activate(iid)
        return True

    async def abandon_compensation(self, address: str) -> bool:
        """End a ``compensation_stuck`` instance as failed, keeping its record
        (which compensations ran, which did not, and why). Returns False if
        it is not stuck."""
        iid = instance_id(check_name(address, "abandon_compensation's address"))
        row = await self.journal.read(lambda r: r.instance(iid))
        if row is None or row.status != "compensation_stuck":
            return False
        txn = _protocol.abandon_compensation_txn(row, self.epoch_now())
        await self.journal.commit(txn, durable=True)
        self._status_changed(iid)
        return True

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
        wanted = tuple(statuses)
        for status in wanted:
            if status not in TERMINAL_STATUSES:
                raise InvalidArguments(
                    f"cleanup removes finished instances only; {status!r} is not one of "
                    "'completed', 'failed', 'cancelled'"
                )
        cutoff = self.epoch_now() - check_seconds(older_than, "cleanup(older_than=...)")

        def scan(r: Any) -> list[bytes]:
            return [
                row.iid
                for status in wanted
                for row in r.instances(status)
                if (row.record.updated or 0) <= cutoff
            ]

        removed = 0
        victims = await self.journal.read(scan)
        for iid in victims:
            self._ends.pop(iid, None)
        for start in range(0, len(victims), 500):
            txn = _protocol.cleanup_txn(victims[start : start + 500], wanted)
            try:
                await self.journal.commit(txn, durable=True)
                removed += len(victims[start : start + 500])
            except Conflict:  # one changed meanwhile: go one by one
                for iid in victims[start : start + 500]:
                    one = _protocol.cleanup_txn([iid], wanted)
                    try:
                        await self.journal.commit(one, durable=True)
                        removed += 1
                    except Conflict:
                        pass
        return removed

    # -- status notifications ------------------------------------------------------

    def _status_event(self, iid: bytes) -> trio.Event:
        event = self._status_events.get(iid)
        if event is None:
            event = self._status_events[iid] = trio.Event()
        return event

    def _status_changed(self, iid: bytes) -> None:
        actor = self._live.get(iid)
        if actor is None or not actor.done:
            self._ends.pop(iid, None)  # changed by other means than its actor's end
        event = self._status_events.pop(iid, None)
        if event is not None:
            event.set()


@asynccontextmanager
async def open_system(
    journal: Journal,
    processes: Iterable[ProcessDef] = (),
    random: _random.Random | None = None,
    *,
    passivate_after: float = 60.0,
    max_sync_steps: int = 64,
    max_payload: int = 1 << 20,
    now: Callable[[], float] = time.time,
    node: str | None = None,
    control: bool = True,
) -> AsyncIterator[ActorSystem]:
    """Open the journal, recover every unfinished instance, and run the system.

    Use as ``async with actors.open_system(LMDBJournal("./state"), processes=[...]) as system:``.
    Leaving the block stops the live instances without cancelling them
    (they resume on the next open), drains pending writes and closes the
    journal, so the same path can be opened again at once.

    Args:
        journal: where instances live (`storage.LMDBJournal`, `MemoryJournal`, ...).
        processes: the definitions this system runs (nothing is global).
        random: the random source for ``ctx.random()``, ``ctx.uuid()`` and
            retry jitter (seed it for reproducible tests).
        passivate_after: seconds an instance with nothing to do stays in
            memory before it is dropped (it is replayed when a message or
            timer arrives); 0 passivates at every suspension, ``math.inf``
            never.
        max_sync_steps: how many sync steps run in worker threads at once.
        max_payload: the largest encoded message payload, in bytes.
        now: the wall clock read once at open to map trio's clock onto epoch
            time (tests pass a fixed one so virtual time carries across reopens).
        node: this node's name, to share a journal that several nodes open
            at once (`storage.PostgresJournal`): each instance runs on one
            live node at a time, messages reach it from any node, and the
            instances of a node that dies or freezes move to the others.
        control: on an `LMDBJournal`, serve the control socket
            (``control.sock`` in its directory, owner only) through which
            the ``actors`` command line sends, cancels and resumes beside
            the running system; False serves none.

    Raises:
        JournalLocked: another system has the journal open.
        InvalidArguments: an option that is not a sane number (nothing is opened).
    """
    system = ActorSystem(
        journal, processes, random,
        passivate_after=passivate_after, max_sync_steps=max_sync_steps,
        max_payload=max_payload, now=now,
    )  # fmt: skip
    if node is not None:
        journal.set_node(node)
    journal.check_shapes = True  # a record of another shape marks its instance corrupt
    await journal.open()
    body_error: BaseException | None = None
    try:
        system._offset = now() - trio.current_time()
        async with trio.open_nursery() as nursery:
            system._nursery = system.outages.nursery = nursery
            await system._recover()
            nursery.start_soon(
                system.outages.keep_running, system.timers.run, "the timer service",
                name="actors timer service",
            )  # fmt: skip
            nursery.start_soon(system._sweep_idle, name="actors idle sweep")
            if journal.shared:
                journal.on_mail(system._mail_noticed)
                nursery.start_soon(
                    system.outages.keep_running, system._take_over, "the takeover scan",
                    name="actors takeover",
                )  # fmt: skip
            if control and isinstance(journal, LMDBJournal):
                _control.start(nursery, system, journal.path)
            try:
                yield system
            except BaseException as exc:
                # Re-raised below as itself, not wrapped in the nursery's
                # ExceptionGroup: the caller's own error stays catchable.
                body_error = exc
            finally:
                await system._shutdown()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await journal.close()
    if body_error is not None:
        raise body_error


def _unpack_message(message: bytes) -> tuple[str, Any, str | None, list[Any] | None]:
    """(signal name, payload, sender's traceparent or None, ask or None) of
    an encoded mailbox record."""
    decoded = decode(message)
    size = len(decoded)
    return (
        decoded[0], decoded[1], decoded[3] if size > 3 else None, decoded[4] if size > 4 else None
    )
