"""`ActorSystem` and `open_system`: routing, activation, recovery, shutdown."""

from __future__ import annotations

import logging
import math
import random as _random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio

from storage import LIVE_STATUSES, Journal, Txn, encode, instance_id
from storage.errors import Conflict, EncodeError, JournalCorrupt, JournalUnavailable

from . import _supervision as _sup
from ._context import Context
from ._handles import Handle
from ._instance import Actor
from ._nodes import NodeView
from ._outages import JournalWatch
from ._process import ProcessDef
from ._records import InstanceInfo, Signal
from ._streams import Stream
from ._timers import TimerService
from .errors import InvalidArguments, NotDelivered, UnknownProcess

__all__ = ["ActorSystem", "open_system"]

log = logging.getLogger("actors")

_FINISHED_WORDS = {
    "completed": "it completed",
    "failed": "it failed",
    "cancelled": "it was cancelled",
    "compensation_stuck": "it is parked in compensation_stuck",
    "corrupt": "its records are corrupt",
}


class ActorSystem:
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
        self.journal = journal
        self.random = random if random is not None else _random.Random()
        self.passivate_after = passivate_after
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
        self._foreign: set[bytes] = set()  # instances of processes not registered here
        self._ends: dict[bytes, tuple[str, dict[str, Any]]] = {}  # see _ended
        self._creating: dict[bytes, trio.Event] = {}
        self._status_events: dict[bytes, trio.Event] = {}
        self._cursors: dict[tuple[bytes, str], int] = {}  # consumer moves not yet durable
        self.timers = TimerService(self)
        self.takeover_interval = 0.25
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self.outages = JournalWatch(journal)
        self.nodes = NodeView(self)

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

    def _snapshot(self, iid: bytes) -> tuple[str, dict[str, Any]]:
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
            return "corrupt", {}
        if row is None:
            return "unknown", {}
        return row.status, row.record

    # -- public API ------------------------------------------------------------

    async def start(self, proc: ProcessDef | str, *params: str, **input: Any) -> Handle:
        """Start an instance of ``proc`` at the address its params give.

        Idempotent: an existing live or finished instance at that address is
        returned as it is; a cancelled one starts afresh. Returns once the
        instance is durably recorded.

        Args:
            proc: a registered definition, or its path template.
            *params: fill the template's path params, in order.
            **input: the process's keyword input.

        Raises:
            UnknownProcess: ``proc`` is not registered with this system.
            InvalidArguments: wrong params or input for the process.
            EncodeError: input the codec cannot store (nothing is written).
        """
        handle, _ = await self._start(self._proc(proc), params, input, None)
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
        own_address = proc.resolve(*params)
        address = address or own_address
        proc.check_input(params, input)
        encode(input, what="input")
        iid = instance_id(address)
        while True:
            actor = self._live.get(iid)
            if actor is not None and actor.loaded and not actor.done:
                if message is not None:
                    await self._send_iid(iid, address, *message)
                return Handle(self, iid, address, actor.record.get("inc", 1)), False
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
                return Handle(self, iid, address, row.record.get("inc", 1)), False
            now = self.epoch_now()
            record = {
                "params": list(params), "input": input, "run": 0,
                "inc": (row.record.get("inc", 0) + 1) if row is not None else 1,
                "created": now, "updated": now, "parent": parent,
            }  # fmt: skip
            txn = Txn()
            if row is not None:
                txn.delete_instance(iid)  # a cancelled one starts afresh
            txn.put_instance(
                iid, address=address, process=proc.template, status="running", record=record
            )
            if message is not None:
                self._append(txn, iid, message[0], message[1])
            results = await self.journal.commit(txn)
            try:
                epoch = await self.journal.claim(iid)
            except JournalUnavailable:  # it is written: it runs once the journal answers
                self._spawn_system_task(self._reload_when_back, iid)
                raise
            actor = Actor(self, iid, address, proc, record)
            actor.loaded = True
            self.nodes.claimed(iid, epoch)
            if epoch is None:  # another node took it over at once: it runs there
                return Handle(self, iid, address, record["inc"]), True
            actor.epoch = epoch
            if message is not None and results:
                actor.deliver(results[0], message[0].name, message[1])
            self._run_actor(actor)
            self._status_changed(iid)
            return Handle(self, iid, address, record["inc"]), True
        finally:
            del self._creating[iid]
            done.set()

    def _append(self, txn: Txn, iid: bytes, signal: Signal, payload: Any) -> None:
        try:
            txn.append_message(iid, [signal.name, payload, self.epoch_now()])
        except EncodeError:
            encode(payload, what="payload")  # raises with the path inside the payload
            raise
        size = len(txn.ops[-1][2])
        if size > self.max_payload:
            from .errors import LimitExceeded

            raise LimitExceeded(
                f"the {signal.name!r} payload encodes to {size} bytes, over the "
                f"max_payload={self.max_payload} limit; send a reference (an id or a "
                "path) instead, or raise open_system(max_payload=...)"
            )

    async def send(self, address: str, signal: Signal, payload: Any = None) -> None:
        """Persist a message in the mailbox of the instance at ``address``.

        Returns once the message is durable (not once it is processed). A
        passivated instance is live: the message wakes it.

        Raises:
            NotDelivered: no live instance has that address (unknown, or
                finished, cancelled, parked); ``reason`` says which. Nothing
                is stored.
            EncodeError: a payload the codec cannot store; nothing is stored.
        """
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"send takes an actors.Signal, not {signal!r}")
        if not isinstance(address, str):
            raise InvalidArguments(f"send takes a str address, not {address!r}")
        await self._send_iid(instance_id(address), address, signal, payload)

    async def _send_iid(self, iid: bytes, address: str, signal: Signal, payload: Any) -> None:
        txn = Txn()
        txn.require(iid, LIVE_STATUSES)
        self._append(txn, iid, signal, payload)
        try:
            (seq,) = await self.journal.commit(txn)
        except Conflict as exc:
            raise self._not_delivered(address, exc) from None
        self._route(iid, seq, signal.name, payload)

    def _route(self, iid: bytes, seq: int, name: str, payload: Any) -> None:
        """A message was committed to ``iid``'s mailbox: hand it over, or wake it."""
        actor = self._live.get(iid)
        if actor is not None and not actor.done:
            actor.deliver(seq, name, payload)
        elif not self.nodes.owned_elsewhere(iid):
            # (Owned elsewhere: the commit notified the owner. If that node
            # dies, the takeover scan finds the instance and its mail.)
            self._activate(iid)

    async def _send_system(self, iid: bytes, address: str, signal: Signal, payload: Any) -> None:
        """Send a runtime message (no liveness check: the receiver decides)."""
        txn = Txn()
        txn.append_message(iid, [signal.name, payload, self.epoch_now()])
        (seq,) = await self.journal.commit(txn)
        self._route(iid, seq, signal.name, payload)

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
        words = _FINISHED_WORDS.get(status, f"it is {status}")
        return NotDelivered(
            f"no live instance at {address!r} ({words}); start a new one or check the address",
            address=address,
            reason=status,
        )

    def get(self, address: str) -> Handle | None:
        """The handle of the instance at ``address``, live, passivated or
        finished; None if there is none."""
        iid = instance_id(address)
        actor = self._live.get(iid)
        if actor is not None and actor.loaded:
            return Handle(self, iid, address, actor.record.get("inc", 1))
        ended = self._ends.get(iid)
        if ended is not None:
            return Handle(self, iid, address, ended[1].get("inc", 1))
        try:
            with self.journal.reader() as r:
                row = r.instance(iid)
        except JournalCorrupt:
            return Handle(self, iid, address, 0)
        if row is None:
            return None
        return Handle(self, iid, address, row.record.get("inc", 1))

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
        if status is not None and status not in _STATUSES:
            raise InvalidArguments(f"status must be one of {_STATUSES}, not {status!r}")
        rows = await self.journal.read(lambda r: list(r.instances(None, template)))
        for row in rows:
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
                created=record.get("created"),
                updated=record.get("updated"),
                last_error=record.get("last_error"),
            )

    async def cancel(self, address: str) -> bool:
        """Cancel the instance at ``address``.

        Returns True once it is recorded as cancelled, False if there was
        nothing live to cancel. A cancelled address can be started afresh.
        """
        iid = instance_id(address)
        return await self._cancel_iid(iid, address, "cancelled by system.cancel")

    async def _cancel_iid(self, iid: bytes, address: str, reason: str) -> bool:
        actor = self._live.get(iid)
        if actor is not None and not actor.done:
            actor.cancel(reason)
            while not actor.done:
                await self._status_event(iid).wait()
            return actor.status == "cancelled"
        row, timers, log = await self.journal.read(lambda r: _row_timers_log(r, iid))
        if row is None or row.status not in ("running", "suspended", "compensation_stuck"):
            return False
        epoch = await self.journal.claim(iid)
        if epoch is None:
            return await self._cancel_remote(iid, address, reason)
        # Depth first: its children go before it records its own end.
        children = _sup.children_in_log(log)
        await _sup.cancel_children(self, children, f"parent {row.address} cancelled")
        record = dict(row.record, reason=reason, updated=self.epoch_now(), last_error=None)
        txn = Txn()
        txn.require(iid, frozenset({"running", "suspended", "compensation_stuck"}))
        if self.journal.shared:
            txn.fence(iid, epoch)
        txn.put_instance(
            iid, address=row.address, process=row.process, status="cancelled", record=record
        )
        for timer in timers:
            txn.cancel_timer(iid, timer.run, timer.seq)
        notice = _sup.notify_parent(self, row.address, record, "cancelled", txn)
        try:
            results = await self.journal.commit(txn)
        except Conflict:
            return False
        self._status_changed(iid)
        if notice is not None:
            self._route(notice[0], results[-1], notice[1], notice[2])
        return True

    async def _cancel_remote(self, iid: bytes, address: str, reason: str) -> bool:
        """Cancel an instance another live node owns: ask it, and wait (a while)."""
        await self._send_system(iid, address, _sup.CANCEL, {"reason": reason})
        with trio.move_on_after(10):
            while True:
                row = await self.journal.read(lambda r: r.instance(iid))
                if row is None or row.status not in LIVE_STATUSES:
                    return row is not None and row.status == "cancelled"
                await trio.sleep(0.02)
        return False

    async def _restart_iid(self, iid: bytes, address: str, reason: str) -> None:
        """Restart a live instance afresh (a sibling's crash under OneForAll/RestForOne)."""
        actor = self._live.get(iid)
        if actor is not None and not actor.done:
            actor.restart(reason)
            return
        row, timers, log = await self.journal.read(lambda r: _row_timers_log(r, iid))
        if row is None or row.status not in LIVE_STATUSES:
            return
        await _sup.cancel_children(self, _sup.children_in_log(log), f"{address} is restarting")
        run = row.record.get("run", 0)
        restarts = _sup.next_restarts(row.record, reason, self.epoch_now())
        record = dict(row.record, run=run + 1, restarts=restarts, updated=self.epoch_now())
        txn = Txn()
        txn.require(iid, LIVE_STATUSES)
        txn.drop_log(iid, run)
        for timer in timers:
            txn.cancel_timer(iid, timer.run, timer.seq)
        txn.put_instance(iid, address=address, process=row.process, status="running", record=record)
        try:
            await self.journal.commit(txn)
        except Conflict:
            return
        self._status_changed(iid)
        self._activate(iid)

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
        iid = instance_id(address)
        row = await self.journal.read(lambda r: r.instance(iid))
        if row is None or row.status != "compensation_stuck":
            return False
        record = dict(row.record, last_error=None, stuck=None, updated=self.epoch_now())
        txn = Txn()
        txn.require(iid, frozenset({"compensation_stuck"}))
        txn.put_instance(iid, address=row.address, process=row.process, status="running", record=record)
        await self.journal.commit(txn, durable=True)
        self._status_changed(iid)
        self._activate(iid)
        return True

    async def abandon_compensation(self, address: str) -> bool:
        """End a ``compensation_stuck`` instance as failed, keeping its record
        (which compensations ran, which did not, and why). Returns False if
        it is not stuck."""
        iid = instance_id(address)
        row = await self.journal.read(lambda r: r.instance(iid))
        if row is None or row.status != "compensation_stuck":
            return False
        record = dict(
            row.record, error=row.record.get("failure"), abandoned=True, updated=self.epoch_now()
        )
        txn = Txn()
        txn.require(iid, frozenset({"compensation_stuck"}))
        txn.put_instance(iid, address=row.address, process=row.process, status="failed", record=record)
        await self.journal.commit(txn, durable=True)
        self._status_changed(iid)
        return True

    async def cleanup(
        self,
        older_than: float,
        statuses: Iterable[str] = ("completed", "failed", "cancelled"),
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
            if status not in ("completed", "failed", "cancelled"):
                raise InvalidArguments(
                    f"cleanup removes finished instances only; {status!r} is not one of "
                    "'completed', 'failed', 'cancelled'"
                )
        cutoff = self.epoch_now() - older_than

        def scan(r: Any) -> list[bytes]:
            return [
                row.iid
                for status in wanted
                for row in r.instances(status)
                if (row.record.get("updated") or 0) <= cutoff
            ]

        removed = 0
        victims = await self.journal.read(scan)
        for iid in victims:
            self._ends.pop(iid, None)
        for start in range(0, len(victims), 500):
            txn = Txn()
            for iid in victims[start : start + 500]:
                txn.require(iid, frozenset(wanted))
                txn.delete_instance(iid)
            try:
                await self.journal.commit(txn, durable=True)
                removed += len(victims[start : start + 500])
            except Conflict:  # one changed meanwhile: go one by one
                for iid in victims[start : start + 500]:
                    one = Txn()
                    one.require(iid, frozenset(wanted))
                    one.delete_instance(iid)
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

    # -- activation ------------------------------------------------------------

    def _run_actor(self, actor: Actor) -> None:
        self._live[actor.iid] = actor
        self.nodes.running(actor.iid)
        assert self._nursery is not None
        self._nursery.start_soon(
            self._run_or_reload, actor.main, actor.iid, name=f"actor {actor.address}"
        )

    def _activate(self, iid: bytes) -> None:
        """Bring the instance into memory if it is on disk (replaying it)."""
        if iid in self._live or iid in self._activating or self._closing:
            return
        self._activating.add(iid)
        assert self._nursery is not None
        self._nursery.start_soon(self._run_or_reload, lambda: self._activate_task(iid), iid)

    async def _run_or_reload(self, run: Callable[[], Any], iid: bytes) -> None:
        """``await run()``; if the journal's connection is lost meanwhile, load
        the instance again later (from what was committed), never end the system."""
        lost: list[BaseException] = []
        try:
            await run()
        except* JournalUnavailable as group:
            lost.extend(group.exceptions)
        if lost:
            log.warning(
                "instance %s lost its journal (%s); loading it again once the journal answers",
                iid.hex(), lost[0],
                extra={"actors_address": iid.hex()},
            )  # fmt: skip
            await self._reload_when_back(iid)

    async def _reload_when_back(self, iid: bytes) -> None:
        await trio.sleep(_RELOAD_AFTER)
        await self.outages.back()
        self._status_changed(iid)  # its handles read what was committed
        self._activate(iid)

    async def _activate_task(self, iid: bytes) -> None:
        try:
            try:
                row = await self.journal.read(lambda r: r.instance(iid))
            except JournalCorrupt as exc:
                log.error("instance %s is corrupt: %s", iid.hex(), exc)
                await self._set_corrupt(iid)
                return
            if row is None or row.status not in LIVE_STATUSES:
                return
            proc = self._procs.get(row.process)
            if proc is None:
                self._foreign.add(iid)
                log.warning(
                    "instance %r belongs to process %r, which this system does not register; "
                    "it stays on disk until a system that registers it opens the journal",
                    row.address,
                    row.process,
                )
                return
            if iid in self._live:
                return  # a concurrent activation won: claiming again would fence it out
            epoch = await self.journal.claim(iid)
            self.nodes.claimed(iid, epoch)
            if epoch is None or iid in self._live:
                return  # another live node owns it (and was told of its mail)
            actor = Actor(self, iid, row.address, proc, None)
            actor.epoch = epoch
            self._live[iid] = actor
        finally:
            self._activating.discard(iid)
        await actor.main()

    def _forget(self, actor: Actor) -> None:
        if self._live.get(actor.iid) is actor:
            del self._live[actor.iid]
            self.nodes.forgotten(actor.iid)

    def _ended(self, actor: Actor, status: str) -> None:
        self._forget(actor)
        # The final state of what just ended answers handle reads (result(),
        # status) without a journal read each: on a remote journal that read
        # is a blocking round trip on the trio thread. Bounded, oldest out.
        self._ends[actor.iid] = (status, actor.record)
        if len(self._ends) > _ENDS_KEPT:
            del self._ends[next(iter(self._ends))]

    def _timer_due(self, iid: bytes, now: float) -> None:
        actor = self._live.get(iid)
        if actor is None:
            self._activate(iid)
        elif actor.loaded and not actor.done:
            actor.timers_due(now)

    async def _mark_corrupt(self, actor: Actor, exc: JournalCorrupt) -> None:
        log.error("instance %r is corrupt: %s", actor.address, exc)
        actor.status = "corrupt"
        await self._set_corrupt(actor.iid)
        self._status_changed(actor.iid)

    async def _set_corrupt(self, iid: bytes) -> None:
        txn = Txn()
        txn.set_status(iid, "corrupt")
        try:
            await self.journal.commit(txn)
        except Exception:  # noqa: BLE001 - the header itself may be unreadable
            log.exception("could not mark %s corrupt", iid.hex())

    # -- recovery and shutdown ---------------------------------------------------

    async def _sweep_idle(self) -> None:
        """Passivate instances idle for ``passivate_after`` seconds.

        One task for the system rather than a deadline per suspension, which
        cost a cancel scope and a timer entry on every message."""
        if self.passivate_after <= 0:
            return  # they passivate at every suspension themselves
        interval = max(self.passivate_after / 4, 0.01)
        while True:
            await trio.sleep(interval)
            cutoff = trio.current_time() - self.passivate_after
            for actor in list(self._live.values()):
                if actor.parked is not None and actor.idle_since <= cutoff:
                    actor.request_passivation()

    async def _take_over(self) -> None:
        """On a shared journal: run the instances of nodes that are gone,
        and let go of those this node may have lost with its lease."""
        while True:
            self.nodes.let_go_of_the_lost()
            for iid in await self.journal.orphans():
                if iid not in self._foreign:
                    self._activate(iid)
            await trio.sleep(self.takeover_interval)

    async def _recover(self) -> None:
        def scan(r: Any) -> tuple[list[bytes], list[tuple[bytes, str, str]]]:
            wanted = []
            orphans = []
            for status in ("running", "suspended"):
                for row in r.instances(status):
                    parent = row.record.get("parent")
                    if parent:
                        found = r.instance(instance_id(parent))
                        if found is None or found.status not in LIVE_STATUSES:
                            gone = "is gone" if found is None else found.status
                            orphans.append((row.iid, row.address, f"parent {parent} {gone}"))
                            continue
                    if status == "running" or row.record.get("last_error"):
                        wanted.append(row.iid)
            wanted.extend(r.instances_with_mail())
            return wanted, orphans

        try:
            wanted, orphans = await self.journal.read(scan)
        except JournalCorrupt as exc:
            # One bad record must not keep the system (and every other
            # instance) down: what the scan did not reach still wakes on
            # its mail and timers.
            log.error("recovery scan stopped at a corrupt record: %s", exc)
            wanted, orphans = [], []
        # A child whose parent ended while the system was down is not stranded.
        for iid, address, reason in orphans:
            await self._cancel_iid(iid, address, reason)
        for iid in wanted:
            self._activate(iid)

    async def _shutdown(self) -> None:
        # Closing is not a cancel: instances stay as they are in the journal
        # and resume on the next open. Submit what they have ridden so far.
        self._closing = True
        for actor in list(self._live.values()):
            if actor.loaded and not actor.done:
                try:
                    actor._flush()
                except Exception:  # noqa: BLE001
                    log.exception("could not flush %r on close", actor.address)


_ENDS_KEPT = 10_000
_RELOAD_AFTER = 0.1  # seconds before an instance that lost the journal is loaded again

_STATUSES = (
    "running", "suspended", "completed", "failed", "cancelled", "compensation_stuck", "corrupt",
)  # fmt: skip


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
            timer arrives); 0 passivates at every suspension.
        max_sync_steps: how many sync steps run in worker threads at once.
        max_payload: the largest encoded message payload, in bytes.
        now: the wall clock read once at open to map trio's clock onto epoch
            time (tests pass a fixed one so virtual time carries across reopens).
        node: this node's name, to share a journal that several nodes open
            at once (`storage.PostgresJournal`): each instance runs on one
            live node at a time, messages reach it from any node, and the
            instances of a node that dies or freezes move to the others.

    Raises:
        JournalLocked: another system has the journal open.
    """
    system = ActorSystem(
        journal, processes, random,
        passivate_after=passivate_after, max_sync_steps=max_sync_steps,
        max_payload=max_payload, now=now,
    )  # fmt: skip
    if node is not None:
        journal.set_node(node)
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
                journal.on_mail(system.nodes.mail_noticed)
                nursery.start_soon(
                    system.outages.keep_running, system._take_over, "the takeover scan",
                    name="actors takeover",
                )  # fmt: skip
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


def _row_timers_log(r: Any, iid: bytes) -> tuple[Any, Any, Any]:
    row = r.instance(iid)
    if row is None:
        return None, [], {}
    return row, r.timers(iid), r.log(iid, row.record.get("run", 0))
