"""The `Registry`, a part of `ActorSystem`: the instances in memory
(``live``) and the process definitions that run them.

It brings instances into memory and out: activation, reloads after a lost
journal connection, the idle sweep (passivation), takeover on shared
journals, shutdown at close; and it runs the system's own tasks. Recovery
at open is in `_recovery`; instances that stall, lose a write or get stuck
come back through `_troubles.Stalls`; corrupt ones are marked by
`_troubles.Corruption`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Container, Iterable
from typing import TYPE_CHECKING, Any

import trio

from storage import (
    LIVE_STATUSES,
    InstanceRecord,
    InstanceRow,
    Journal,
    Parking,
)
from storage.errors import JournalCorrupt, JournalFull, JournalUnavailable

from .._actor._instance import Actor
from .._actor._runner import Runner
from .._kernel import _reports
from .._kernel._holds import Holds
from .._kernel._interfaces import ActorAPI
from .._kernel._log import LoadedState, LogCache, read_state
from .._kernel._process import ProcessDef
from ..errors import InvalidArguments, UnknownProcess
from . import _idle

if TYPE_CHECKING:
    from .._kernel._interfaces import SystemAPI
    from .._kernel._outages import JournalWatch
    from ._nodes import NodeView
    from ._status_watch import Statuses

log = logging.getLogger("actors")

RELOAD_AFTER = 0.1  # seconds before an instance that lost the journal is loaded again
YIELD_EVERY = 256  # items a long loop handles between schedule points
LEASE_LOOK = 0.1  # seconds between looks at a lost lease (see activate_when_leased)


class Registry:
    """The instances in memory, and the processes that run them: a part of
    `ActorSystem` (see the module docstring)."""

    def __init__(
        self,
        system: SystemAPI,
        processes: Iterable[ProcessDef[..., Any]],
        journal: Journal,
        outages: JournalWatch,
        passivate_after: float,
    ) -> None:
        self.system = system  # (handed to the actors and the runner it makes)
        self.journal, self.outages, self.passivate_after = journal, outages, passivate_after
        self.procs: dict[str, ProcessDef[..., Any]] = {}
        for proc in processes:
            if not isinstance(proc, ProcessDef):
                raise InvalidArguments(
                    f"processes=[...] takes definitions made with @actors.process, got {proc!r}"
                )
            if proc.template in self.procs and self.procs[proc.template] is not proc:
                raise InvalidArguments(
                    f"two process definitions share the template {proc.template!r}; "
                    "a template names one definition (keep it when the code changes)"
                )
            self.procs[proc.template] = proc
        self.live: dict[bytes, Actor] = {}
        self.activating = Holds()  # see activate, Lifecycle.cancel_iid
        # Activations waiting for what was in flight ("async"; see activate).
        self.landing: dict[bytes, trio.Event] = {}
        # Instances mail was routed to while no actor was live (see run_created)
        self.routed_absent: set[bytes] = set()
        self.foreign: set[bytes] = set()  # instances of processes not registered here
        self.logs = LogCache()  # decoded logs: a wake decodes what was written since the last
        self._takeover_interval = 0.25 * journal.poll_scale
        self.nursery: trio.Nursery | None = None  # the system's (set by open_system)
        self.closing = False
        self._end_watchers: dict[bytes, Callable[[bytes, str], None]] = {}  # see watch_end
        # Where the idle sweep sleeps while nothing is parked: an instance
        # that parks wakes it (`Actor.suspend`; see sweep_idle).
        self.idle_sweep = Parking()
        self.runner = Runner(system)  # steps the instances waiting without a task
        # The parts made after it (see attach).
        self.statuses: Statuses
        self.nodes: NodeView
        self._record_corrupt: Callable[[bytes, JournalCorrupt], Awaitable[None]]
        self._creating: Container[bytes]

    def attach(
        self,
        statuses: Statuses,
        nodes: NodeView,
        record_corrupt: Callable[[bytes, JournalCorrupt], Awaitable[None]],
        creating: Container[bytes],
    ) -> None:
        """Hand the registry the parts it calls back, made after it (they read
        its live table): the statuses, the node view, `Corruption.record`, and
        the addresses whose start is deciding (`Lifecycle.creating`). Called
        once, as the system is made, before anything runs."""
        self.statuses, self.nodes = statuses, nodes
        self._record_corrupt, self._creating = record_corrupt, creating

    # -- activation ------------------------------------------------------------

    def run_created(
        self,
        iid: bytes,
        address: str,
        proc: ProcessDef[..., Any],
        record: InstanceRecord,
        epoch: int = 0,
        written: str | None = None,
    ) -> Actor:
        """Run an instance whose record was just written (with status
        ``written``, if known): nothing to read back, unless mail was routed.

        Between the commit of the record and this call, a sender can commit
        a message to the instance and find no actor to hand it to: it asks
        for an activation (`Router.route`). Invariant: such mail is never left
        unread. The activation may have run already, loading the instance
        from the journal: then its actor is the one, and it is returned.
        Else the new actor reads its state from the journal before it runs,
        as an activated one does (its mailbox holds the message).
        """
        existing = self.live.get(iid)
        if existing is not None:
            return existing
        # The journal takes its writes afresh (an earlier life of this id in
        # memory, lost with a write of its own, left its chain refused).
        self.journal.resume_chain(iid)
        loaded = iid not in self.routed_absent
        self.routed_absent.discard(iid)
        # The end kept of an earlier incarnation (a cancelled one this start
        # replaces) is no longer what the journal holds (see `Statuses.final_end`).
        self.statuses.drop_end(iid)
        actor = Actor(
            self.system, iid, address, proc, record, loaded=loaded, epoch=epoch, written=written
        )
        self.live[iid] = actor
        if self.journal.node is not None:  # (a single owner notes no lease terms: `_nodes`)
            self.nodes.running(iid)
        assert self.nursery is not None  # (`_run_actor`, written out: every start passes here)
        self.nursery.start_soon(actor.main, name=f"actor {address}")
        return actor

    def _run_actor(self, actor: Actor) -> None:
        # The actor's task runs its main alone (it handles a lost journal
        # itself): no frame of ours stays beneath every live instance.
        assert self.nursery is not None
        self.nursery.start_soon(actor.main, name=f"actor {actor.address}")

    def run_admitted(self, row: InstanceRow, epoch: int) -> None:
        """Run an instance a queue just turned from queued to running; ``row``
        is its record as read before the admission.

        Invariant: the instance runs from what the journal holds now, never
        from ``row``. Once the admission is committed the instance is
        running, so mail may activate it before this call, and it may even
        have ended: an actor made from ``row`` would run it a second time,
        wait for mail the first took, and write "suspended" over its end. A
        local journal reads it here, as any activation does (its mailbox
        holds what was sent while it waited); on another, its actor loads
        it, and runs nothing if it ended."""
        proc = self.procs.get(row.process)
        if (
            proc is None
            or row.iid in self.live
            or row.iid in self.activating
            or self.journal.reads_at_once
        ):
            self.activate(row.iid)
            return
        self.routed_absent.add(row.iid)  # its actor loads it: see run_created
        self.run_created(row.iid, row.address, proc, row.record, epoch)

    def activate_for_mail(self, iid: bytes) -> None:
        """Mail for ``iid`` was committed (here, or by another node that
        notified this one) and no actor here took it: bring the instance in.

        Invariant: such mail is never left unread. An instance being created
        here meanwhile reads its mailbox as it starts (`run_created`); one
        whose start on this system is still deciding is activated once that
        start is over (see `Lifecycle.start`), never claimed under it (a
        second claim here would fence out the actor the start makes)."""
        self.routed_absent.add(iid)
        if iid not in self._creating:
            self.activate(iid)

    def activate(self, iid: bytes) -> None:
        """Bring the instance into memory if it is on disk (replaying it)."""
        if iid in self.live or iid in self.activating or self.closing:
            return
        if self.journal.durability == "async":
            # Invariant: an instance is read only once what it wrote has
            # landed. With "async", an actor that ended or left memory was
            # told its last writes were done while they were still queued;
            # read before they land, it would run again from where it was
            # (a cancelled one would run on).
            if iid not in self.landing:
                self.landing[iid] = trio.Event()
                self.spawn_system_task(self._activate_landed, iid)
            return
        self._activate_now(iid)

    async def _activate_landed(self, iid: bytes) -> None:
        try:
            await self.journal.flush()
        except JournalUnavailable as exc:
            self.journal_lost(iid, exc)
            return
        except JournalFull:  # (its empty write did not fit: try again)
            self.spawn_system_task(self.activate_later, iid, 0.05)
            return
        finally:
            self.landing.pop(iid).set()
        if not (iid in self.live or iid in self.activating or self.closing):
            self._activate_now(iid)

    def _activate_now(self, iid: bytes) -> None:
        if self.journal.reads_at_once:
            # A local journal reads at once: one read here brings all the
            # instance's run needs, and its actor takes its place in the
            # live table (where mail for it arrives from then on) before
            # anything else runs; its task is the only one it gets. A record
            # that does not read goes the task's way, which marks it corrupt.
            try:
                with self.journal.reader() as r:
                    state = read_state(r, iid, live_only=True, logs=self.logs)
            except JournalCorrupt:
                pass
            except JournalUnavailable as exc:  # (an outage: never the caller's error)
                self.journal_lost(iid, exc)
                return
            else:
                row = state[0]
                proc = self._proc_to_run(iid, row)
                if proc is not None:
                    self.nodes.claimed(iid, 0)  # the base claim: 0, at once
                    self._run_actor(self._take_in(iid, row, proc, 0, state))
                return
        self.activating.add(iid)
        assert self.nursery is not None
        self.nursery.start_soon(self._activate_task, iid)

    def journal_lost(self, iid: bytes, exc: JournalUnavailable) -> None:
        """Loading or running the instance met a lost journal connection:
        load it again once the journal answers (from what was committed);
        never end the system for it."""
        log.warning(
            "instance %s lost its journal (%s); loading it again once the journal answers",
            iid.hex(),
            exc,
            extra={"actors_address": iid.hex()},
        )
        self.spawn_system_task(self.reload_when_back, iid)

    async def reload_when_back(self, iid: bytes) -> None:
        await trio.sleep(RELOAD_AFTER)
        await self.outages.back()
        await self.journal.flush()  # (a write still in flight lands first)
        self.statuses.changed(iid)  # its handles read what was committed
        self.activate(iid)

    async def _activate_task(self, iid: bytes) -> None:
        try:
            actor = await self._load_actor(iid)
        except JournalUnavailable as exc:
            self.journal_lost(iid, exc)
            return
        finally:
            self.activating.discard(iid)
        if actor is not None:
            self._run_actor(actor)

    async def _load_actor(self, iid: bytes) -> Actor | None:
        """The actor of a live instance on disk, claimed and in the live
        table; None if there is none to run here. Its actor reads the rest
        of its state itself, once in the live table (see `activate`)."""
        try:
            row = await self.journal.read(lambda r: r.instance(iid))
        except JournalCorrupt as exc:
            _reports.corrupt(iid.hex(), exc)
            await self._record_corrupt(iid, exc)
            return None
        proc = self._proc_to_run(iid, row)
        if proc is None:
            return None
        assert row is not None  # an absent row has no process to run
        epoch = await self.journal.claim(iid)
        self.nodes.claimed(iid, epoch)
        if epoch is None or iid in self.live:
            return None  # another live node owns it (and was told of its mail)
        return self._take_in(iid, row, proc, epoch, None)

    def _proc_to_run(self, iid: bytes, row: InstanceRow | None) -> ProcessDef[..., Any] | None:
        """The process to run the instance of ``row`` with; None if it is
        not live, not this system's, or already in memory."""
        if row is None or row.status not in LIVE_STATUSES:
            self.routed_absent.discard(iid)  # nothing to create meanwhile: it ended
            return None
        proc = self.procs.get(row.process)
        if proc is None:
            if iid not in self.foreign:  # said once (at open, for a local journal)
                self.foreign.add(iid)
                _reports.unregistered(row.address, row.process)
            return None
        if iid in self.live:
            return None  # a concurrent activation won: claiming again would fence it out
        return proc

    def _take_in(
        self,
        iid: bytes,
        row: InstanceRow,
        proc: ProcessDef[..., Any],
        epoch: int,
        state: LoadedState | None,
    ) -> Actor:
        """The actor of a claimed instance, in the live table; it loads from
        ``state`` if given (read where nothing ran since), else reads."""
        actor = Actor(self.system, iid, row.address, proc, None, epoch=epoch)
        self.live[iid] = actor
        if state is not None:
            actor.preload(state)
        self.routed_absent.discard(iid)  # it loads its mailbox (see run_created)
        self.statuses.drop_end(iid)  # a stalled instance's last state (see stalled)
        return actor

    def forget(self, actor: ActorAPI) -> None:
        """``actor`` left memory (if it is still the one in the live table)."""
        iid = actor.iid
        if self.live.get(iid) is actor:
            del self.live[iid]
            # A cancel waiting for this actor to leave memory looks again.
            self.statuses.activity_changed(iid)
            if self.journal.node is not None:  # (a single owner noted no term: `_nodes`)
                self.nodes.forgotten(iid)

    def ended(self, actor: ActorAPI, status: str) -> None:
        """``actor`` ended ``status``, durably: it leaves memory, and its end
        is kept for handle reads."""
        iid = actor.iid
        if self.live.get(iid) is actor:  # (`forget`, but for its wake-up: see below)
            del self.live[iid]
            if self.journal.node is not None:  # (a single owner noted no term: `_nodes`)
                self.nodes.forgotten(iid)
        hook = self._end_watchers.get(iid)
        if hook is not None:  # (a queue frees the slot it held)
            hook(iid, status)
        # Its exports as they are durable: one that left memory with a
        # publish that never landed (a full journal) shows the one before,
        # as its reload will. Invariant: whoever waits for it to leave
        # memory (a cancel) is woken by `keep_end`, as `forget` would have,
        # once its end is kept (no task runs in between).
        self.statuses.keep_end(iid, status, actor.writes.durable_record())

    def watch_end(self, iid: bytes, hook: Callable[[bytes, str], None] | None) -> None:
        """Call ``hook(iid, status)`` as ``iid``, if it ran here, ends (leaves
        memory with ``status``, durably), before its end is kept for handle
        reads; None: no more. One hook an instance: the queue it holds a
        slot of."""
        if hook is None:
            self._end_watchers.pop(iid, None)
        else:
            self._end_watchers[iid] = hook

    def timer_due(self, iid: bytes, now: float) -> None:
        actor = self.live.get(iid)
        if actor is None:
            self.activate(iid)
        elif actor.loaded and not actor.done:
            actor.arrivals.timers_due(now)

    # -- passivation, takeover and shutdown ---------------------------------------------------

    async def sweep_idle(self) -> None:
        """Passivate instances idle for ``passivate_after`` seconds (see `_idle`)."""
        await _idle.sweep(self.live, self.passivate_after, self.idle_sweep)

    async def take_over(self) -> None:
        """On a shared journal: run the instances of nodes that are gone,
        and let go of those this node may have lost with its lease."""
        while True:
            self.nodes.let_go_of_the_lost()
            for iid in await self.journal.orphans():
                if iid not in self.foreign:
                    self.activate(iid)
            await trio.sleep(self._takeover_interval)

    async def shutdown(self) -> None:
        # Closing is not a cancel: instances stay as they are in the journal
        # and resume on the next open. Submit what they have ridden so far.
        self.closing = True
        _reports.closing(self.journal, live=len(self.live))
        for actor in list(self.live.values()):
            if actor.loaded and not actor.done:
                try:
                    actor.writes.flush()
                except Exception:  # noqa: BLE001
                    log.exception("could not flush %r on close", actor.address)
        # Those parked without a task end here, as the others' tasks do
        # when the system's nursery is cancelled.
        self.runner.close()

    def definition(self, proc: ProcessDef[..., Any] | str) -> ProcessDef[..., Any]:
        """The registered definition of ``proc`` (or of that template);
        `UnknownProcess`, naming the registered ones, if there is none."""
        template = proc.template if isinstance(proc, ProcessDef) else proc
        found = self.procs.get(template)
        if found is None:
            known = ", ".join(sorted(self.procs)) or "none"
            raise UnknownProcess(
                f"process {template!r} is not registered with this system (registered: "
                f"{known}); pass it in open_system(journal, processes=[...])"
            )
        return found

    def spawn_system_task(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the background; a full or lost journal runs it
        again (backing off) rather than ending the system."""
        if self.nursery is not None and not self.closing:
            task = functools.partial(fn, *args)
            self.nursery.start_soon(
                self.outages.keep_running, task, f"the system task {fn.__name__}"
            )

    async def activate_when_leased(self, iid: bytes) -> None:
        """Bring the instance in once this node holds its lease again (an
        instance it made while the lease was lost is its own, and would
        otherwise wait for something to need it)."""
        # The journal's own thread renews the lease: no trio event tells of it.
        while self.journal.lease_term() is None:  # noqa: ASYNC110
            await trio.sleep(LEASE_LOOK)
        self.activate(iid)

    async def activate_later(self, iid: bytes, delay: float) -> None:
        await trio.sleep(delay)
        self.activate(iid)
