"""The list's index and the polls' validators: what lets the inspector read
only what it shows, and answer a poll of an unchanged page in O(1).

A `Listing` is every instance of the journal as `Reader.listing` gives it
(its updated time, address, id, status and process; no record is built,
and a record unchanged since the last listing is not even decoded again),
sorted most recently updated first, with the counts by status. One listing
serves every query of the list page (it filters and pages the sorted rows)
and every tab: `ListCache` keeps the latest, and reads a new one only when
the journal changed since (its `Reader.change_marker` differs) *and* the one
it has is a poll interval old (or ten times as old as its read took, if
that is sooner); requests that find it due meanwhile wait for the one read
under way rather than start their own. So the list costs one scan of the
journal per poll interval at most, however many tabs poll it, and what it
shows is never older than one poll interval. A journal
without a change marker (PostgreSQL) gets no reuse: each request reads its
own listing, one at a time.

An `etag` names what a page was rendered from: the journal's change marker
and the ten-second span of the clock (pages say "3 s ago"). A poll that
sends it back in ``If-None-Match`` while both still hold is answered 304
without reading anything but the marker. A journal without a marker (the
PostgreSQL one) gets no validator: each poll renders its page again.

The page's rows are read afresh (`Reader.instance`), a page at a time.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from storage import Reader
from storage._reader import Listed

from .._cli._access import under

__all__ = ["SPAN", "ListCache", "Listing", "etag"]

SPAN = 10.0  # seconds a validator holds at most: relative times on a page move
_FILTERS = 16  # filters whose rows a listing keeps worked out
_HOLD = 10  # a changed journal's listing is read again after this many times its cost


def etag(marker: int | None, salt: str, now: float | None = None) -> str | None:
    """The validator of a page rendered from a snapshot with ``marker`` now
    (None without a marker). ``salt`` tells this inspector's pages apart from
    another's (another journal, another start)."""
    if marker is None:
        return None
    span = math.floor((time.time() if now is None else now) / SPAN)
    return f'"{salt}-{marker}-{span}"'


@attrs.define
class Listing:
    """The journal's instances at one snapshot, most recently updated first."""

    marker: int | None  # the snapshot's `Reader.change_marker`
    taken: float  # when its read began (`time.monotonic`)
    cost: float  # how long the read took, in seconds
    rows: list[Listed]
    counts: dict[str, int]
    # The rows matching a filter (status, process, prefix), and the processes
    # of the rows the status and prefix keep (the filter form offers them),
    # worked out once per listing (for the last `_FILTERS` filters asked).
    _found: dict[tuple[str | None, str | None, str | None], tuple[list[Listed], list[str]]] = (
        attrs.field(factory=dict)
    )

    @classmethod
    def read(cls, r: Reader, memo: dict[bytes, Any]) -> Listing:
        """The listing of ``r``'s snapshot, read with ``memo`` (`Reader.listing`)."""
        marker, taken = r.change_marker(), time.monotonic()
        rows = r.listing(memo=memo)
        rows.sort()
        counts = dict(Counter(row[3] for row in rows))
        return cls(marker, taken, time.monotonic() - taken, rows, counts)

    def matching(
        self, status: str | None, process: str | None, prefix: str | None
    ) -> tuple[list[Listed], list[str]]:
        """The rows a filter keeps, in order, and the processes the form offers."""
        key = (status, process, prefix)
        found = self._found.get(key)
        if found is None:
            kept = [
                row
                for row in self.rows
                if (status is None or row[3] == status) and under(row[1], prefix)
            ]
            processes = sorted({row[4] for row in kept})
            if process is not None:
                kept = [row for row in kept if row[4] == process]
            if len(self._found) >= _FILTERS:
                self._found.clear()
            found = self._found[key] = (kept, processes)
        return found


class ListCache:
    """The latest `Listing`, shared by every request (see the module's docstring)."""

    def __init__(self, poll: float) -> None:
        self._poll = poll
        self._latest: Listing | None = None
        self._reading = trio.Lock()  # one read of a listing at a time
        # What `Reader.listing` keeps between reads (a backend may keep
        # nothing); only a read holding `_reading` touches it.
        self._memo: dict[bytes, Any] = {}

    def _usable(self, marker: int | None) -> Listing | None:
        latest = self._latest
        if latest is None or marker is None:
            return None  # without a marker, each request reads its own
        # Invariant: a listing is shown while it is the journal's current
        # state, or for at most one poll interval after it was read: as
        # long as that, or ten times what reading it cost if less (a read
        # of a small journal is not worth showing anything stale for).
        hold = min(self._poll, _HOLD * latest.cost)
        if latest.marker == marker or time.monotonic() - latest.taken < hold:
            return latest
        return None

    async def get(
        self, marker: int | None, read: Callable[[Callable[[Reader], Listing]], Awaitable[Listing]]
    ) -> Listing:
        """A listing fit to show when the journal's marker is ``marker``;
        ``read`` runs a function on a reader (in a worker thread)."""
        found = self._usable(marker)
        if found is not None:
            return found
        async with self._reading:
            found = self._usable(marker)  # read by the request this one waited for
            if found is None:
                memo = self._memo
                found = await read(lambda r: Listing.read(r, memo))
                self._latest = found
            return found
