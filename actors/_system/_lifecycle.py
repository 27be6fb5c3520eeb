"""Starting, cancelling and restarting instances, in memory or on disk, here or on
another node: the internals behind `ActorSystem.cancel` and supervision's
restarts.

Invariant (see `Lifecycle.cancel_iid`): a cancel wins over a restart.
`Lifecycle` is a part of `ActorSystem`.

A fresh start (`Lifecycle.start`): the usual start, of an address never
used, made with no read before its commit and, where a claim is a round
trip, no claim after it.

Read nothing first: the commit checks what the read would have. Its
``require_absent`` fails (``"exists"``) if an instance is there, and the
expectation that the address's floor row is absent (version 0; see
`_transactions.start_txn`'s ``fresh``) fails (``"state"``) if a cleanup
left one, so a start that commits is the first incarnation, as one that
read (None, 0) would make; on a failure (`FRESH_REFUSED`) the start reads
and starts as usual, over what is there. Two starts of the address, here
or on two nodes, are kept apart as any two are: the journal checks both
conditions at commit, under the lock of the address (on PostgreSQL: the
advisory lock every start and cleanup takes before its row locks, see
`_SQL.lock_starts`, then the floor key's lock), so one commits and the
other fails, writing nothing.

Claim nothing after: `Txn.claim_created` makes the committing node the
owner at a new epoch in the same commit, drawn as `Journal.claim` draws one
(epochs never repeat), so a write fenced with it is refused once another
node claims the instance, as after any claim. A node claims only under its
lease: a fresh start is made only while the lease holds, and uses the epoch
only if the same term holds after the commit (else it claims as usual,
which waits for the lease).

On a journal that reads at once (LMDB, memory) the read is no round trip,
but it is a read transaction in the trio thread, whose every page access
lets the writer thread take the GIL: the commit checks what the read would
have, in the writer, and the claim after it is free (`Journal.claim` gives
0 at once, so the start takes 0 without asking). Only with "sync"
durability there: an "async" journal acknowledges a start that read once
it is queued, and this one would wait for its commit (`Txn.must_wait`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

import trio

from storage import LIVE_STATUSES, InstanceRecord, Journal, Txn, decode, encode, instance_id
from storage.errors import Conflict, JournalUnavailable

from .._features import _restarts, _supervision as _sup
from .._kernel import _guard, _tracing, _transactions
from .._kernel._effects import StartGate
from .._kernel._handles import Handle
from .._kernel._log import LogEntry, children_named, read_state
from .._kernel._process import ProcessDef
from .._kernel._values import Signal
from ..errors import AlreadyStarted, InvalidArguments
from ._deciding import Deciding
from ._disk_cancel import cancel_on_disk
from ._status_watch import state_of

if TYPE_CHECKING:
    from .._actor._instance import Actor
    from .._kernel._hooks import After
    from .._kernel._interfaces import SystemAPI
    from ._registry import Registry
    from ._status_watch import Statuses

    Send = Callable[[bytes, str, Signal, Any], Awaitable[None]]
    EndedOnDisk = Callable[[SystemAPI, Txn, str, dict[int, LogEntry], Iterable[Any]], list[After]]

__all__ = ["FRESH_REFUSED", "Lifecycle"]

# `Conflict.reason`s of a fresh start (see the module docstring) that found
# something at its address: an instance, or a cleanup's floor ("state").
FRESH_REFUSED = _transactions.START_RACED | {"state"}


class Lifecycle:
    """Starts, cancels and restarts: a part of `ActorSystem` (see the module docstring),
    handed the parts it uses and the calls it makes of others (see `_facade`)."""

    def __init__(
        self,
        system: SystemAPI,
        journal: Journal,
        registry: Registry,
        statuses: Statuses,
        *,
        send_iid: Send,
        send_system: Send,
        choose: Callable[[object, int], StartGate | None],
        claimed: Callable[[bytes, int | None], None],
        ended_on_disk: EndedOnDisk,
        epoch_now: Callable[[], float],
        max_payload: int,
        tracing: bool,
    ) -> None:
        # (The system: what its handles, and the cancels and hooks it calls, are handed.)
        self.system, self.journal = system, journal
        self.registry, self.statuses = registry, statuses
        self.send_iid, self.send_system, self.choose = send_iid, send_system, choose
        self.claimed, self.ended_on_disk, self.epoch_now = claimed, ended_on_disk, epoch_now
        # `local`: whether the journal reads (and claims) at once: fixed by its class.
        self.max_payload, self.tracing, self.local = max_payload, tracing, journal.reads_at_once
        self.creating: dict[bytes, trio.Event] = {}  # starts deciding (see start)
        self.cancelling: dict[bytes, trio.Event] = {}  # see cancel_iid
        self.retrying: dict[bytes, Any] = {}  # the retries under way (see _retry.retry)

    async def cancel_iid(
        self, iid: bytes, address: str, reason: str, *, compensate: bool = False
    ) -> bool:
        # Invariant: a cancel wins over a restart. An actor told to cancel
        # while it crashes may still write its restart and leave memory
        # (the next run waits out a delay in Registry.activate_later, or is being
        # activated); so until an actor ends, whatever it left live on disk
        # is cancelled in turn, with activations of it held off meanwhile.
        registry = self.registry
        while True:
            actor = registry.live.get(iid)
            if actor is not None and not actor.done:
                actor.arrivals.cancel(reason, compensate=compensate)
                while not actor.done and registry.live.get(iid) is actor:
                    await self.statuses.event(iid).wait()
                if actor.done and actor.status not in LIVE_STATUSES:
                    return actor.status == "cancelled"
                continue  # it left memory still live (restarted): cancel that
            writing = self.cancelling.get(iid)
            if writing is not None:
                # Another cancel of it is being written: live when this one
                # came, it is cancelled once that one is through.
                await writing.wait()
                if self.statuses.snapshot(iid)[0] == "cancelled":
                    return True
                continue
            creating = self.creating.get(iid)
            if creating is not None:
                # A start of it here (or a retry, a fork) is deciding: its
                # actor runs with the claim that start makes, later than one
                # made here, so a cancel written on disk meanwhile would be
                # overwritten as it runs. Let it finish, then cancel what it
                # brought into memory.
                await creating.wait()
                continue
            landing = registry.landing.get(iid)
            if landing is not None:
                # An activation waits for what was in flight ("async"): let
                # it land, then cancel what it brings into memory.
                await landing.wait()
                continue
            if iid in registry.activating:
                # An activation is under way (a read or two): let it finish,
                # then cancel what it brings into memory.
                await registry.activating.wait_released(iid)
                continue
            registry.activating.add(iid)  # activate leaves it alone while this is written
            self.cancelling[iid] = writing = trio.Event()
            try:
                done = await cancel_on_disk(self.system, iid, address, reason, compensate)
            except BaseException:
                # Not cancelled (a full or lost journal): it stays live, and
                # mail routed to it meanwhile found its activation held off.
                registry.spawn_system_task(registry.activate_later, iid, 0.0)
                raise
            finally:
                del self.cancelling[iid]
                registry.activating.discard(iid)
                writing.set()
            if done is not None:
                return done
            if registry.closing:
                return False  # it compensates, and ends cancelled, after the next open
            registry.activate(iid)  # to run its compensations; it ends cancelled after them

    async def restart_iid(self, iid: bytes, address: str, reason: str) -> None:
        """Restart a live instance afresh (a sibling's crash under OneForAll/RestForOne)."""
        actor = self.registry.live.get(iid)
        if actor is not None and not actor.done:
            actor.arrivals.restart(reason)  # a cancel asked of it first wins
            return
        if iid in self.cancelling:
            return  # a cancel of it is being written: it wins
        row = await self.journal.read(lambda r: r.instance(iid))
        if row is None or row.status not in LIVE_STATUSES:
            return
        # Only its owner writes to it: this node, once it claims it (then
        # read again: what the last owner wrote), else the live node that
        # runs it, asked as a cancel is (see `cancel_remote`).
        epoch = await self.journal.claim(iid)
        if epoch is None:
            await self.send_system(iid, address, _sup.RESTART, {"reason": reason})
            return
        row, log, _, timers, _ = await self.journal.read(lambda r: read_state(r, iid))
        if row is None or row.status not in LIVE_STATUSES:
            return
        await _sup.cancel_children(self.system, children_named(log), f"{address} is restarting")
        restarts = _restarts.next_restarts(row.record, reason, self.epoch_now())
        txn = Txn()
        txn.require(iid, LIVE_STATUSES)
        if self.journal.shared:
            txn.fence(iid, epoch)
        _transactions.next_run(
            txn,
            iid,
            address=address,
            process=row.process,
            record=row.record.evolve(restarts=restarts, updated=self.epoch_now()),
            timers=[(timer.run, timer.seq) for timer in timers],
        )
        # What features owe at the end of the run (its mail: the next run's).
        answers = self.ended_on_disk(self.system, txn, "restarted", log, ())
        try:
            results = await self.journal.commit(txn)
        except Conflict:
            return
        for after in answers:
            after(results)
        self.statuses.changed(iid)
        self.registry.activate(iid)

    def start_public(
        self,
        proc: ProcessDef[..., Any] | str,
        params: tuple[Any, ...],
        input: dict[str, Any],
        if_exists: str,
        where: object,
        rank: int,
    ) -> Coroutine[Any, Any, tuple[Handle[Any], bool]]:
        """The body of `ActorSystem.start`: its arguments checked here, at
        once; returns the start to await (`start`), not a frame of its own
        above it, which each of the start's suspensions would resume.
        ``where`` and ``rank`` are what the start asked of a gate (its
        ``queue=`` and ``priority=``: see `GatesAPI`)."""
        if _guard.stepping.address is not None:  # (process code: refused, saying why)
            _guard.refuse("system.start()", "start children with ctx.call or ctx.spawn")
        if if_exists not in ("return", "error"):
            raise InvalidArguments(
                f"start(if_exists=...) takes 'return' or 'error', not {if_exists!r}"
            )
        gate = None  # (a start that asks for no gate asks nothing of their keeper)
        if where is not None or type(rank) is not int or rank:
            gate = self.choose(where, rank)
        registry = self.registry
        # (A registered definition is found at once; `definition` says why not.)
        definition = registry.procs.get(proc.template if isinstance(proc, ProcessDef) else proc)
        if definition is None:
            definition = registry.definition(proc)
        return self.start(definition, params, input, None, gate=gate, if_exists=if_exists)

    async def start(
        self,
        proc: ProcessDef[..., Any],
        params: tuple[Any, ...],
        input: dict[str, Any],
        message: tuple[Signal, Any] | None,
        *,
        parent: str | None = None,
        address: str | None = None,
        gate: StartGate | None = None,
        extra: Callable[[Txn], None] | None = None,
        if_exists: str = "return",
    ) -> tuple[Handle[Any], bool]:
        """Start ``proc`` at the address ``params`` give (or ``address``):
        the instance's handle, and whether this start made it (False: one is
        there, and with ``if_exists="error"`` `AlreadyStarted` is raised
        instead)."""
        address = proc.start_address(params, input, address)
        encoded_input = encode(input, what="input") if input else None  # refused before a read
        iid = instance_id(address)
        system, journal = self.system, self.journal
        creating, registry = self.creating, self.registry
        while True:
            actor = registry.live.get(iid)
            if actor is not None and actor.loaded and not actor.done:
                if message is not None:
                    await self.send_iid(iid, address, *message)
                handle = Handle._create(system, iid, address, actor.record.incarnation)
                return self._existing(handle, if_exists), False
            waiting = creating.get(iid)
            if waiting is None:
                break
            await waiting.wait()
        # `deciding(iid)` written out (the hot path pays no context manager):
        # Invariant: nothing yields from the check above to this hold, and
        # the hold goes (in the finally below) however the start ends.
        creating[iid] = done = trio.Event()
        try:
            # The first try reads nothing (a fresh start: see the module
            # docstring): one commit, which fails if there is anything. (Not where a read is
            # local and a commit need not be awaited: an "async" LMDB journal
            # acknowledges a start once it is queued, and a start that did
            # not read must learn whether its commit found the address free.)
            fresh = (
                gate is None and extra is None and (not self.local or journal.durability == "sync")
            )
            # (Only under the lease: see "A fresh start". A single owner's is 0.)
            term = (0 if journal.node is None else journal.lease_term()) if fresh else None
            fresh = term is not None
            row, floor, claimed = None, 0, None
            while True:  # once more each time another start (another node's) commits first
                if not fresh:
                    row, floor = await journal.read(lambda r: _transactions.read_for_start(r, iid))
                if row is not None and row.address != address:
                    raise InvalidArguments(
                        f"address {address!r} collides with {row.address!r} in the journal"
                    )
                if row is not None and row.status != "cancelled":
                    self.statuses.remember(iid, state_of(row))
                    if message is not None:
                        await self.send_iid(iid, address, *message)
                    handle = Handle._create(system, iid, address, row.record.incarnation)
                    return self._existing(handle, if_exists), False
                start = _transactions.start_txn(
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
                    # (Tracing off, the usual case, costs no call.)
                    trace=_tracing.traceparent(system) if self.tracing else None,
                    status="running" if gate is None else gate.status,
                    encoded_input=encoded_input,
                    index=bool(proc.listens),
                    fresh=fresh,
                )
                record = start.record
                if gate is not None:  # not in memory: what handles read
                    self.statuses.remember(iid, (gate.status, record))
                if extra is not None:  # what the caller records with the start (a schedule's tick)
                    extra(start.txn)
                # A fresh start claims in its commit where a claim is a round
                # trip; on a journal that reads at once a claim is 0, at once.
                slot = start.txn.claim_created(iid) if fresh and not self.local else None
                try:
                    if gate is not None:  # it waits for a slot: the queue's pump starts it
                        await gate.commit(start.txn, iid, address)
                        return Handle._create(system, iid, address, record.incarnation), True
                    # (If written with its outcome unknown, it runs once the journal answers.)
                    start.txn.in_doubt = lambda _: registry.spawn_system_task(
                        registry.reload_when_back, iid
                    )
                    results = await journal.commit(start.txn)
                except Conflict as exc:
                    if exc.reason not in (FRESH_REFUSED if fresh else _transactions.START_RACED):
                        raise
                    fresh = False  # something is there: read it, as any other start does
                    continue
                if slot is not None and journal.lease_term() == term:
                    claimed = results[slot]  # (else the lease was lost meanwhile: claim it)
                elif self.local:
                    claimed = 0  # (`Journal.claim` on a journal that reads at once)
                break
            if claimed is not None:  # `run_started`, its claim made
                if journal.node is not None:  # (a single owner notes no lease terms: `_nodes`)
                    self.claimed(iid, claimed)
                actor = registry.run_created(iid, address, proc, record, claimed, "running")
            else:
                actor = await self.run_started(iid, address, proc, record)
            if actor is None:
                return Handle._create(system, iid, address, record.incarnation), True
            if start.message is not None and results:
                actor.arrivals.deliver(results[start.message.slot], decode(start.message.message))
            self.statuses.changed(iid)
            return Handle._create(system, iid, address, record.incarnation), True
        finally:
            # (`Deciding.__aexit__` for the one address.)
            del creating[iid]
            done.set()
            if iid in registry.routed_absent and iid not in registry.live:
                registry.activate(iid)

    @staticmethod
    def _existing(handle: Handle[Any], if_exists: str) -> Handle[Any]:
        """The handle of the instance a start found there; `AlreadyStarted`
        with ``if_exists="error"``."""
        if if_exists == "error":
            status = handle.status
            raise AlreadyStarted(
                f"an instance is already at {handle.id!r} ({status}); use its "
                "handle (system.get), cancel it to start a new incarnation, or start "
                "with if_exists='return'",
                address=handle.id,
                status=status,
            )
        return handle

    def deciding(self, *iids: bytes, activate: bool = True) -> Deciding:
        """One start of an address at a time on this system (a retry and a
        fork are starts too): ``async with lifecycle.deciding(iid):`` waits
        until none is deciding any of ``iids``, then holds them for the
        block. A cancel waits for the block to end (see `cancel_iid`). After
        it, with ``activate``, an instance that mail was noticed for
        meanwhile, and that is not in memory, is activated (see
        `Registry.activate_for_mail`). (`start` writes it out for its one
        address.)"""
        return Deciding(self.registry, self.creating, iids, activate)

    async def run_started(
        self,
        iid: bytes,
        address: str,
        proc: ProcessDef[..., Any],
        record: InstanceRecord,
        claimed: int | None = None,
    ) -> Actor | None:
        """Claim and run an instance whose start (or retry) was just
        committed; None where it runs elsewhere (another node took it over
        at once) or later (this node's lease is lost: once it is back).
        ``claimed``: the epoch its start's commit claimed it at, in the
        lease term that holds now (see "A fresh start"); no claim then."""
        if claimed is not None:
            epoch: int | None = claimed
        elif self.local:
            epoch = 0  # (`Journal.claim` on a journal that reads at once: 0, at once)
        else:
            try:
                # Shielded where a claim waits (a shared journal), so it runs
                # whatever its caller's cancellation (else a live instance
                # nobody runs until the next open).
                if not self.journal.shared:
                    epoch = await self.journal.claim(iid)  # (at once: this node owns everything)
                else:
                    with trio.CancelScope(shield=True):
                        epoch = await self.journal.claim(iid)
            except JournalUnavailable:  # it is written: it runs once the journal answers
                self.registry.spawn_system_task(self.registry.reload_when_back, iid)
                raise
        self.claimed(iid, epoch)
        if epoch is None:
            if self.journal.lease_term() is None:
                # No node took it: this one claims nothing while its lease
                # is lost, and the instance is its own.
                self.registry.spawn_system_task(self.registry.activate_when_leased, iid)
            return None
        return self.registry.run_created(iid, address, proc, record, epoch, "running")
