"""The actor: one live instance, coordinating its mailbox and its driver.

The `Mailbox` holds unread messages and the waits that take them; the
`Driver` steps the process coroutine against the run's log and hands the
actor what replay cannot answer (`Actor.begin`), which it runs live: waits
and timers by its `Arrivals`, steps, children, emits and publishes as
tasks in the actor's nursery, except for a leaf awaited alone, whose work
`wait_for` runs in the actor's own task (nothing races it, so no task need
be spawned and woken for it; see `start_task`). Those tasks report back
through the actor's methods (`finish`, `task_finished`, ...), never by
writing its state.

The actor owns three parts, each made here with the actor and nothing
else: ``writes`` (`Writes`: the ridden writes and the durability
barrier), ``arrivals`` (`Arrivals`: messages, due timers and stop requests
from outside) and ``ends`` (`Ends`: how a run ends). The rest of the
runtime calls them through the actor (``actor.writes.barrier()``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import trio

from storage import InstanceRecord
from storage.errors import JournalCorrupt

from .._features import _saga
from .._kernel import _driver, _effects as fx, _reports, _tracing
from .._kernel._effects import Effect
from .._kernel._handles import ChildHandle
from .._kernel._hosts import Interrupt, Interrupted, Parked, Passivated
from .._kernel._interfaces import SystemAPI
from .._kernel._log import LoadedState, LogEntry, read_state
from .._kernel._mailbox import Mailbox
from .._kernel._process import ProcessDef
from ..errors import InvalidArguments, NonDeterminismError
from ._activation import BLANK, Activation
from ._arrivals import Arrivals
from ._context import Context
from ._ends import Ends
from ._live import Live, with_leaf, without_leaf
from ._runner import NO_TASK, may_park
from ._writes import Writes


class Actor(Activation):
    """A live instance. Created and owned by `ActorSystem`."""

    # (Beside those of `Activation`.)
    __slots__ = tuple(
        "address proc ctx live woken parked idle_since passivate_requested epoch fenced "  # noqa: SIM905 - a paragraph
        "children done inline lost".split()
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
        written: str | None = None,
    ) -> None:
        """``written``: the status ``record`` was just written with, if known
        (a start's "running"), so that its first commit need not write it."""
        self.system = system
        self.journal = system.journal
        self.iid = iid
        self.address = address
        self.proc = proc
        self.record: InstanceRecord = record or BLANK
        self.run = self.record.run
        self.ctx = Context(self)
        self.driver = _driver.Driver(self, address)
        self.live: Live = ()  # live leaves (see `_live`)
        self.busy = 0
        self.status = "running"
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
        self.mailbox: Mailbox[fx.Wait[Any]] = Mailbox(remember_taken=self.fenced)
        # ("cancel", reason, compensate) | ("restart", reason) | ("escalate", payload, mseq)
        self.interrupt: Interrupt | None = None
        self.children: dict[str, int] | None = None  # this run's: address -> seq (None: none)
        # The live work of a leaf awaited alone, for wait_for to run in the
        # actor's own task (see start_task): (fn, effect, more args).
        self.inline: tuple[Callable[..., Awaitable[Any]], Effect[Any], tuple[Any, ...]] | None = (
            None
        )
        self.done = False
        self.nursery: trio.Nursery | None = None  # its task's, while it has one
        # Parked without a task (see wait_for): its process coroutine, kept
        # here until `_runner.step` (or a task of its own) resumes it.
        self.held: Coroutine[Any, Any, Any] | None = None
        self.span: Any = None  # the run's trace span (see _tracing.begin_run)
        # Leaves begun while it had no task, for its next task to start.
        self.tasks_to_start: (
            list[tuple[Callable[..., Awaitable[Any]], Effect[Any], tuple[Any, ...]]] | None
        ) = None
        self.preloaded: LoadedState | None = None
        self.lost: BaseException | None = None  # see write_lost
        # Its parts (see the module docstring).
        self.writes = Writes(self, "running" if record is None else written)
        self.arrivals = Arrivals(self)
        self.ends = Ends(self)

    # -- lifecycle -----------------------------------------------------------

    def gone(self) -> None:
        """The instance left memory (ended, passivated, closed or broken)."""
        if self.span is not None:
            _tracing.end_run(self.span)
            self.span = None
        self.done = True
        self.driver.unload()
        if self.system.registry.live.get(self.iid) is self:  # (an end took it out already)
            self.system.registry.forget(self)
        if self.lost is not None:  # what it ended or left memory with was lost
            self.system.stalls.reload_lost(self.iid)

    async def _load(self) -> bool:
        iid = self.iid
        # From what is committed now: the journal takes its writes again.
        self.journal.resume_chain(iid)
        state, self.preloaded = self.preloaded, None
        if state is None and self.record is not BLANK and self.journal.durability == "async":
            # Made from a start just submitted (`Registry.run_created`), which an
            # "async" journal need not have written yet: read after it, or
            # the read finds the address as it was before (none, or the
            # cancelled incarnation it replaces) and the new one never runs.
            await self.journal.flush()
        if state is None:
            try:
                logs = self.system.registry.logs
                state = await self.journal.read(lambda r: read_state(r, iid, logs=logs))
            except JournalCorrupt as exc:
                self.status = "corrupt"
                await self.system.corruption.mark(self, exc)
                return False
        row, log, mail, timers, floor = state
        if row is None or row.status not in ("running", "suspended"):
            return False
        self.record = row.record
        self.run = run = row.record.run
        self.writes.persisted_status = row.status
        if row.record.held is not None:
            # Stuck until now: a fresh try, on this code and in a system that
            # registers its process. Still stuck, its replay says so again.
            self.writes.update_record(held=None, last_error=None)
        self.driver.load(log)
        _tracing.loaded(self, mail)
        for seq, name, payload in self.mailbox.reload(floor, mail):
            self.arrivals.receive_system(seq, name, payload)
        for timer in timers:
            if timer.run != run:  # left behind by an earlier run
                self.writes.txn.cancel_timer(iid, timer.run, timer.seq)
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

    async def replay_for_compensations(self) -> None:
        """Replay this run's log on the process code, running nothing, so
        that the ``compensate=`` callables it passes are known to the system
        (a compensation resumed after a restart, whose run is not replayed
        otherwise: see `_compensations`). Best effort: code that no longer
        replays teaches nothing, and the compensation it misses parks."""
        twin = Actor(self.system, self.iid, self.address, self.proc, self.record)
        try:
            await twin.check_history(dict(self.driver.log))
        except Exception:  # noqa: BLE001 - a replay that breaks only teaches less
            return

    def wakeup(self) -> None:
        """Something happened that the driver may be waiting for."""
        self.woken = True
        task = self.parked
        if task is not None:
            self.parked = None
            if task is NO_TASK:  # it waits without a task: the runner steps it
                self.system.registry.runner.ready(self)
            else:
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
            if task is NO_TASK:  # (as in `wakeup`)
                self.system.registry.runner.ready(self)
            else:
                trio.lowlevel.reschedule(task)

    def _unpark(self, _: Any) -> trio.lowlevel.Abort:
        self.parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def wait_for(self, effect: Effect[Any]) -> bool:
        """Wait until ``effect`` is done; passivate when the system says so."""
        self.root = effect
        if self.tasks_to_start and self.nursery is None:
            # Leaves to run in tasks, and this task has no nursery: it stops
            # here, holding the coroutine, and goes on from here in one
            # (`main`). (A task that may park never gets here with any.)
            raise Parked()
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
            elif passivate_now:
                self.set_status("suspended")
                self.writes.flush(defer=True)
                # Wake-ups before this point are accounted for by the loop's
                # checks; _passivate stays only for one that comes meanwhile.
                self.woken = False
                await self._passivate()
                continue
            else:
                self.suspend()
                if not self.woken and not self.passivate_requested and may_park(self):
                    # Its task ends here; the coroutine waits in `held` (see
                    # `_activation._drive`), and whatever completes the effect has the
                    # runner step it (`_runner.step`).
                    self.parked = NO_TASK
                    raise Parked()
            # Parked here, not in a helper, with one reschedule per wake-up:
            # cheaper than a trio.Event per suspension. (Asked to passivate
            # while parked without a task, it goes on to that at once.)
            if not self.woken and not self.passivate_requested:
                self.parked = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._unpark)
            self.woken = False
            if self.passivate_requested:
                self.passivate_requested = False
                if not effect.done and self.interrupt is None:
                    await self._passivate()
        self.root = None
        self.set_status("running")
        return True

    def suspend(self) -> None:
        """It waits with nothing running: say so, and submit its writes (with the next commit)."""
        self.set_status("suspended")
        self.writes.flush(defer=True)
        self.idle_since = self.system.trio_now()
        sweep = self.system.registry.idle_sweep
        if sweep.task is not None:  # it sleeps while nothing is idle: give it a deadline
            sweep.wake()

    async def _passivate(self) -> None:
        # Invariant: an instance leaves memory only once everything it wrote
        # is durable, so whoever activates it next reads its latest state.
        await self.writes.settle()
        if self.woken or self.busy or self.interrupt is not None:
            return  # something arrived meanwhile: stay
        self.system.registry.forget(self)
        raise Passivated()

    def set_status(self, status: str) -> None:
        if self.status != status:
            self.status = status
            statuses = self.system.statuses
            if self.iid in statuses.events:  # (else nobody waits to hear it)
                statuses.activity_changed(self.iid)

    @property
    def persisted_status(self) -> str | None:
        """The status the journal holds for the instance (None: not read)."""
        return self.writes.persisted_status

    def become(self, status: str) -> None:
        """Take ``status`` in memory (its record was just put with it)."""
        self.status = status

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
        elif self.nursery is None:
            # Begun by the runner, or in a task with no nursery yet: the
            # task that waits for it opens one and starts it (`main`).
            if self.tasks_to_start is None:
                self.tasks_to_start = []
            self.tasks_to_start.append((fn, effect, args))
        else:
            self.nursery.start_soon(fn, self, effect, *args)

    def task_finished(self) -> None:
        """A task of `start_task` is done (whatever its outcome)."""
        self.busy -= 1
        if not self.woken:  # (else nothing more to wake: see `Arrivals.deliver`)
            self.wakeup()

    def register_compensation(
        self, step: fx.Step[Any], result: Any, *, possibly_applied: bool = False
    ) -> None:
        """Record the compensation of a live step that has one (see `_saga`)."""
        if step.compensate is not None and step in self.live:
            _saga.register(self, step, result, possibly_applied=possibly_applied)

    # -- beginning effects ------------------------------------------------------

    def begin(self, effect: Effect[Any], started: dict[Effect[Any], LogEntry]) -> None:
        """Start the leaves of ``effect`` that replay left open."""
        composite = isinstance(effect, fx.Composite)  # (else a lone leaf, most awaits: no race)
        behaviours = self.system.wiring.behaviours
        for leaf in effect.leaves() if composite else (effect,):
            if effect.done:
                break
            if not leaf.done and not (composite and leaf.decided_above()):
                self.live = with_leaf(self.live, leaf)
                behaviours[type(leaf)].start(self, leaf, started.pop(leaf, None))
        for leaf in started:
            # Started in an earlier activation, and now never run because the
            # race was decided without it: drop what it left behind.
            self.system.wiring.behaviours[type(leaf)].drop(self, leaf)

    def add_child(self, address: str, seq: int) -> None:
        """Count ``address`` among this run's children (made by effect ``seq``)."""
        children = self.children = self.children or {}  # (made at the first: most have none)
        children.setdefault(address, seq)

    def child_handle(self, address: str) -> ChildHandle[Any]:
        """The handle a replayed spawn gives the process."""
        return ChildHandle._create(self.system, address)

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
        self.live = without_leaf(self.live, leaf)
        leaf.done = True
        leaf.value = value
        leaf.error = error
        if self.system.log_debug:
            _reports.effect_done(self.address, leaf.seq, type(leaf).__name__, error)
        if entry is not None:
            self.writes.txn.put_log(self.iid, self.run, leaf.seq, entry.to_stored())
        node: Effect[Any] = leaf
        parent = node.parent
        while parent is not None and not parent.done:
            if not parent.settle_from_children(node):
                break
            for other in parent.leaves():
                if other in self.live:
                    self.abandon(other)
            node = parent
            parent = node.parent
        root = self.root
        if root is not None and root.done:
            self.wakeup()

    def abandon(self, leaf: Effect[Any]) -> None:
        """Stop a live leaf that lost a race (or whose join failed)."""
        self.live = without_leaf(self.live, leaf)
        self.system.wiring.behaviours[type(leaf)].abandon(self, leaf)
