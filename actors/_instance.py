"""The actor: one live instance, its mailbox, and the driver that replays it.

The driver runs the process coroutine by hand (``coro.send``/``coro.throw``):
every ``await`` on an effect yields the effect up to the driver, which
answers it from the log (replay: no trio checkpoint at all, so replaying a
long log is a tight loop) or runs it live. Process code therefore never
awaits trio directly; if it does, the driver throws `ContextError` into it.

Durability barrier: writes that are not visible outside the instance
(taking a message, logging a timer's start, status changes) collect in
``self.txn`` and ride on the next commit; they are submitted when the
instance suspends, and awaited only at a barrier (before a step's side
effect, before completing). Replay is deterministic, so losing a ridden
write in a crash only makes replay take the same message again.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import trio

from storage import Ticket, Txn
from storage.errors import Conflict, EncodeError, JournalCorrupt, JournalFull

from . import _effects as fx
from . import _saga
from . import _streams
from . import _supervision as _sup
from ._supervision import CANCEL, ESCALATE
from ._effects import ERROR, HASH, KIND, NAME, VALUE, Effect
from ._records import describe_error, error_summary
from .errors import (
    ChildFailed,
    ContextError,
    NonDeterminismError,
    ProcessCancelled,
    StepFailed,
    StepTimeout,
)

if TYPE_CHECKING:
    from ._context import Context
    from ._process import ProcessDef
    from ._system import ActorSystem


log = logging.getLogger("actors")


def _journal_full(exc: BaseException) -> JournalFull | None:
    """``exc`` if it is a `JournalFull`, or a group holding nothing else."""
    while isinstance(exc, BaseExceptionGroup):
        if exc.split(JournalFull)[1] is not None:
            return None  # something else failed too: that must not be hidden
        exc = exc.exceptions[0]
    return exc if isinstance(exc, JournalFull) else None


def _lost_ownership(exc: BaseException) -> Conflict | None:
    if isinstance(exc, Conflict) and exc.reason == "epoch":
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _lost_ownership(inner)
            if found is not None:
                return found
    return None


class _Passivated(Exception):
    """The driver dropped the instance from memory; nothing more to do."""


class _Interrupted(Exception):
    """The instance was cancelled, restarted or escalated to from outside."""


def error_from_entry(entry: dict[str, Any]) -> BaseException:
    """Rebuild the exception a logged failure raised in the process."""
    error = entry[ERROR]
    summary = error.get("summary") or error_summary(error)
    raised = error.get("raise")
    if raised == "ChildFailed":
        return ChildFailed(summary, address=error.get("child", ""), error=error.get("cause"))
    if raised == "ProcessCancelled":
        return ProcessCancelled(summary, reason=error.get("reason", ""))
    cls = StepTimeout if error.get("timeout") else StepFailed
    return cls(summary, error=error)


class Actor:
    """A live instance. Created and owned by `ActorSystem`."""

    __slots__ = (
        "system", "journal", "iid", "address", "proc", "record", "run", "ctx", "log", "seq",
        "occurrences", "mail", "mail_order", "waits", "timers", "live", "busy", "txn",
        "ticket", "status", "persisted_status", "woken", "parked", "idle_since",
        "passivate_requested", "root", "loaded", "mail_floor", "epoch", "fenced", "interrupt",
        "children", "escalate_to", "done", "nursery", "taken",
    )  # fmt: skip

    def __init__(
        self,
        system: ActorSystem,
        iid: bytes,
        address: str,
        proc: ProcessDef,
        record: dict[str, Any] | None,
    ) -> None:
        self.system = system
        self.journal = system.journal
        self.iid = iid
        self.address = address
        self.proc = proc
        self.record: dict[str, Any] = record or {}
        self.run = self.record.get("run", 0)
        self.ctx: Context = system._make_context(self)
        self.log: dict[int, dict[str, Any]] = {}
        self.seq = 0
        self.occurrences: dict[str, int] = {}
        # Unread messages: seq -> (signal name, payload); mail_order is sorted.
        self.mail: dict[int, tuple[str, Any]] = {}
        self.mail_order: list[int] = []
        self.waits: list[fx.Wait] = []  # live waits, by seq
        self.timers: dict[int, fx.Timer] = {}  # live timers, by seq
        self.live: set[Effect] = set()  # live leaves
        self.busy = 0
        self.txn = Txn()
        self.ticket: Ticket | None = None
        self.status = "running"
        self.persisted_status = "running" if record is None else None
        # Parking: the driver's task, while it waits for something to happen.
        self.woken = False
        self.parked: trio.lowlevel.Task | None = None
        self.idle_since = 0.0
        self.passivate_requested = False
        self.root: Effect | None = None
        self.loaded = False
        self.mail_floor = 0  # see _load
        self.epoch = 0  # ownership epoch every write is fenced with (shared journals)
        self.fenced = system.journal.shared
        # On a shared journal, mail also arrives by re-reading the mailbox
        # (Journal.on_mail), which can still list a message this activation
        # took but has not committed yet: remember what it took.
        self.taken: set[int] | None = set() if self.fenced else None
        # ("cancel", reason) | ("restart", reason) | ("escalate", payload, mseq)
        self.interrupt: tuple[Any, ...] | None = None
        self.children: dict[str, int] = {}  # this run's children: address -> seq
        self.escalate_to: tuple[Any, ...] | None = None
        self.done = False

    # -- lifecycle -----------------------------------------------------------

    async def main(self) -> None:
        """The actor's task: load, replay, run until terminal or passivated."""
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                # A fresh instance was just written by whoever made it: no read.
                if self.loaded or await self._load():
                    await self._drive()
                nursery.cancel_scope.cancel()
        except Exception as exc:
            full = _journal_full(exc)
            if full is not None:
                # Our own write found no room: nothing of it was written, so
                # the journal still holds a state replay resumes from. Never
                # take the system down for it; it retries when there is room.
                self.done = True
                self.system._stalled(self, full)
                return
            lost = _lost_ownership(exc)
            if lost is None:
                raise
            # Another node took the instance over (this one froze past its
            # lease, say): the fence rejected our write; leave it to them.
            log.warning("%s: gave up %r: %s", self.system.node, self.address, lost)
        finally:
            self.done = True
            self.system._forget(self)

    async def _load(self) -> bool:
        iid, run = self.iid, self.run
        try:

            def read(r: Any) -> tuple[Any, ...]:
                row = r.instance(iid)
                if row is None:
                    return None, {}, [], [], 0
                run_now = row.record.get("run", 0)
                return (
                    row, r.log(iid, run_now), r.mailbox(iid), r.timers(iid),
                    r.last_message_seq(iid),
                )  # fmt: skip

            row, log, mail, timers, floor = await self.journal.read(read)
        except JournalCorrupt as exc:
            await self.system._mark_corrupt(self, exc)
            return False
        if row is None or row.status not in ("running", "suspended"):
            return False
        self.record = row.record
        self.run = run = row.record.get("run", 0)
        self.persisted_status = row.status
        self.log = log
        # Invariant: a message at or below the floor that is not unread now
        # was taken already, so a late hand-over from its sender is dropped.
        self.mail_floor = floor
        unread = {seq for seq, _ in mail}
        for seq in [s for s in self.mail if s <= floor and s not in unread]:
            del self.mail[seq]
        for seq, message in mail:
            if seq not in self.mail:
                self._receive_system(seq, message[0], message[1])
                self.mail[seq] = (message[0], message[1])
        self.mail_order = sorted(self.mail)
        for timer in timers:
            if timer.run != run:  # left behind by an earlier run
                self.txn.cancel_timer(iid, timer.run, timer.seq)
        self.loaded = True
        return True

    def deliver(self, seq: int, name: str, payload: Any) -> None:
        """A message was committed to this instance's mailbox."""
        if seq in self.mail or self.done or seq <= self.mail_floor:
            return
        if self.taken is not None and seq in self.taken:
            return
        self._receive_system(seq, name, payload)
        self.mail[seq] = (name, payload)
        if not self.mail_order or seq > self.mail_order[-1]:
            self.mail_order.append(seq)
        else:
            bisect.insort(self.mail_order, seq)
        if self.loaded:
            self._match_mail()
        self.wakeup()

    def _receive_system(self, seq: int, name: str, payload: Any) -> None:
        if name == ESCALATE.name and self.interrupt is None:
            self.interrupt = ("escalate", payload, seq)
            self.wakeup()
        elif name == CANCEL.name:
            self.txn.take_message(self.iid, seq)
            self.cancel(payload["reason"])

    def cancel(self, reason: str) -> None:
        """Ask the driver to cancel the instance at its next suspension."""
        if self.interrupt is None or self.interrupt[0] != "cancel":
            self.interrupt = ("cancel", reason)
        self.wakeup()

    def restart(self, reason: str) -> None:
        """Ask the driver to restart the instance afresh (a sibling crashed)."""
        if self.interrupt is None:
            self.interrupt = ("restart", reason)
        self.wakeup()

    # -- the driver ------------------------------------------------------------

    def _new_coroutine(self) -> Coroutine[Any, Any, Any]:
        input = self.record.get("input") or {}
        return self.proc.fn(self.ctx, *self.record.get("params", ()), **input)

    async def _drive(self) -> None:
        failure = self.record.get("failure")
        if failure is not None:  # resuming a compensation after a crash or resume
            await self._finish_compensation(failure, self.record.get("failure_end", "failed"))
            return
        coro = self._new_coroutine()
        send: Any = None
        throw: BaseException | None = None
        replayed = 0
        try:
            while True:
                if self.interrupt is not None:
                    raise _Interrupted()
                try:
                    if throw is not None:
                        effect = coro.throw(throw)
                    else:
                        effect = coro.send(send)
                except StopIteration as stop:
                    await self._complete(stop.value)
                    return
                except (_Interrupted, _Passivated):
                    raise
                except NonDeterminismError as exc:
                    await self._suspend_with_error(exc)
                    return
                except (trio.Cancelled, GeneratorExit, KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # noqa: BLE001 - any process error is recorded
                    await self._fail(exc)
                    return
                send = throw = None
                if type(effect) is fx.ContinueAsNew:
                    coro.close()
                    await self._continue_as_new(effect)
                    coro = self._new_coroutine()
                    continue
                if not isinstance(effect, Effect):
                    throw = ContextError(
                        f"process {self.address!r} awaited {effect!r}, which is not a ctx "
                        "effect; process code may only await ctx effects (use ctx.step for "
                        "I/O, ctx.sleep for time, ctx.first/all/settled for concurrency)"
                    )
                    continue
                if effect.done or effect.parent is not None:
                    throw = fx._reused(effect)
                    continue
                try:
                    self._begin(effect)
                except NonDeterminismError as exc:
                    await self._suspend_with_error(exc)
                    return
                if not effect.done:
                    await self._wait_for(effect)
                else:
                    replayed += 1
                    if replayed % 2000 == 0:  # a long replay still lets others run
                        await trio.sleep(0)
                if effect.error is not None:
                    throw = effect.error
                else:
                    send = effect.value
        except _Passivated:
            pass
        except _Interrupted:
            coro.close()
            await self._interrupted()
        finally:
            coro.close()

    def wakeup(self) -> None:
        """Something happened that the driver may be waiting for."""
        self.woken = True
        task = self.parked
        if task is not None:
            self.parked = None
            trio.lowlevel.reschedule(task)

    def request_passivation(self) -> None:
        """The system's idle sweep: drop this instance if it is still idle."""
        task = self.parked
        if task is not None and not self.busy:
            self.passivate_requested = True
            self.parked = None
            trio.lowlevel.reschedule(task)

    async def _park(self) -> None:
        # One reschedule per wake-up: cheaper than a trio.Event per suspension.
        if not self.woken:
            self.parked = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self.parked = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        self.woken = False

    async def _wait_for(self, effect: Effect) -> None:
        """Wait until ``effect`` is done; passivate when the system says so."""
        self.root = effect
        passivate_now = self.system.passivate_after <= 0
        while not effect.done:
            if self.interrupt is not None:
                raise _Interrupted()
            if self.busy:
                self.status = "running"
                await self._park()
                continue
            self._set_status("suspended")
            self._flush()
            if passivate_now:
                # Wake-ups before this point are accounted for by the loop's
                # checks; _passivate stays only for one that comes meanwhile.
                self.woken = False
                await self._passivate()
                continue
            self.idle_since = trio.current_time()
            self.system._instance_idle()
            await self._park()
            if self.passivate_requested:
                self.passivate_requested = False
                if not self.woken and not effect.done and self.interrupt is None:
                    await self._passivate()
        self.root = None
        self._set_status("running")

    async def _passivate(self) -> None:
        # Invariant: an instance leaves memory only once everything it wrote
        # is durable, so whoever activates it next reads its latest state.
        if self.txn.ops or self.status != self.persisted_status:
            await self._barrier(durable=True)
        elif self.ticket is not None:
            ticket, self.ticket = self.ticket, None
            await ticket.wait()  # what _flush just submitted
        if self.woken or self.busy or self.interrupt is not None:
            return  # something arrived meanwhile: stay
        self.system._forget(self)
        raise _Passivated()

    def _set_status(self, status: str) -> None:
        if self.status != status:
            self.status = status
            self.system._status_changed(self.iid)

    # -- journal writes ------------------------------------------------------

    def _sync_status(self) -> None:
        if self.status != self.persisted_status and not self.done:
            self.txn.set_status(self.iid, self.status)
            self.persisted_status = self.status

    def _flush(self) -> None:
        """Submit the ridden writes without waiting."""
        self._sync_status()
        if self.txn.ops:
            if self.fenced:
                self.txn.fence(self.iid, self.epoch)
            self.ticket = self.journal.submit(self.txn)
            self.txn = Txn()

    async def _barrier(self, txn: Txn | None = None, *, durable: bool | None = None) -> list[int]:
        """Commit the ridden writes (plus ``txn``'s) and wait for them."""
        self._sync_status()
        pending = self.txn
        self.txn = Txn()
        if txn is not None:
            pending.ops.extend(txn.ops)
            pending.requires.extend(txn.requires)
        if self.fenced:
            pending.fence(self.iid, self.epoch)
        prior = self.ticket
        self.ticket = None
        results = await self.journal.commit(pending, durable=durable)
        if prior is not None:
            await prior.wait()  # already done (submitted earlier); raises its error
        return results

    def put_record(self, txn: Txn, status: str, **changes: Any) -> None:
        self.record.update(changes)
        self.record["updated"] = self.system.epoch_now()
        txn.put_instance(
            self.iid, address=self.address, process=self.proc.template, status=status,
            record=self.record,
        )  # fmt: skip
        self.persisted_status = status

    # -- beginning effects ------------------------------------------------------

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def logged(self, effect: Effect) -> dict[str, Any] | None:
        """The log entry at the effect's position, checked against it."""
        entry = self.log.get(effect.seq)
        if entry is None:
            return None
        if entry.get(KIND) != effect.kind or entry.get(NAME) != effect.name or (
            entry.get(HASH) != effect.hash
        ):
            found = {KIND: entry.get(KIND), NAME: entry.get(NAME)}
            raise NonDeterminismError(
                f"instance {self.address!r} replayed a different effect at position "
                f"{effect.seq}: the log holds {_show(entry)}, the code asked for "
                f"{_show(effect.describe())}. The code changed in a way that does not "
                "match this instance's history: deploy code that makes the same effects "
                "in the same order (add new effects after the existing ones), or cancel "
                "the instance. It stays suspended until then.",
                address=self.address,
                position=effect.seq,
                expected=found,
                found={KIND: effect.kind, NAME: effect.name},
            )
        return entry

    def replay(self, effect: Effect) -> dict[Effect, dict[str, Any]]:
        """Give every leaf of ``effect`` its logged outcome, if it has one.

        Returns the leaves that have only a "started" record. Raises
        `NonDeterminismError` for a leaf that does not match its log entry.
        """
        started: dict[Effect, dict[str, Any]] = {}
        for leaf in effect.leaves():
            entry = self.logged(leaf)
            if entry is None:
                continue
            if leaf.kind in ("call", "spawn"):
                self.children.setdefault(leaf.name, leaf.seq)
            if VALUE in entry:
                leaf.done = True
                leaf.value = self._replayed_value(leaf, entry)
            elif ERROR in entry:
                leaf.done = True
                leaf.error = error_from_entry(entry)
            else:
                started[leaf] = entry
        if isinstance(effect, fx.Composite):
            _settle_tree(effect)
        return started

    def _begin(self, effect: Effect) -> None:
        started = self.replay(effect)
        for leaf in effect.leaves():
            if effect.done:
                break
            if not leaf.done and not _under_done(leaf):
                self._start_live(leaf, started.pop(leaf, None))
        for leaf in started:
            # Started in an earlier activation, and now never run because the
            # race was decided without it: drop what it left behind.
            if type(leaf) is fx.Timer:
                self.txn.cancel_timer(self.iid, self.run, leaf.seq)

    def _replayed_value(self, leaf: Effect, entry: dict[str, Any]) -> Any:
        value = entry[VALUE]
        if type(leaf) is fx.Wait and leaf.pair:
            return (leaf.matches(entry["s"]), value)
        if type(leaf) is fx.Spawn:
            from ._handles import ChildHandle

            return ChildHandle(self.system, value)
        return value

    def _start_live(self, leaf: Effect, entry: dict[str, Any] | None) -> None:
        self.live.add(leaf)
        kind = type(leaf)
        if kind is fx.Wait:
            bisect.insort(self.waits, leaf, key=_seq)
            self._match_mail()
        elif kind is fx.Timer:
            self._start_timer(leaf, entry)
        elif kind is fx.Step:
            from ._steps import run_step

            self.busy += 1
            self.nursery.start_soon(run_step, self, leaf, entry)
        elif kind is fx.Call or kind is fx.Spawn:
            _sup.start_child_effect(self, leaf, entry)
        else:  # Emit, Publish: the only other leaves
            _streams.start(self, leaf)

    def finish(
        self,
        leaf: Effect,
        value: Any = None,
        error: BaseException | None = None,
        entry: dict[str, Any] | None = None,
    ) -> None:
        """Complete a live leaf, log ``entry`` (ridden), and settle parents."""
        if leaf not in self.live:
            return  # it lost a race and was abandoned
        self.live.discard(leaf)
        leaf.done = True
        leaf.value = value
        leaf.error = error
        if entry is not None:
            self.txn.put_log(self.iid, self.run, leaf.seq, entry)
        node: Effect = leaf
        parent = node.parent
        while parent is not None and not parent.done:
            if not parent.settle_from_children(node):
                break
            for other in parent.leaves():
                if other in self.live:
                    self._abandon(other)
            node = parent
            parent = node.parent
        root = self.root
        if root is not None and root.done:
            self.wakeup()

    def _abandon(self, leaf: Effect) -> None:
        """Stop a live leaf that lost a race (or whose join failed)."""
        self.live.discard(leaf)
        kind = type(leaf)
        if kind is fx.Wait:
            self.waits.remove(leaf)  # it takes nothing
        elif kind is fx.Timer:
            self.timers.pop(leaf.seq, None)
            self.txn.cancel_timer(self.iid, self.run, leaf.seq)
        elif kind is fx.Step:
            if leaf.scope is not None:
                leaf.scope.cancel()
        elif kind is fx.Call or kind is fx.Spawn:
            _sup.abandon_child_effect(self, leaf)
        # An Emit or Publish that lost a race still completes its write.

    # -- mail and timers -----------------------------------------------------------

    def _match_mail(self) -> None:
        # Invariant: a message is in self.mail or in the log (taken), never
        # both; the oldest matching message goes to the lowest-numbered wait.
        if not self.waits or not self.mail:
            return
        for wait in list(self.waits):
            if wait not in self.live:
                continue
            for i, mseq in enumerate(self.mail_order):
                name, payload = self.mail[mseq]
                signal = wait.matches(name)
                if signal is None:
                    continue
                del self.mail[mseq]
                del self.mail_order[i]
                self.waits.remove(wait)
                self.txn.take_message(self.iid, mseq)
                if self.taken is not None:
                    self.taken.add(mseq)
                if type(wait) is fx.Call:
                    value, error, entry = _sup.end_outcome(wait, payload)
                    entry["m"] = mseq
                    self.finish(wait, value, error, entry)
                    break
                entry = wait.describe()
                entry[VALUE] = payload
                entry["m"] = mseq
                if wait.pair:
                    entry["s"] = name
                self.finish(wait, (signal, payload) if wait.pair else payload, None, entry)
                break
            if not self.mail:
                return

    def _start_timer(self, timer: fx.Timer, entry: dict[str, Any] | None) -> None:
        if entry is not None:
            due = entry["due"]
        else:
            due = timer.until if timer.until is not None else self.system.epoch_now() + (
                timer.delay or 0.0
            )
            started = timer.describe()
            started["due"] = due
            self.txn.put_log(self.iid, self.run, timer.seq, started)
            self.txn.add_timer(self.iid, self.run, timer.seq, due)
        timer.due = due
        self.timers[timer.seq] = timer
        if due <= self.system.epoch_now():
            self._fire(timer)
        else:
            self.system.timers.schedule(due, self.iid)

    def timers_due(self, now: float) -> None:
        """Fire every live timer due at epoch ``now`` (called by the timer service)."""
        for timer in [t for t in self.timers.values() if t.due is not None and t.due <= now]:
            self._fire(timer)

    def _fire(self, timer: fx.Timer) -> None:
        self.timers.pop(timer.seq, None)
        self.txn.cancel_timer(self.iid, self.run, timer.seq)
        entry = timer.describe()
        entry[VALUE] = None
        entry["due"] = timer.due
        self.finish(timer, None, None, entry)

    # -- ends -------------------------------------------------------------------

    def _check_log_consumed(self) -> None:
        extra = [seq for seq in self.log if seq > self.seq]
        if extra:
            entry = self.log[min(extra)]
            raise NonDeterminismError(
                f"instance {self.address!r} finished replaying at position {self.seq}, but "
                f"its log goes on with {_show(entry)} at position {min(extra)}: the code "
                "now skips effects its history made; deploy code that matches the "
                "history, or cancel the instance. It stays suspended until then.",
                address=self.address,
                position=min(extra),
                expected={KIND: entry.get(KIND), NAME: entry.get(NAME)},
                found=None,
            )

    async def _complete(self, value: Any) -> None:
        try:
            self._check_log_consumed()
        except NonDeterminismError as exc:
            await self._suspend_with_error(exc)
            return
        if await _sup.supervise_end(self, None):
            return  # a permanent instance: restarted
        txn = Txn()
        try:
            self.put_record(txn, "completed", result=value, last_error=None)
        except EncodeError as exc:
            self.record.pop("result", None)
            await self._fail(exc)
            return
        await self._end("completed", txn)

    async def _fail(self, exc: BaseException, txn: Txn | None = None) -> None:
        if await _sup.supervise_end(self, exc):
            return  # restarted instead
        error = describe_error(exc)
        if _saga.pending(self.record):
            if txn is not None:
                self.txn.ops.extend(txn.ops)
            await self._finish_compensation(error, "failed")
            return
        txn = txn or Txn()
        self.put_record(txn, "failed", error=error, last_error=None)
        await self._end("failed", txn)
        await _sup.escalate(self)

    async def _finish_compensation(self, failure: dict[str, Any], end: str) -> None:
        for leaf in list(self.live):
            self._abandon(leaf)
        outcome = await _saga.compensate(self, failure, end)
        if outcome == "compensation_stuck":
            self.done = True
            self.system._status_changed(self.iid)
            self.system._forget(self)
            return
        txn = Txn()
        if end == "failed":
            self.put_record(txn, "failed", error=failure, last_error=None, failure=None)
        else:
            self.put_record(txn, end, last_error=None, failure=None)
        await self._end(end, txn)
        if end == "failed":
            await _sup.escalate(self)

    async def _interrupted(self) -> None:
        assert self.interrupt is not None
        kind, detail = self.interrupt[0], self.interrupt[1]
        self.woken = False
        for leaf in list(self.live):
            if type(leaf) is fx.Step and leaf.compensate is not None and kind == "cancel":
                # Cancelled mid-step: it may have applied, so it is compensated too.
                _saga.register(self, leaf, None, possibly_applied=True)
            self._abandon(leaf)
        if kind == "restart":
            await _sup.restart_actor(self, detail, 0.0)
            return
        if kind == "escalate":
            txn = Txn()
            txn.take_message(self.iid, self.interrupt[2])
            await self._fail(_sup.escalation_error(detail), txn)
            return
        # Depth first: the children go before the parent records its own end.
        reason = f"parent {self.address} cancelled"
        # A cancel read at load (a CANCEL in the mailbox of a passivated
        # instance) comes before replay has named the children: the log does.
        children = {**_sup.children_in_log(self.log), **self.children}
        self.children = {}
        await _sup.cancel_children(self.system, children, reason)
        if self.proc.compensate_on_cancel and _saga.pending(self.record):
            self.record["reason"] = detail
            await self._finish_compensation(
                {"type": "actors.errors.ProcessCancelled", "message": detail}, "cancelled"
            )
            return
        txn = Txn()
        self.put_record(txn, "cancelled", reason=detail, last_error=None)
        await self._end("cancelled", txn)

    async def _end(self, status: str, txn: Txn) -> None:
        # Depth first, as a trio nursery: live children are cancelled before
        # this end is recorded, so whoever sees it sees no live descendants.
        # (A crash in between is finished at recovery: see _recover.)
        children, self.children = self.children, {}
        await _sup.cancel_children(self.system, children, f"parent {self.address} {status}")
        for timer in list(self.timers.values()):
            txn.cancel_timer(self.iid, self.run, timer.seq)
        self.timers.clear()
        notice = _sup.notify_parent(self.system, self.address, self.record, status, txn)
        results = await self._barrier(txn)
        self.status = status
        self.done = True
        self.system._status_changed(self.iid)
        self.system._ended(self, status)
        if notice is not None:
            self.system._route(notice[0], results[-1], notice[1])

    async def _suspend_with_error(self, exc: BaseException) -> None:
        """Keep the instance suspended with ``last_error`` (never failed or lost)."""
        txn = Txn()
        self.put_record(txn, "suspended", last_error=f"{type(exc).__name__}: {exc}")
        self.status = "suspended"
        await self._barrier(txn, durable=True)
        self.system._status_changed(self.iid)
        self.system._forget(self)

    async def _continue_as_new(self, effect: fx.ContinueAsNew) -> None:
        children, self.children = self.children, {}
        await _sup.cancel_children(self.system, children, "continued as new")
        txn = Txn()
        txn.drop_log(self.iid, self.run)
        for timer in list(self.timers.values()):
            txn.cancel_timer(self.iid, self.run, timer.seq)
        self.timers.clear()
        for leaf in list(self.live):
            self._abandon(leaf)
        self.run += 1
        self.put_record(txn, "running", run=self.run, input=effect.input, last_error=None)
        self.txn.ops.extend(txn.ops)
        self._flush()
        self.log = {}
        self.seq = 0
        self.occurrences = {}


def _seq(effect: Effect) -> int:
    return effect.seq


def _show(entry: dict[str, Any]) -> str:
    name = entry.get(NAME)
    return f"{entry.get(KIND)} {name!r}" if name else str(entry.get(KIND))


def _settle_tree(effect: fx.Composite) -> bool:
    for child in effect.children:
        if isinstance(child, fx.Composite) and not child.done:
            _settle_tree(child)
    return effect.settle_from_children()


def _under_done(leaf: Effect) -> bool:
    parent = leaf.parent
    while parent is not None:
        if parent.done:
            return True
        parent = parent.parent
    return False


