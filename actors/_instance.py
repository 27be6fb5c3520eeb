"""The actor: one live instance, coordinating its mailbox and its driver.

The `Mailbox` holds unread messages and the waits that take them; the
`Driver` steps the process coroutine against the run's log and hands the
actor what replay cannot answer (`Actor.begin`), which it runs live: waits
and timers here, steps, children, emits and publishes as tasks in the
actor's nursery, except for a leaf awaited alone, whose work `wait_for`
runs in the actor's own task (nothing races it, so no task need be spawned
and woken for it; see `start_task`). Those tasks report back through the actor's methods (`finish`,
`task_finished`, ...), never by writing its state.

Durability barrier: writes that are not visible outside the instance
(taking a message, logging a timer's start, status changes) collect in
``self.txn`` and ride on the next commit; they are deferred when the
instance suspends (they go with the next commit anyone makes, see
`_rides`), and awaited only at a barrier (before a step's side effect,
before completing). Replay is deterministic, so losing a ridden write in a
crash only makes replay take the same message again.

What arrives from outside (messages, due timers, stop requests) is in
`_arrivals`; how a run ends in `_ends`: both are bases of `Actor`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import trio

from storage import LIVE_STATUSES, InstanceRecord, Ticket, Txn
from storage.errors import (
    Conflict,
    JournalCorrupt,
    JournalFull,
    JournalUnavailable,
)

from . import (
    _asks,
    _effects as fx,
    _events,
    _joins,
    _saga,
    _sends,
    _steps,
    _streams,
    _supervision,
    _tracing,
)
from ._arrivals import Arrivals
from ._context import Context
from ._driver import Driver, Interrupt, Interrupted, Passivated
from ._effects import Effect
from ._ends import Ends
from ._handles import ChildHandle
from ._interfaces import SystemAPI
from ._log import LogEntry
from ._mailbox import Mailbox
from ._process import ProcessDef
from ._protocol import START_RACED
from ._sending import commit_through
from .errors import InvalidArguments, NonDeterminismError

E = TypeVar("E", bound=BaseException)

# The record of an actor that has not loaded its own yet (records are
# frozen: one serves them all).
_BLANK = InstanceRecord()

# What an activation reads of an instance, in one read: its row (None if
# there is none), its run's log, its unread mail, its timers, and the
# highest message seq its mailbox had.
LoadedState = tuple[Any, dict[int, LogEntry], list[Any], list[Any], int]


def read_state(r: Any, iid: bytes, *, live_only: bool = False) -> LoadedState:
    """All an instance's run needs from the journal (reader ``r``); with
    ``live_only``, only the row of one that is not running or suspended."""
    row = r.instance(iid)
    if row is None or (live_only and row.status not in LIVE_STATUSES):
        return row, {}, [], [], 0
    return (
        row,
        r.entries(iid, row.record.run),
        r.mailbox(iid),
        r.timers(iid),
        r.last_message_seq(iid),
    )


def _alone(exc: BaseException, kind: type[E]) -> E | None:
    """``exc`` if it is a ``kind``, or a group holding nothing else."""
    while isinstance(exc, BaseExceptionGroup):
        if exc.split(kind)[1] is not None:
            return None  # something else failed too: that must not be hidden
        exc = exc.exceptions[0]
    return exc if isinstance(exc, kind) else None


def _first(exc: BaseException, kind: type[E]) -> E:
    """The first ``kind`` among ``exc``'s leaves (there is one)."""
    if isinstance(exc, BaseExceptionGroup):
        found: BaseException | None = exc.split(kind)[0]
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        assert found is not None
        exc = found
    assert isinstance(exc, kind)
    return exc


def _lost_ownership(exc: BaseException) -> Conflict | None:
    if isinstance(exc, Conflict) and exc.reason == "epoch":
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _lost_ownership(inner)
            if found is not None:
                return found
    return None


class Actor(Ends, Arrivals):
    """A live instance. Created and owned by `ActorSystem`."""

    __slots__ = (
        "system",
        "journal",
        "iid",
        "address",
        "proc",
        "record",
        "run",
        "ctx",
        "driver",
        "mailbox",
        "timers",
        "live",
        "busy",
        "txn",
        "ticket",
        "published",
        "status",
        "persisted_status",
        "woken",
        "parked",
        "idle_since",
        "passivate_requested",
        "root",
        "loaded",
        "epoch",
        "fenced",
        "interrupt",
        "children",
        "escalate_to",
        "done",
        "nursery",
        "inline",
        "preloaded",
        "lost",
    )

    def __init__(
        self,
        system: SystemAPI,
        iid: bytes,
        address: str,
        proc: ProcessDef[..., Any],
        record: InstanceRecord | None,
        *,
        loaded: bool = False,
        epoch: int = 0,
    ) -> None:
        self.system = system
        self.journal = system.journal
        self.iid = iid
        self.address = address
        self.proc = proc
        self.record: InstanceRecord = record or _BLANK
        self.run = self.record.run
        self.ctx = Context(self)
        self.driver = Driver(self, address)
        self.timers: dict[int, fx.Timer] = {}  # live timers, by seq
        self.live: set[Effect[Any]] = set()  # live leaves
        self.busy = 0
        self.txn = Txn()
        self.ticket: Ticket | None = None
        # While a publish is in flight: the exports (version, value) last
        # made durable, which is what watchers see (`Statuses.snapshot`).
        self.published: tuple[int, Any] | None = None
        self.status = "running"
        self.persisted_status = "running" if record is None else None
        # Parking: the driver's task, while it waits for something to happen.
        self.woken = False
        self.parked: trio.lowlevel.Task | None = None
        self.idle_since = 0.0
        self.passivate_requested = False
        self.root: Effect[Any] | None = None
        # True once the record, log and mailbox are in memory (a fresh
        # instance was just written by whoever made it: nothing to read).
        self.loaded = loaded
        self.epoch = epoch  # ownership epoch every write is fenced with (shared journals)
        self.fenced = system.journal.shared
        self.mailbox = Mailbox(remember_taken=self.fenced)
        # ("cancel", reason, compensate) | ("restart", reason) | ("escalate", payload, mseq)
        self.interrupt: Interrupt | None = None
        self.children: dict[str, int] = {}  # this run's children: address -> seq
        # The live work of a leaf awaited alone, for wait_for to run in the
        # actor's own task (see start_task): (fn, effect, more args).
        self.inline: tuple[Callable[..., Awaitable[Any]], Effect[Any], tuple[Any, ...]] | None = (
            None
        )
        self.escalate_to: tuple[Any, ...] | None = None
        self.done = False
        self.preloaded: LoadedState | None = None
        self.lost: BaseException | None = None  # see write_lost

    # -- lifecycle -----------------------------------------------------------

    async def main(self) -> None:
        """The actor's task: load, replay, run until terminal or passivated."""
        run_span = None
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                if self.loaded or await self._load():
                    run_span = _tracing.begin_run(self)
                    # Driven here, not in a helper: one coroutine frame less
                    # per live instance (they add up over many suspended ones).
                    failure = self.record.failure
                    if failure is not None:  # resuming a compensation after a crash
                        end = self.record.failure_end or "failed"
                        await self._finish_compensation(failure, end)
                    else:
                        try:
                            coro = self.new_coroutine()
                        except InvalidArguments as exc:
                            # Stored params or input this code does not take:
                            # kept suspended (never failed or lost), as for
                            # changed code, until matching code is deployed.
                            await self.diverge(exc)
                            return
                        try:
                            await self.driver.run(coro, self)
                        except Passivated:
                            pass
                        except Interrupted:
                            await self._interrupted()
                if nursery.child_tasks:  # what it left running (abandoned steps, ...)
                    nursery.cancel_scope.cancel()
        except Exception as exc:
            if (
                isinstance(exc, BaseExceptionGroup)
                and _alone(exc, JournalFull) is None
                and exc.split((JournalFull, JournalUnavailable))[1] is None
            ):
                # Its own writes met a full journal and a lost one at once (a
                # task of its own, an ask, beside its run): load it again
                # once the journal answers, as for a lost journal alone.
                exc = _first(exc, JournalUnavailable)
            full = _alone(exc, JournalFull)
            if full is not None:
                # Our own write found no room: nothing of it was written, so
                # the journal still holds a state replay resumes from. Never
                # take the system down for it; it retries when there is room.
                self.lost = None  # (reloaded as one stalled)
                self.done = True
                self.status = "suspended"
                self.record = self.record.evolve(last_error=f"{type(full).__name__}: {full}")
                self.system.stalls.stalled(self, full)
                return
            unavailable = _alone(exc, JournalUnavailable)
            if unavailable is not None:
                # The journal's connection was lost (a database outage): load
                # the instance again once it answers, from what was committed.
                self.lost = None  # (reloaded as one whose journal was lost)
                self.system.registry.journal_lost(self.iid, unavailable)
                return
            lost = _lost_ownership(exc)
            if lost is None:
                raise
            # Another node took the instance over (this one froze past its
            # lease, say): the fence rejected our write; leave it to them.
            _events.taken_over(self.address, self.system.node, lost)
        finally:
            _tracing.end_run(run_span)
            self.done = True
            self.driver.unload()
            self.system.registry.forget(self)
            if self.lost is not None:  # what it ended or left memory with was lost
                self.system.stalls.reload_lost(self.iid)

    async def _load(self) -> bool:
        iid = self.iid
        # From what is committed now: the journal takes its writes again.
        self.journal.resume_chain(iid)
        state, self.preloaded = self.preloaded, None
        if state is None and self.record is not _BLANK and self.journal.durability == "async":
            # Made from a start just submitted (`Registry.run_created`), which an
            # "async" journal need not have written yet: read after it, or
            # the read finds the address as it was before (none, or the
            # cancelled incarnation it replaces) and the new one never runs.
            await self.journal.flush()
        if state is None:
            try:
                state = await self.journal.read(lambda r: read_state(r, iid))
            except JournalCorrupt as exc:
                self.status = "corrupt"
                await self.system.corruption.mark(self, exc)
                return False
        row, log, mail, timers, floor = state
        if row is None or row.status not in ("running", "suspended"):
            return False
        self.record = row.record
        self.run = run = row.record.run
        self.persisted_status = row.status
        if row.record.held is not None:
            # Stuck until now: a fresh try, on this code and in a system that
            # registers its process. Still stuck, its replay says so again.
            self.update_record(held=None, last_error=None)
        self.driver.load(log)
        _tracing.loaded(self, mail)
        for seq, name, payload in self.mailbox.reload(floor, mail):
            self._receive_system(seq, name, payload)
        for timer in timers:
            if timer.run != run:  # left behind by an earlier run
                self.txn.cancel_timer(iid, timer.run, timer.seq)
        self.loaded = True
        return True

    def preload(self, state: LoadedState) -> None:
        """Load from ``state`` (what `read_state` read) instead of reading:
        its activation read it, and nothing was written to the instance
        since (see `Registry._load_actor`)."""
        self.preloaded = state

    # -- the driver ------------------------------------------------------------

    def new_coroutine(self) -> Coroutine[Any, Any, Any]:
        """The process coroutine of the current run, not started yet.

        Raises:
            InvalidArguments: the run's params or input do not fit the
                function's parameters (calling an ``async def`` only binds
                them: no process code runs before this is known).
        """
        input = self.record.input or {}
        params = self.record.params
        try:
            return self.proc.fn(self.ctx, *params, **input)
        except TypeError as exc:
            raise InvalidArguments(
                f"the stored params {list(params)!r} and input {sorted(input)!r} of "
                f"{self.address!r} do not fit {self.proc.template!r}'s function ({exc}); "
                "deploy code that takes them, or cancel the instance"
            ) from exc

    async def check_history(self, log: dict[int, LogEntry]) -> NonDeterminismError | None:
        """Replay ``log`` (this run's) against the current code, running nothing."""
        self.driver.load(log)
        return await self.driver.check(self.new_coroutine())

    def wakeup(self) -> None:
        """Something happened that the driver may be waiting for."""
        self.woken = True
        task = self.parked
        if task is not None:
            self.parked = None
            trio.lowlevel.reschedule(task)

    def claimed_again(self, epoch: int) -> None:
        """This node claimed the live instance afresh (its lease had lapsed,
        and no other node took the instance): its writes are fenced with
        ``epoch`` from now on."""
        self.epoch = epoch

    def write_lost(self, exc: BaseException) -> None:
        """A write of this instance failed, one nobody may have waited for
        (see `Stalls.write_lost`): stop at the next suspension with ``exc``,
        as if an awaited write had failed (a busy one's next write fails
        with it too), and be loaded again from the journal."""
        self.lost = exc
        self.wakeup()

    def request_passivation(self) -> None:
        """The system's idle sweep: drop this instance if it is still idle."""
        task = self.parked
        if task is not None and not self.busy:
            self.passivate_requested = True
            self.parked = None
            trio.lowlevel.reschedule(task)

    def _unpark(self, _: Any) -> trio.lowlevel.Abort:
        self.parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def wait_for(self, effect: Effect[Any]) -> bool:
        """Wait until ``effect`` is done; passivate when the system says so."""
        self.root = effect
        if self.inline is not None:
            fn, leaf, args = self.inline
            # Invariant: only the effect being awaited leaves work here (it
            # was begun just now, and such work never completes it at once).
            assert leaf is effect
            self.inline = None
            if self.interrupt is None:
                # A stop request meanwhile cancels a step (see Arrivals), as
                # the driver would abandon one running in a task of its own;
                # the other kinds of work are a commit or two, seen through.
                await fn(self, leaf, *args)
            else:
                self.busy -= 1  # never run: the loop below stops for the request
        passivate_now = self.system.passivate_after <= 0
        while not effect.done:
            if self.lost is not None:
                raise self.lost  # memory is ahead of the journal: load again
            if self.interrupt is not None:
                raise Interrupted()
            if self.busy:
                self.status = "running"
            else:
                self._set_status("suspended")
                self.flush(defer=True)
                if passivate_now:
                    # Wake-ups before this point are accounted for by the loop's
                    # checks; _passivate stays only for one that comes meanwhile.
                    self.woken = False
                    await self._passivate()
                    continue
                self.idle_since = trio.current_time()
                self.system.registry.instance_idle()
            # Parked here, not in a helper (one coroutine frame less per
            # live instance), with one reschedule per wake-up: cheaper than
            # a trio.Event per suspension.
            if not self.woken:
                self.parked = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._unpark)
            self.woken = False
            if self.passivate_requested:
                self.passivate_requested = False
                if not effect.done and self.interrupt is None:
                    await self._passivate()
        self.root = None
        self._set_status("running")
        return True

    async def _passivate(self) -> None:
        # Invariant: an instance leaves memory only once everything it wrote
        # is durable, so whoever activates it next reads its latest state.
        if self.txn.ops or self.status != self.persisted_status:
            await self.barrier(durable=True)
        elif self.ticket is not None:
            ticket, self.ticket = self.ticket, None
            await ticket.wait()  # what flush just submitted
        if self.woken or self.busy or self.interrupt is not None:
            return  # something arrived meanwhile: stay
        self.system.registry.forget(self)
        raise Passivated()

    def _set_status(self, status: str) -> None:
        if self.status != status:
            self.status = status
            self.system.statuses.activity_changed(self.iid)

    # -- journal writes ------------------------------------------------------

    def _sync_status(self) -> None:
        if self.status != self.persisted_status and not self.done:
            self.txn.set_status(self.iid, self.status)
            self.persisted_status = self.status

    def flush(self, *, defer: bool = False) -> None:
        """Submit the ridden writes without waiting; with ``defer``, with
        the next transaction anyone submits (the instance suspends: see
        `_rides`)."""
        self._sync_status()
        if self.txn.ops:
            self.txn.chain = self.iid  # its writes commit in order (storage.Chain)
            if self.fenced:
                self.txn.fence(self.iid, self.epoch)
            if defer:
                self.ticket = self.journal.defer(self.txn)
                self.system.rides.deferred()
            else:
                self.ticket = self.journal.submit(self.txn)
            self.txn = Txn()

    async def barrier(self, txn: Txn | None = None, *, durable: bool | None = None) -> list[int]:
        """Commit the ridden writes (plus ``txn``'s) and wait for them;
        ``txn``'s results, by its own slots (all of them without one)."""
        prior = self.ticket
        if prior is not None and prior.done:
            # Invariant: nothing of this instance commits after a write of
            # it that failed (the journal keeps that: see storage.Chain and
            # LostChains): its error stops the instance here, and the
            # ridden writes go with it. (Cancelled meanwhile, the caller
            # leaves both as they are, for the next barrier.)
            try:
                await prior.wait()
            except trio.Cancelled:
                raise
            except BaseException:
                if self.ticket is prior:
                    self.ticket = None
                self.txn = Txn()
                raise
            if self.ticket is prior:
                self.ticket = None
        # Invariant: from taking the ridden writes to submitting them nothing
        # yields. Else another task of this actor (an ask's send, its end)
        # could take and submit its own in between, ahead of these: an end
        # committed before the writes of the run it ends, which then set
        # the instance running again.
        self._sync_status()
        pending = self.txn
        self.txn = Txn()
        # ``txn`` may fail its own preconditions (a child's start that lost a
        # race): the ridden writes are then kept for the next commit, never
        # dropped with it. Copied only for such a ``txn``.
        ridden = None
        if txn is not None and txn.requires:
            ridden = Txn()
            ridden.extend(pending)
        # The caller's results, by its own slots: the ridden writes go first.
        offset = 0 if txn is None else pending.extend(txn)
        pending.chain = self.iid  # its writes commit in order (storage.Chain)
        if self.fenced:
            pending.fence(self.iid, self.epoch)
        prior = self.ticket
        self.ticket = None
        try:
            # It may be written though its outcome is not learned: mail it
            # carried (a child's end notice, a ctx.send) is read again once
            # the journal answers (see commit_through).
            results = await commit_through(
                self.journal, pending, self._mail_in_doubt, durable=durable
            )
        except Conflict as exc:
            if ridden is not None and exc.reason in START_RACED:
                ridden.extend(self.txn)
                self.txn = ridden
            raise
        if prior is not None:
            await prior.wait()  # already done (submitted earlier); raises its error
        return results[offset:]

    def _mail_in_doubt(self, txn: Txn) -> None:
        for receiver in sorted(txn.receivers() - {self.iid}):
            self.system.router.mail_in_doubt(receiver)

    def ride_log(self, seq: int, entry: LogEntry) -> None:
        """Log ``entry`` at ``seq`` in this run; it rides on the next commit."""
        self.txn.put_log(self.iid, self.run, seq, entry.to_stored())

    def put_record(self, txn: Txn, status: str, **changes: Any) -> None:
        # The record changes only once its write is in ``txn``: a value that
        # does not encode leaves it as it was.
        record = self.record.evolve(updated=self.system.epoch_now(), **changes)
        txn.put_instance(
            self.iid,
            address=self.address,
            process=self.proc.template,
            status=status,
            record=record,
        )
        self.record = record
        self.persisted_status = status

    def publish(self, txn: Txn, exports: Any) -> int:
        """Put new exports in ``txn`` (and the record in memory, so every
        later write carries them); their version. Invariant: watchers see
        exports only once durable: until this write lands they see the ones
        before (`published`, read by `Statuses.snapshot`)."""
        record = self.record
        if self.published is None:
            self.published = (record.exports_version, record.exports)
        version = record.exports_version + 1
        self.put_record(txn, self.status, exports=exports, exports_version=version)
        return version

    def durable_record(self) -> InstanceRecord:
        """The record, with the exports as they are durable: while a publish
        is in flight (or after one failed), the last that landed."""
        if self.published is None:
            return self.record
        version, exports = self.published
        return self.record.evolve(exports=exports, exports_version=version)

    def published_durably(self, version: int, exports: Any) -> None:
        """The write of exports ``version`` landed: watchers may see them."""
        newest = self.record.exports_version
        self.published = None if newest == version else (version, exports)

    def update_record(self, **changes: Any) -> None:
        """Change the record; the write rides on the next commit."""
        self.put_record(self.txn, self.status, **changes)

    def become(self, status: str) -> None:
        """Take ``status`` in memory (its record was just put with it)."""
        self.status = status

    def escalate_on_end(self, parent: str, why: str, strategy: Any) -> None:
        """When this instance ends failed, tell ``parent`` to crash (see `_supervision`)."""
        self.escalate_to = (parent, why, strategy)

    # -- tasks: steps, children, emits -------------------------------------------

    def start_task(
        self, fn: Callable[..., Awaitable[Any]], effect: Effect[Any], *args: Any
    ) -> None:
        """Run ``fn(self, effect, *args)``, the live work of leaf ``effect``;
        it calls `task_finished` last. A leaf awaited alone (no parent:
        nothing races it) has it run by `wait_for` in the actor's own task,
        saving a task spawned and woken; any other in the actor's nursery.

        Invariant: ``busy`` counts these runs; the instance neither
        suspends nor passivates while one runs."""
        self.busy += 1
        if effect.parent is None:
            self.inline = (fn, effect, args)
        else:
            self.nursery.start_soon(fn, self, effect, *args)

    def task_finished(self) -> None:
        """A task of `start_task` is done (whatever its outcome)."""
        self.busy -= 1
        self.wakeup()

    def finish_step(self, step: fx.Step[Any], value: Any, entry: LogEntry) -> None:
        """A live step succeeded: register its compensation, then `finish` it."""
        self.register_compensation(step, value)
        self.finish(step, value, None, entry)

    def register_compensation(
        self, step: fx.Step[Any], result: Any, *, possibly_applied: bool = False
    ) -> None:
        """Record the compensation of a live step that has one (see `_saga`)."""
        if step.compensate is not None and step in self.live:
            _saga.register(self, step, result, possibly_applied=possibly_applied)

    # -- beginning effects ------------------------------------------------------

    def begin(self, effect: Effect[Any], started: dict[Effect[Any], LogEntry]) -> None:
        """Start the leaves of ``effect`` that replay left open."""
        if not isinstance(effect, fx.Composite):  # a lone leaf (most awaits): no race
            if not effect.done:
                self._start_live(effect, started.get(effect))
            return
        for leaf in effect.leaves():
            if effect.done:
                break
            if not leaf.done and not _under_done(leaf):
                self._start_live(leaf, started.pop(leaf, None))
        for leaf in started:
            # Started in an earlier activation, and now never run because the
            # race was decided without it: drop what it left behind.
            leaf.behaviour.drop(self, leaf)

    def add_child(self, address: str, seq: int) -> None:
        """Count ``address`` among this run's children (made by effect ``seq``)."""
        self.children.setdefault(address, seq)

    def child_handle(self, address: str) -> ChildHandle[Any]:
        """The handle a replayed spawn gives the process."""
        return ChildHandle._create(self.system, address)

    def _start_live(self, leaf: Effect[Any], entry: LogEntry | None) -> None:
        self.live.add(leaf)
        leaf.behaviour.start(self, leaf, entry)

    def finish(
        self,
        leaf: Effect[Any],
        value: Any = None,
        error: BaseException | None = None,
        entry: LogEntry | None = None,
    ) -> None:
        """Complete a live leaf, log ``entry`` (ridden), and settle parents."""
        if leaf not in self.live:
            return  # it lost a race and was abandoned
        self.live.discard(leaf)
        leaf.done = True
        leaf.value = value
        leaf.error = error
        if self.system.log_debug:
            _events.effect_done(self.address, leaf.seq, type(leaf).__name__, error)
        if entry is not None:
            self.txn.put_log(self.iid, self.run, leaf.seq, entry.to_stored())
        node: Effect[Any] = leaf
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

    def _abandon(self, leaf: Effect[Any]) -> None:
        """Stop a live leaf that lost a race (or whose join failed)."""
        self.live.discard(leaf)
        leaf.behaviour.abandon(self, leaf)


# The features whose effects run live: each module registers how its
# effects start and stop (`fx.runs_live`; waits and timers: `_arrivals`),
# so the actor names no kind of effect. Imported here, below the actor,
# so that every behaviour is registered before any actor runs.
FEATURES = (_asks, _joins, _sends, _steps, _streams, _supervision)


def _under_done(leaf: Effect[Any]) -> bool:
    parent = leaf.parent
    while parent is not None:
        if parent.done:
            return True
        parent = parent.parent
    return False
