"""What the system knows of each instance's status and record, and who
waits for it to change: `Statuses`, a part of `ActorSystem` (the module is
named for the watching; the status vocabulary is `storage._statuses`)."""

from __future__ import annotations

import functools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import trio

from storage import InstanceRecord, InstanceRow, Journal
from storage.errors import JournalCorrupt

from .._kernel._transactions import floor_of

if TYPE_CHECKING:
    from .._actor._instance import Actor

__all__ = ["NO_RECORD", "Statuses", "state_of"]

# What `snapshot` gives for an instance it cannot read: incarnation 0 is
# none a handle holds, so a handle reads it as replaced.
NO_RECORD = InstanceRecord(incarnation=0)
ENDS_KEPT = 10_000  # ended instances whose final state is kept for handle reads
SEEN_KEPT = 10_000  # instances of a remote journal whose last read state is kept


def state_of(row: InstanceRow | None) -> tuple[str, InstanceRecord]:
    return ("unknown", NO_RECORD) if row is None else (row.status, row.record)


class Statuses:
    """Each instance's status and record as this system knows them, and
    events for whoever waits for them to change (handles, cancels)."""

    def __init__(
        self, journal: Journal, live: Mapping[bytes, Actor], trusted: Callable[[bytes], bool]
    ) -> None:
        self.journal = journal
        self.live = live  # the registry's instances in memory (read only here)
        self.trusted = trusted  # `NodeView.trusted`: whether memory of a live one is current
        # Whether the journal reads at once (fixed by its class): else what
        # is not in memory is what the last read off the thread found.
        self.local = journal.reads_at_once
        # Ended instances' final states, kept for handle reads (see Registry.ended).
        # (An OrderedDict: dropping the oldest of a plain dict, del d[next(iter(d))],
        # scans the slots emptied before it, ~1.5 us a time at 10k entries.)
        self._ends: OrderedDict[bytes, tuple[str, InstanceRecord]] = OrderedDict()
        # A remote journal's instances as last read off the trio thread (see snapshot).
        self._seen: OrderedDict[bytes, tuple[str, InstanceRecord]] = OrderedDict()
        # Weakly held (see event): an entry lives as long as someone holds its
        # event. Read by `Actor.set_status`: an instance nobody watches (most)
        # changes activity without a call here.
        self.events: dict[bytes, weakref.ref[trio.Event]] = {}
        self._watchers: dict[bytes, list[Callable[[bytes], None]]] = {}  # see watch

    def final_end(self, iid: bytes) -> tuple[str, InstanceRecord] | None:
        """The end of ``iid`` that ran here, as kept (`Registry.ended`), if it is
        still what the journal holds: on a shared journal another node may
        have started a cancelled address afresh, so only a completion is
        taken from memory there."""
        ended = self._ends.get(iid)
        if ended is not None and self.journal.node is not None and ended[0] != "completed":
            return None
        return ended

    def held(self, iid: bytes) -> int | None:
        """The incarnation of ``iid`` this system holds in memory (loaded,
        or its end kept), or None: `ActorSystem.get` needs no read then."""
        actor = self.live.get(iid)
        if actor is not None and actor.loaded:
            return actor.record.incarnation
        ended = self.final_end(iid)
        return None if ended is None else ended[1].incarnation

    def found(self, iid: bytes, row: InstanceRow | None) -> int | None:
        """What a read of ``iid`` found, remembered (`remember`): its
        incarnation, or None if there is no instance."""
        if row is None:
            return None
        self.remember(iid, state_of(row))
        return row.record.incarnation

    def snapshot(self, iid: bytes) -> tuple[str, InstanceRecord]:
        """The instance's status and record, as this system knows them.

        Invariant: no journal I/O on the trio thread for a remote journal (a
        read there is a round trip, unbounded when the server is slow, and
        every task would wait on it): what is not in memory is what the
        last read off the thread found (`refresh`), or ``"unread"``.
        A local journal reads at once."""
        actor = self.live.get(iid)
        journal = self.journal
        if actor is not None and actor.loaded:
            # (A single owner's memory is always current: `NodeView.trusted`.)
            if journal.node is None or self.trusted(iid):
                return actor.status, actor.writes.durable_record()
            if not self.local:  # its memory may be stale: only a read tells
                return self._seen.get(iid) or ("unread", NO_RECORD)
        ended = self._ends.get(iid)  # (`final_end`, written out: every result() reads it)
        if ended is not None and (journal.node is None or ended[0] == "completed"):
            return ended
        if not self.local:
            return self._seen.get(iid) or ("unread", NO_RECORD)
        try:
            with self.journal.reader() as r:
                row = r.instance(iid)
        except JournalCorrupt:
            return "corrupt", NO_RECORD
        state = state_of(row)
        if actor is not None and not actor.done and actor.record.incarnation > state[1].incarnation:
            # Its start is submitted and not written yet (an "async" journal
            # acknowledges first): the journal still shows the incarnation
            # it replaces, which must not read as this one's end.
            return "running", actor.record
        return state

    async def refresh(self, iid: bytes) -> tuple[str, InstanceRecord]:
        """`snapshot`, reading the journal (off the trio thread) for what
        is not in memory."""
        if self.local:
            return self.snapshot(iid)
        actor = self.live.get(iid)
        if (actor is not None and actor.loaded and self.trusted(iid)) or (
            self.final_end(iid) is not None
        ):
            return self.snapshot(iid)
        # Invariant: a read is remembered only if no end of ``iid`` was kept
        # or dropped while it was under way. A read that began before a run
        # here ended may have found it running: remembered after that end
        # (`keep_end` drops what was read before), it would be all that is
        # left once the end is dropped, and a handle would wait for a change
        # already made.
        ended = self._ends.get(iid)
        try:
            row = await self.journal.read(lambda r: r.instance(iid))
        except JournalCorrupt:
            state = ("corrupt", NO_RECORD)
        else:
            state = state_of(row)
        if self._ends.get(iid) is ended:
            self.remember(iid, state)
        return self.snapshot(iid)  # (it may have come into memory meanwhile)

    def remember(self, iid: bytes, state: tuple[str, InstanceRecord]) -> None:
        """Keep what a read off the thread found (remote journals), oldest out."""
        if self.local:
            return
        seen = self._seen
        seen[iid] = state
        seen.move_to_end(iid)
        if len(seen) > SEEN_KEPT:
            seen.popitem(last=False)

    def keep_end(self, iid: bytes, status: str, record: InstanceRecord) -> None:
        """Keep the final state of what just ended here: it answers handle
        reads (result(), status) without a journal read each, which on a
        remote journal is a blocking round trip on the trio thread.
        Bounded, oldest out. What was read of the instance before (see
        `remember`) is stale from now on: it goes, so that once this end is
        dropped too, nothing but a read tells (`refresh`). Then whoever
        waits on ``iid`` (`event`) is woken, as by `activity_changed`: it
        left memory."""
        ends = self._ends
        ends[iid] = (status, record)
        self._seen.pop(iid, None)
        if len(ends) > ENDS_KEPT:
            ends.popitem(last=False)
        ref = self.events.pop(iid, None)  # (`activity_changed`, written out)
        event = None if ref is None else ref()
        if event is not None:
            event.set()

    def drop_end(self, iid: bytes) -> None:
        """The end kept of ``iid`` is no longer what the journal holds (a
        new incarnation, a reload, a cleanup)."""
        self._ends.pop(iid, None)

    def forget_reads(self, iid: bytes) -> None:
        """Drop all that is kept of ``iid``: it is loaded afresh."""
        self._ends.pop(iid, None)
        self._seen.pop(iid, None)

    async def removed(self, iid: bytes, incarnation: int) -> bool:
        """Whether ``incarnation`` of ``iid`` was removed from the journal
        after it ended: a cleanup removed it (or a retry or fork of its
        parent reset it), leaving its number as the address's floor."""
        return incarnation == await self.journal.read(lambda r: floor_of(r, iid))

    def event(self, iid: bytes) -> trio.Event:
        """The event set at the next change of ``iid`` (`activity_changed`);
        take it before reading the state it guards, then wait on it.

        Invariant: the table holds an instance's event only while someone
        holds it (a waiter, or a reader about to wait): it is kept weakly,
        and its entry goes when the last holder drops it. So a read of an
        instance that has ended (which nothing will change again), a wait
        given up on, or an instance another node ended keeps nothing here,
        and memory does not grow with the instances that came and went.
        """
        ref = self.events.get(iid)
        event = None if ref is None else ref()
        if event is None:
            event = trio.Event()
            self.events[iid] = weakref.ref(event, functools.partial(self._dropped, iid))
        return event

    def _dropped(self, iid: bytes, ref: weakref.ref[trio.Event]) -> None:
        """Nobody holds the event of ``iid`` any more: drop its entry (unless
        a newer event took its place)."""
        if self.events.get(iid) is ref:
            del self.events[iid]

    def watch(self, iid: bytes, hook: Callable[[bytes], None]) -> None:
        """Call ``hook(iid)`` whenever the status of ``iid`` changes (not on
        its running/suspended turns: see `activity_changed`), until
        `unwatch`. The queue service watches the instances that hold a
        slot, the schedule service the runs a tick waits for: so this part
        knows neither, and a change of any other instance calls neither."""
        hooks = self._watchers.setdefault(iid, [])
        if hook not in hooks:
            hooks.append(hook)

    def unwatch(self, iid: bytes, hook: Callable[[bytes], None]) -> None:
        """Stop calling ``hook`` for ``iid`` (see `watch`)."""
        hooks = self._watchers.get(iid)
        if hooks is not None and hook in hooks:
            hooks.remove(hook)
            if not hooks:
                del self._watchers[iid]

    def changed(self, iid: bytes) -> None:
        hooks = self._watchers.get(iid)
        if hooks is not None:
            for hook in list(hooks):  # (a hook may unwatch)
                hook(iid)
        actor = self.live.get(iid)
        if actor is None or not actor.done:
            self._ends.pop(iid, None)  # changed by other means than its actor's end
        ref = self.events.pop(iid, None)  # (`activity_changed`, written out: hot)
        event = None if ref is None else ref()
        if event is not None:
            event.set()

    def activity_changed(self, iid: bytes) -> None:
        """Wake whoever waits on the instance's status event (`event`):
        it went from running to suspended or back (twice per message it
        takes), or left memory. The queue and schedule services wait for
        instances to end, which comes through `changed`; no end of it is
        cached while it is live."""
        ref = self.events.pop(iid, None)
        event = None if ref is None else ref()
        if event is not None:
            event.set()
