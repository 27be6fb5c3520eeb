"""Starting, cancelling and restarting instances, in memory or on disk, here or on
another node: the internals behind `ActorSystem.cancel` and supervision's
restarts.

Invariant (see `Lifecycle.cancel_iid`): a cancel wins over a restart.
`Lifecycle` is a part of `ActorSystem`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from storage import (
    LIVE_STATUSES,
    MAX_ADDRESS_BYTES,
    InstanceRecord,
    Txn,
    encode,
    instance_id,
)
from storage.errors import Conflict, JournalUnavailable

from .._features import _restarts, _supervision as _sup
from .._features._sending import commit_through
from .._kernel import _message_txns, _tracing, _transactions
from .._kernel._checks import check_text
from .._kernel._effects import StartGate
from .._kernel._handles import Handle
from .._kernel._log import children_named, read_state
from .._kernel._process import ProcessDef
from .._kernel._values import Signal
from ..errors import AlreadyStarted, InvalidArguments, LimitExceeded
from ._deciding import Deciding
from ._disk_cancel import cancel_on_disk
from ._fresh_start import FRESH_REFUSED, fresh_start
from ._status_watch import state_of

if TYPE_CHECKING:
    from .._features._queue_state import Queue
    from .._kernel._interfaces import ActorAPI, SystemAPI

__all__ = ["Lifecycle"]


class Lifecycle:
    """Starts, cancels and restarts: a part of `ActorSystem` (see the module docstring)."""

    def __init__(self, system: SystemAPI) -> None:
        self.system = system
        self.journal = system.journal
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
        registry = self.system.registry
        while True:
            actor = registry.live.get(iid)
            if actor is not None and not actor.done:
                actor.arrivals.cancel(reason, compensate=compensate)
                while not actor.done and registry.live.get(iid) is actor:
                    await self.system.statuses.event(iid).wait()
                if actor.done and actor.status not in LIVE_STATUSES:
                    return actor.status == "cancelled"
                continue  # it left memory still live (restarted): cancel that
            writing = self.cancelling.get(iid)
            if writing is not None:
                # Another cancel of it is being written: live when this one
                # came, it is cancelled once that one is through.
                await writing.wait()
                if self.system.statuses.snapshot(iid)[0] == "cancelled":
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
        actor = self.system.registry.live.get(iid)
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
            await self.system.router.send_system(iid, address, _sup.RESTART, {"reason": reason})
            return
        row, log, _, timers, _ = await self.journal.read(lambda r: read_state(r, iid))
        if row is None or row.status not in LIVE_STATUSES:
            return
        await _sup.cancel_children(self.system, children_named(log), f"{address} is restarting")
        restarts = _restarts.next_restarts(row.record, reason, self.system.epoch_now())
        txn = Txn()
        txn.require(iid, LIVE_STATUSES)
        if self.journal.shared:
            txn.fence(iid, epoch)
        _transactions.next_run(
            txn,
            iid,
            address=address,
            process=row.process,
            record=row.record.evolve(restarts=restarts, updated=self.system.epoch_now()),
            timers=[(timer.run, timer.seq) for timer in timers],
        )
        # What features owe at the end of the run (its mail: the next run's).
        answers = self.system.wiring.ended_on_disk(self.system, txn, "restarted", log, ())
        try:
            results = await self.journal.commit(txn)
        except Conflict:
            return
        for after in answers:
            after(results)
        self.system.statuses.changed(iid)
        self.system.registry.activate(iid)

    async def start_public(
        self,
        proc: ProcessDef[..., Any] | str,
        params: tuple[Any, ...],
        input: dict[str, Any],
        if_exists: str,
        queue: Queue | str | None,
        priority: int,
    ) -> Handle[Any]:
        """The body of `ActorSystem.start` (its arguments checked here)."""
        if if_exists not in ("return", "error"):
            raise InvalidArguments(
                f"start(if_exists=...) takes 'return' or 'error', not {if_exists!r}"
            )
        queued = None  # (a start without a queue= or priority= asks nothing of queues)
        if queue is not None or type(priority) is not int or priority:
            queued = self.system.gates.choose(queue, priority)
        definition = self.system.registry.definition(proc)
        handle, created = await self.start(definition, params, input, None, queued=queued)
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

    async def start(
        self,
        proc: ProcessDef[..., Any],
        params: tuple[Any, ...],
        input: dict[str, Any],
        message: tuple[Signal, Any] | None,
        *,
        parent: str | None = None,
        address: str | None = None,
        queued: StartGate | None = None,
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
        registry = self.system.registry
        while True:
            actor = registry.live.get(iid)
            if actor is not None and actor.loaded and not actor.done:
                if message is not None:
                    await self.system.router.send_iid(iid, address, *message)
                return Handle._create(self.system, iid, address, actor.record.incarnation), False
            waiting = self.creating.get(iid)
            if waiting is None:
                break
            await waiting.wait()
        async with self.deciding(iid):
            # The first try reads nothing (see `fresh_start`): one commit,
            # which fails if there is anything. (Not where a read is local
            # and a commit need not be awaited: an "async" LMDB journal
            # acknowledges a start once it is queued, and a start that did
            # not read must learn whether its commit found the address free.)
            fresh = (
                queued is None
                and extra is None
                and (not self.journal.reads_at_once or self.journal.durability == "sync")
            )
            term = self.journal.lease_term() if fresh else None
            fresh = term is not None  # (only under the lease: see fresh_start)
            row, floor, claimed = None, 0, None
            while True:  # once more each time another start (another node's) commits first
                if not fresh:
                    row, floor = await self.journal.read(
                        lambda r: _transactions.read_for_start(r, iid)
                    )
                if row is not None and row.address != address:
                    raise InvalidArguments(
                        f"address {address!r} collides with {row.address!r} in the journal"
                    )
                if row is not None and row.status != "cancelled":
                    self.system.statuses.remember(iid, state_of(row))
                    if message is not None:
                        await self.system.router.send_iid(iid, address, *message)
                    return Handle._create(self.system, iid, address, row.record.incarnation), False
                start = _transactions.start_txn(
                    iid,
                    address=address,
                    process=proc.template,
                    params=params,
                    input=input,
                    parent=parent,
                    previous=row,  # a cancelled one starts afresh
                    floor=floor,
                    now=self.system.epoch_now(),
                    max_payload=self.system.max_payload,
                    message=None if message is None else (message[0].name, message[1]),
                    trace=_tracing.traceparent(self.system),
                    status="running" if queued is None else queued.status,
                    encoded_input=encoded_input,
                    index=bool(proc.listens),
                )
                record = start.record
                if queued is not None:  # not in memory: what handles read
                    self.system.statuses.remember(iid, (queued.status, record))
                if extra is not None:  # what the caller records with the start (a schedule's tick)
                    extra(start.txn)
                slot = fresh_start(start.txn, iid, self.journal) if fresh else None
                try:
                    if queued is not None:  # it waits for a slot: the queue's pump starts it
                        await queued.commit(start.txn, iid, address)
                        return Handle._create(self.system, iid, address, record.incarnation), True
                    # (If written with its outcome unknown, it runs once the journal answers.)
                    results = await commit_through(
                        self.journal,
                        start.txn,
                        lambda _: registry.spawn_system_task(registry.reload_when_back, iid),
                    )
                except Conflict as exc:
                    if exc.reason not in (FRESH_REFUSED if fresh else _transactions.START_RACED):
                        raise
                    fresh = False  # something is there: read it, as any other start does
                    continue
                if slot is not None and self.journal.lease_term() == term:
                    claimed = results[slot]  # (else the lease was lost meanwhile: claim it)
                break
            actor = await self.run_started(iid, address, proc, record, claimed)
            if actor is None:
                return Handle._create(self.system, iid, address, record.incarnation), True
            if start.message is not None and results:
                actor.arrivals.deliver(
                    results[start.message.slot], _message_txns.unpack_message(start.message.message)
                )
            self.system.statuses.changed(iid)
            return Handle._create(self.system, iid, address, record.incarnation), True

    def deciding(self, *iids: bytes, activate: bool = True) -> Deciding:
        """One start of an address at a time on this system (a retry and a
        fork are starts too): ``async with lifecycle.deciding(iid):`` waits
        until none is deciding any of ``iids``, then holds them for the
        block. A cancel waits for the block to end (see `cancel_iid`). After
        it, with ``activate``, an instance that mail was noticed for
        meanwhile, and that is not in memory, is activated (see
        `Registry.activate_for_mail`)."""
        return Deciding(self.system, self.creating, iids, activate)

    async def run_started(
        self,
        iid: bytes,
        address: str,
        proc: ProcessDef[..., Any],
        record: InstanceRecord,
        claimed: int | None = None,
    ) -> ActorAPI | None:
        """Claim and run an instance whose start (or retry) was just
        committed; None where it runs elsewhere (another node took it over
        at once) or later (this node's lease is lost: once it is back).
        ``claimed``: the epoch its start's commit claimed it at, in the
        lease term that holds now (see `fresh_start`); no claim then."""
        if claimed is not None:
            epoch: int | None = claimed
        else:
            try:
                epoch = await self._claim_written(iid)
            except JournalUnavailable:  # it is written: it runs once the journal answers
                self.system.registry.spawn_system_task(self.system.registry.reload_when_back, iid)
                raise
        self.system.nodes.claimed(iid, epoch)
        if epoch is None:
            if self.journal.lease_term() is None:
                # No node took it: this one claims nothing while its lease
                # is lost, and the instance is its own.
                self.system.registry.spawn_system_task(
                    self.system.registry.activate_when_leased, iid
                )
            return None
        return self.system.registry.run_created(iid, address, proc, record, epoch)

    async def _claim_written(self, iid: bytes) -> int | None:
        """Claim ``iid``, whose start is written: shielded where a claim
        waits (a shared journal), so it runs whatever its caller's
        cancellation (else a live instance nobody runs until the next open)."""
        if not self.journal.shared:
            return await self.journal.claim(iid)  # (at once: this node owns everything)
        with trio.CancelScope(shield=True):
            epoch = await self.journal.claim(iid)
        return epoch
