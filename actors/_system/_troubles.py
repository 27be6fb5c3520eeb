"""Instances the system cannot run, and how it says so and holds them:
`Corruption` and `Stalls`, two parts of `ActorSystem`.

Corrupt: an instance is marked ``corrupt`` (its status only: its records
stay as they are, for a restore or a cleanup) when its run, a sender, a
consumer or the scan at open meets a record of it that does not decode.
Calls that address it then raise `JournalCorrupt` naming the database and
key of that record (`Corruption.error`), read again after a reopen.

Stalled, lost or stuck: instances that left memory for a cause and come
back (`Stalls`). A write that found the journal full (the instance leaves
memory suspended and is replayed once there may be room, backing off), a
write that was lost (memory was ahead of the journal: the instance is
loaded again from what was committed), a replay stuck on changed code
(said once per reason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import trio

from storage import Journal, Txn
from storage.errors import JournalCorrupt, JournalFull

from .._kernel import _reports

if TYPE_CHECKING:
    from .._actor._instance import Actor
    from .._kernel._interfaces import ActorAPI
    from ._registry import Registry
    from ._status_watch import Statuses

__all__ = ["Corruption", "Stalls"]

log = logging.getLogger("actors")


class Corruption:
    """Marks instances corrupt and says why (see the module docstring)."""

    def __init__(
        self, journal: Journal, live: Mapping[bytes, Actor], changed: Callable[[bytes], None]
    ) -> None:
        self.journal = journal
        self.live = live  # the registry's instances in memory (read only here)
        self.changed = changed  # `Statuses.changed`: tells an instance's watchers
        # Why each instance marked corrupt in this session is: the record
        # that did not decode (see error).
        self._found: dict[bytes, JournalCorrupt] = {}

    async def mark(self, actor: ActorAPI, exc: JournalCorrupt) -> None:
        """``actor``'s run met ``exc``: say so, record it, tell its watchers."""
        await self._mark(actor.iid, actor.address, exc)

    async def _mark(self, iid: bytes, address: str, exc: JournalCorrupt) -> None:
        _reports.corrupt(address, exc)
        await self.record(iid, exc)
        self.changed(iid)

    async def records_damaged(self, iid: bytes, address: str, exc: JournalCorrupt) -> None:
        """A record of the instance that its run never reads (a stream value,
        a consumer's cursor, the mail counter a sender met) is damaged: the
        instance is marked corrupt all the same, as if its run had met the
        record, so its handles raise instead of waiting on it. A live one stops at its
        next suspension (see `Actor.corrupted`), writing nothing more."""
        actor = self.live.get(iid)
        if actor is not None and not actor.done:
            actor.arrivals.corrupted(exc)
            return
        if iid not in self._found:
            await self._mark(iid, address, exc)

    async def record(self, iid: bytes, exc: JournalCorrupt) -> None:
        """Record that the instance is corrupt (status only: its records stay
        as they are, for a restore or a cleanup)."""
        self._found[iid] = exc
        txn = Txn()
        txn.set_status(iid, "corrupt")
        try:
            await self.journal.commit(txn)
        except Exception:  # noqa: BLE001 - the header itself may be unreadable
            log.exception("could not mark %s corrupt", iid.hex())

    def error(self, iid: bytes, address: str) -> JournalCorrupt:
        """What a call addressing a corrupt instance raises: the first of its
        records that does not decode, by database and key."""
        found = self._found.get(iid)
        if found is None:  # marked in an earlier session: find the record again
            try:
                with self.journal.reader() as r:
                    row = r.instance(iid)
                    if row is not None:
                        r.entries(iid, row.record.run)
                        r.mailbox(iid)
                        r.timers(iid)
            except JournalCorrupt as exc:
                found = self._found[iid] = exc
        if found is None:
            return JournalCorrupt(
                f"{address!r} is marked corrupt (database 'instances', key {iid.hex()}), "
                "though its records decode now; clean it up (system.cleanup) or start it "
                "afresh after restoring the journal",
                database="instances",
                key=iid,
            )
        return JournalCorrupt(
            f"the records of {address!r} are corrupt: {found}",
            database=found.database,
            key=found.key,
        )


STALL_RETRY_FIRST = 1.0  # seconds; see Stalls._resume_stalled
STALL_RETRY_MAX = 60.0


class Stalls:
    """Brings back what stalled, lost a write or got stuck (see the module docstring)."""

    def __init__(self, registry: Registry, statuses: Statuses) -> None:
        self.registry = registry
        self.statuses = statuses
        self._said_stuck: dict[bytes, str] = {}  # see stuck
        self._stalled_iids: set[bytes] = set()  # see stalled
        self._resuming = False

    def stalled(self, actor: ActorAPI, exc: JournalFull) -> None:
        """``actor``'s own write found the journal full (or its disk): it
        leaves memory suspended with ``last_error``, and is activated again
        (replayed from what the journal holds) once there may be room."""
        log.error(
            "instance %r is suspended until the journal has room: %s",
            actor.address,
            exc,
            extra={"actors_address": actor.address},
        )
        # Handle reads see the actor's suspended state with last_error (the
        # journal could not take it); the next activation drops it (see
        # Registry._take_in).
        self.statuses.changed(actor.iid)
        self.registry.ended(actor, "suspended")
        self._resume_later(actor.iid)

    def _resume_later(self, iid: bytes) -> None:
        """Activate ``iid`` again in the next round of `_resume_stalled`."""
        self._stalled_iids.add(iid)
        if not self._resuming:
            self._resuming = True
            self.registry.spawn_system_task(self._resume_stalled)

    def write_lost(self, iid: bytes, exc: BaseException) -> None:
        """A write of the instance failed (one nobody waited for: "async"
        durability's acknowledged writes, deferred ones; or one whose waiter
        may have gone, cancelled, before it learned): memory is ahead of the
        journal, and the journal takes none of the instance's
        writes until it is loaded again (see `storage.LostChains`). A live
        instance stops at its next suspension or write and is loaded again
        as one stalled (`stalled`); one already out of memory (ended, say)
        is brought back from what was committed. As after a crash within
        the "async" window, the steps since its last committed write may
        run again."""
        actor = self.registry.live.get(iid)
        address = iid.hex() if actor is None else actor.address
        log.error(
            "a write of instance %s failed (%s: %s); it is loaded again from what the "
            "journal holds",
            address,
            type(exc).__name__,
            exc,
            extra={"actors_address": address},
        )
        if actor is not None and not actor.done:
            actor.write_lost(exc)  # it comes back here (reload_lost) as it leaves memory
        else:
            self.reload_lost(iid)

    def reload_lost(self, iid: bytes) -> None:
        """Load ``iid``, out of memory now, again from what the journal
        holds: a write of its last run was lost (see `write_lost`)."""
        self.statuses.forget_reads(iid)
        self.statuses.changed(iid)
        self._resume_later(iid)

    def stuck(self, actor: ActorAPI, held: str, exc: BaseException) -> None:
        """``actor``'s replay is stuck (``held``, see `Ends.diverge`): it left
        memory suspended. Said once per reason: mail to it replays it again."""
        if self._said_stuck.get(actor.iid) != held:
            self._said_stuck[actor.iid] = held
            _reports.stuck(actor.address, held, exc)

    async def _resume_stalled(self) -> None:
        # One task for every stalled instance, backing off while the journal
        # stays full: each retry replays the instance up to its failed write.
        # An iid leaves the set only once its activation is under way: an
        # outage met on the way (this task then runs again, see
        # JournalWatch.keep_running) must not lose the rest of the round.
        # Sorted, so that a seed of the simulation replays alike.
        self._resuming = True
        delay = STALL_RETRY_FIRST
        try:
            while True:
                await trio.sleep(delay)
                if not self._stalled_iids:
                    return  # nothing stalled again since the last round
                for iid in sorted(self._stalled_iids):
                    actor = self.registry.live.get(iid)
                    if actor is not None:
                        if not actor.done:  # back in memory meanwhile (loaded afresh)
                            self._stalled_iids.discard(iid)
                        continue  # else still on its way out: the next round
                    self.registry.activate(iid)
                    self._stalled_iids.discard(iid)
                delay = min(delay * 2, STALL_RETRY_MAX)
        finally:
            self._resuming = False
