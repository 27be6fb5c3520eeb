"""Queues: start many instances without running more than a limit at once.

A `Queue` is registered with ``open_system(..., queues=[...])``. Starting an
instance with ``queue=`` stores it with the status ``"queued"`` and returns
its handle at once; a pump task per queue starts queued instances, in
priority then FIFO order, as slots free.

Everything a limit needs is in the journal, in state rows (`_queue_state`).

Invariant: an instance counts against its queue's limit from the
transaction that admits it until it is seen not live (completed, failed,
cancelled, parked). Holders are released lazily: a local end pokes the pump,
which reads the holder's status and drops it; holders of other nodes (or of
an earlier run of this one) are read at every round, and their end here
(after a takeover) pokes too. So a crash between an end and its release
holds a slot a little longer, never lets one more in.

On a shared journal a pump also looks again on its own, every
`POLL_SHARED` seconds while work waits and every `POLL_IDLE_SHARED`
seconds while none does: what other nodes do (their ends, the work a
node that died left queued) pokes nobody here.

A round skips the waiting instances of processes this system does not
register (another node may): they hold up nobody behind them.

A pump rides out a journal that refuses it for a while (full, its disk
full, its server away): it says so once, tries again with backoff
(`RETRY_FIRST` doubling to `RETRY_MAX` seconds; after a lost connection,
once the journal answers reads), and says when it admits again. Nothing
of a refused admission was written, but for `CommitOutcomeUnknown`: what
it chose is loaded again at the next round, and runs if it went through.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import attrs
import trio

from storage import LIVE_STATUSES, InstanceRow, Journal, Txn
from storage.errors import (
    CommitOutcomeUnknown,
    Conflict,
    JournalCorrupt,
    JournalFull,
    JournalUnavailable,
)

from .._kernel._outages import JournalWatch
from .._kernel._process import ProcessDef
from ._queue_state import (
    Entry,
    Queue,
    QueueInfo,
    check_priority,
    drop_rows_txn,
    find_queue,
    held_key,
    index_key,
    put_waiting,
    queue_info,
    read_round,
    registered,
    stale_entries,
)

__all__ = ["Queue", "QueueService", "QueuedStart"]

log = logging.getLogger("actors.queues")

POLL_SHARED = 0.2  # seconds between rounds on a shared journal while work waits,
POLL_IDLE_SHARED = 1.0  # and while none does (a node that dies leaves its queued work)
RETRY_AFTER_ERROR = 5.0  # seconds before a queue whose state did not read tries again
RETRY_FIRST = 0.1  # seconds before a pump the journal refused tries again: at first,
RETRY_MAX = 10.0  # and at most (doubling in between)


class QueueService:
    """The queues of one system: enqueueing, the pumps, release on ends."""

    what = "the queue pumps"  # as a `Service`

    def __init__(
        self,
        queues: Iterable[Queue],
        journal: Journal,
        outages: JournalWatch,
        epoch_now: Callable[[], float],
        *,
        procs: Mapping[str, ProcessDef[..., Any]],
        activate: Callable[[bytes], None],
        run_admitted: Callable[[InstanceRow, int], None],
        spawn: Callable[..., None],
        watch_end: Callable[[bytes, Callable[[bytes, str], None] | None], None],
        closing: Callable[[], bool],
        changed: Callable[[bytes], None],
        watch: Callable[[bytes, Callable[[bytes], None]], None],
        unwatch: Callable[[bytes, Callable[[bytes], None]], None],
        claimed: Callable[[bytes, int | None], None],
    ) -> None:
        self.journal, self.outages, self.epoch_now = journal, outages, epoch_now
        # The registry's processes and calls (`Registry.activate`, `run_admitted`,
        # `spawn_system_task`, `watch_end`, its closing), the statuses'
        # (`Statuses.changed`, `watch`, `unwatch`) and the node view's (`claimed`).
        self.procs, self.activate, self.run_admitted = procs, activate, run_admitted
        self.spawn, self.watch_end, self.closing = spawn, watch_end, closing
        self.changed, self.watch, self.unwatch, self.claimed = changed, watch, unwatch, claimed
        self.queues = registered(queues)
        self._events: dict[str, trio.Event] = {name: trio.Event() for name in self.queues}
        # Invariant: the statuses and the registry call this service for an
        # instance (`status_changed`, `ended`) exactly while it is in
        # _holding or _others (see _track): a start that holds no slot
        # calls no code of queues.
        # iid -> queue name: holders this node started and has not seen end
        self._holding: dict[bytes, str] = {}
        self._ended: dict[str, set[bytes]] = {name: set() for name in self.queues}
        # holders seen ending here, with their final status: released without a read
        self._known: dict[bytes, str] = {}
        # iid -> queue name: live holders of other nodes (or of an earlier run of
        # this one) as the last round read them; their end here (a takeover) pokes
        self._others: dict[bytes, str] = {}
        # admitted by a commit of unknown outcome: loaded again at the next round
        self._unsure: dict[str, set[bytes]] = {name: set() for name in self.queues}
        # waiting instances met whose process this system does not register
        self._foreign: dict[bytes, str] = {}
        self._said_foreign: set[tuple[str, str]] = set()  # (queue, process) logged
        self._order = itertools.count()
        self.admitted = 0  # instances this node started from queues (for tests and benches)

    @property
    def node(self) -> str:
        return self.journal.node or ""

    def choose(self, queue: object, priority: int) -> QueuedStart | None:
        """The place a start's ``queue=`` (a registered `Queue` or its name)
        and ``priority=`` arguments ask for, checked; None for a start
        without a queue.

        Raises:
            InvalidArguments: an unregistered queue, a priority that is not a
                32-bit whole number, or a priority without a queue.
        """
        check_priority(priority, queued=queue is not None)
        return (
            None if queue is None else QueuedStart(self, find_queue(self.queues, queue), priority)
        )

    def enqueue(self, txn: Txn, queue: Queue, iid: bytes, address: str, priority: int) -> None:
        """Add the waiting entry of a queued instance to ``txn`` (which also
        writes its record with status ``"queued"``); ``priority`` as checked
        by `choose`."""
        now = self.epoch_now()
        order = f"{round(now * 1e6):017d}{next(self._order) % 1_000_000:06d}"
        put_waiting(
            txn,
            queue.name,
            priority,
            order,
            iid,
            {"address": address, "node": self.node, "at": now},
        )

    def poke(self, name: str) -> None:
        """Ask the pump of queue ``name`` for a round."""
        event = self._events.get(name)
        if event is not None:
            event.set()

    async def poke_when_back(self, name: str, iid: bytes) -> None:
        await self.outages.back()
        self.changed(iid)
        self.poke(name)

    def _track(self, iid: bytes, name: str, mine: bool) -> None:
        """Note ``iid`` as a holder of queue ``name``'s (started by this node
        or not), and watch it: its end frees a slot."""
        (self._holding if mine else self._others)[iid] = name
        self.watch(iid, self.status_changed)
        self.watch_end(iid, self.ended)

    def _untrack(self, iid: bytes) -> None:
        """``iid`` holds no slot any more (its release was read)."""
        self._holding.pop(iid, None)
        self._others.pop(iid, None)
        self._known.pop(iid, None)
        self.unwatch(iid, self.status_changed)
        self.watch_end(iid, None)

    def status_changed(self, iid: bytes) -> None:
        """Hook: an instance's status changed; a holder that ended frees a
        slot (its status is read from the journal)."""
        name = self._holding.get(iid) or self._others.get(iid)
        if name is not None:
            self._ended[name].add(iid)
            self.poke(name)

    def ended(self, iid: bytes, status: str) -> None:
        """Hook: an instance that ran here ended (durably) with ``status``;
        a holder that is no longer live frees its slot without a read."""
        name = self._holding.get(iid) or self._others.get(iid)
        if name is not None and status not in LIVE_STATUSES:
            self._ended[name].add(iid)
            if self.journal.durability == "async":
                # Its end was acknowledged, maybe not committed (and an
                # acknowledged write can still be lost): the pump reads its
                # status once what is queued has committed, so a lost end
                # keeps its slot for the run that follows.
                self.spawn(self._poke_after_flush, name, iid)
            else:
                self._known[iid] = status
                self.poke(name)

    async def _poke_after_flush(self, name: str, iid: bytes) -> None:
        await self.journal.flush()
        self._ended[name].add(iid)  # (a round meanwhile may have read it still running)
        self.poke(name)

    async def run(self) -> None:
        """Run a pump per queue (until the system closes)."""
        async with trio.open_nursery() as nursery:
            for queue in self.queues.values():
                nursery.start_soon(self._pump, queue)

    async def _pump(self, queue: Queue) -> None:
        name = queue.name
        refused: Exception | None = None  # what the journal answered while it refuses
        since = 0.0
        backoff = RETRY_FIRST
        while True:
            self._events[name] = event = trio.Event()
            try:
                delay = await self._round(queue)
            except JournalCorrupt as exc:  # one queue's damaged state stops only that queue
                log.error(
                    "queue %r cannot read its state (%s); it tries again in %s s",
                    name,
                    exc,
                    RETRY_AFTER_ERROR,
                )
                delay = RETRY_AFTER_ERROR
            except (JournalFull, JournalUnavailable) as exc:
                # Nothing of the round was written (see the module docstring for
                # CommitOutcomeUnknown): try it again later, never end the system.
                if refused is None:
                    since = trio.current_time()
                    log.warning(
                        "queue %r cannot admit for now (%s: %s); it tries again with backoff",
                        name,
                        type(exc).__name__,
                        exc,
                    )
                refused = exc
                await trio.sleep(backoff)
                backoff = min(2 * backoff, RETRY_MAX)
                if isinstance(exc, JournalUnavailable):
                    await self.outages.back()
                continue
            if refused is not None:
                log.warning("queue %r admits again after %.1f s", name, trio.current_time() - since)
                refused, backoff = None, RETRY_FIRST
            with trio.move_on_after(delay):
                await event.wait()

    async def _round(self, queue: Queue) -> float:
        """Admit what the limits allow; return the seconds until a round
        could admit more without a poke (inf: only a poke can tell)."""
        name = queue.name
        while True:
            if self.closing():
                return math.inf
            unsure, self._unsure[name] = self._unsure[name], set()
            for iid in unsure:  # it runs if its admission went through
                self.changed(iid)
                self.activate(iid)
            ended, self._ended[name] = self._ended[name], set()
            try:
                delay = await self._admit(queue, ended)
            except BaseException:
                self._ended[name] |= ended  # read again at the next round
                raise
            if delay is not None:
                return delay

    async def _admit(self, queue: Queue, ended: set[bytes]) -> float | None:
        """One read and at most one commit of a round: what `_round`
        returns, or None to read again (some were admitted, or another
        writer moved first)."""
        name = queue.name
        shared = self.journal.shared
        now = self.epoch_now()
        look = await self.journal.read(
            lambda r: read_round(
                r,
                queue,
                ended,
                now,
                node=self.node,
                shared=shared,
                procs=self.procs,
                holding=self._holding,
                seen_ending=self._known,
                passed=self._foreign,
            )
        )
        self._note_foreign(name, look.foreign)
        held = dict(look.state["held"])
        for iid in ended:
            if iid.hex() not in held:  # released already (by another node's round)
                self._untrack(iid)
        for iid in [i for i, n in self._others.items() if n == name and i.hex() not in held]:
            self._untrack(iid)  # released already (by another node's round)
        for h, status in look.statuses.items():
            iid = bytes.fromhex(h)
            if status not in LIVE_STATUSES:
                held.pop(h, None)
                self._untrack(iid)
            else:
                # started here before: its end pokes; or another node's: its
                # end here (after a takeover) pokes
                self._track(iid, name, mine=held[h][0] == self.node)
        # Only the starts inside the rate window are kept (none without a rate).
        starts = [
            t for t in look.state["starts"] if queue.rate is not None and t > now - queue.rate.per
        ]
        wait_more = math.inf
        if shared:  # other nodes' ends, and the work of nodes that die, are not told here
            wait_more = (
                POLL_SHARED if look.candidates else POLL_IDLE_SHARED
            ) * self.journal.poll_scale
        if queue.rate is not None and look.candidates and len(starts) >= queue.rate.count:
            wait_more = min(wait_more, max(0.0, min(starts) + queue.rate.per - now))
        changed = held != look.state["held"] or len(starts) != len(look.state["starts"])
        if look.room <= 0 and not changed:
            return wait_more
        chosen: list[tuple[Entry, InstanceRow | None, int]] = []
        for entry, record in look.candidates:
            if len(chosen) >= look.room:
                break
            epoch = 0
            if shared:
                claimed = await self.journal.claim(entry.iid)
                self.claimed(entry.iid, claimed)
                if claimed is None:
                    continue  # its node lives and will start it
                epoch = claimed
            chosen.append((entry, record, epoch))
        if not chosen and not changed:
            return wait_more
        txn = Txn()
        txn.expect_state(held_key(name), look.version)
        for entry, _, epoch in chosen:
            txn.require(entry.iid, frozenset({"queued"}))
            if shared:
                txn.fence(entry.iid, epoch)
            txn.set_status(entry.iid, "running")
            txn.delete_state(entry.key)
            txn.delete_state(index_key(entry.iid))
            held[entry.iid.hex()] = [self.node, now]
            if queue.rate is not None:
                starts.append(now)
        txn.put_state(held_key(name), {"held": held, "starts": starts})
        try:
            await self.journal.commit(txn)
        except Conflict as exc:
            self._ended[name] |= ended  # another writer moved first: read again
            if exc.reason != "state":
                await self._drop_stale([entry for entry, _, _ in chosen])
            return None
        except CommitOutcomeUnknown:
            self._unsure[name].update(entry.iid for entry, _, _ in chosen)
            raise
        for entry, record, epoch in chosen:
            self._track(entry.iid, name, mine=True)
            self.admitted += 1
            self.changed(entry.iid)
            if record is not None and record.status == "queued":
                self.run_admitted(record, epoch)
            else:
                self.activate(entry.iid)
        return None if chosen else wait_more

    def _note_foreign(self, name: str, foreign: dict[bytes, str]) -> None:
        """Remember waiting instances this system cannot run (so later
        rounds pass them without a read) and say so once per process."""
        if len(self._foreign) + len(foreign) > _FOREIGN_KEPT:
            self._foreign.clear()  # some may have started elsewhere: read them again
        self._foreign.update(foreign)
        for process in sorted(set(foreign.values())):
            if (name, process) not in self._said_foreign:
                self._said_foreign.add((name, process))
                log.warning(
                    "queue %r: its waiting instances of process %r are left to a node that "
                    "registers it (this system does not); those behind them start meanwhile",
                    name,
                    process,
                )

    async def _drop_stale(self, entries: list[Entry]) -> None:
        """Remove the waiting rows of instances no longer queued (cancelled,
        cleaned up) that an admission met."""
        stale = await self.journal.read(lambda r: stale_entries(r, entries))
        if stale:
            await self.journal.commit(drop_rows_txn(stale))

    async def info(self, queue: Queue | str) -> QueueInfo:
        """The queue's depth, holders and oldest wait, read from the journal."""
        found = find_queue(self.queues, queue)
        now = self.epoch_now()
        return await self.journal.read(lambda r: queue_info(r, found, now))


_FOREIGN_KEPT = 100_000  # waiting instances remembered as others' work


@attrs.frozen(eq=False)
class QueuedStart:
    """A start that waits for a slot of ``queue`` (a `StartGate`): what
    `QueueService.choose` makes of a start's ``queue=`` and ``priority=``.
    The instance is stored ``"queued"`` with its waiting row (`hold`), and
    the queue's pump starts it."""

    service: QueueService
    queue: Queue
    priority: int
    status: ClassVar[str] = "queued"

    def hold(self, txn: Txn, iid: bytes, address: str) -> None:
        self.service.enqueue(txn, self.queue, iid, address, self.priority)

    def committed(self) -> None:
        self.service.poke(self.queue.name)

    async def commit(self, txn: Txn, iid: bytes, address: str) -> None:
        """Commit a start transaction as a queued instance's (its waiting row added)."""
        self.hold(txn, iid, address)
        service = self.service
        # Awaited whatever the durability: the pump poked below reads only
        # what is committed, and would otherwise miss it until the next poke.
        try:
            await service.journal.commit(txn, durable=True)
        except CommitOutcomeUnknown:  # it may be written: the pump looks once it answers
            service.spawn(service.poke_when_back, self.queue.name, iid)
            raise
        service.changed(iid)
        self.committed()
