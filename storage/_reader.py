"""The `Reader` interface: a consistent read view of a journal, and the
rows it gives (`InstanceRow`, `CorruptRecord`, `TimerRow`, `Listed`).

Every journal's reader implements it (`storage._lmdb._reader`,
`storage._postgres._reader`, `storage._memory`); `storage._journal`
re-exports it beside the `Journal` that hands one out.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any

import attrs

from ._records import InstanceRecord, LogEntry
from ._states import StateRow
from .errors import JournalCorrupt

__all__ = ["CorruptRecord", "InstanceRow", "Listed", "Reader", "TimerRow"]


@attrs.frozen(slots=True)
class InstanceRow:
    """An instance's record as stored: identity, status and the runtime's snapshot."""

    iid: bytes
    address: str
    process: str
    status: str
    record: InstanceRecord


@attrs.frozen(slots=True)
class CorruptRecord:
    """An instance whose record does not decode, as far as what survives tells.

    `Reader.instances` gives these (with ``corrupt=[...]``) instead of
    stopping at them. ``status`` and ``process`` come from the status index;
    ``address`` from the record's header when that still reads (else None);
    ``error`` is the `JournalCorrupt` naming the database and key.
    """

    iid: bytes
    address: str | None
    process: str
    status: str
    error: JournalCorrupt


@attrs.frozen(slots=True)
class TimerRow:
    """A durable timer: effect ``seq`` of run ``run`` of instance ``iid``, due at ``due``."""

    due: float
    iid: bytes
    run: int
    seq: int


# One instance as `Reader.listing` gives it: (-updated, address, iid, status,
# process), ``updated`` 0.0 when unknown; so sorted tuples list the most
# recently updated first, then by address.
Listed = tuple[float, str, bytes, str, str]


class Reader(abc.ABC):
    """A consistent read view of a journal. Never hold one across an ``await``.

    A read that meets a damaged record (bytes that do not decode, a number of
    the wrong size, with `Journal.check_shapes` a value of another shape)
    raises `JournalCorrupt` naming its database and key.
    """

    @abc.abstractmethod
    def instance(self, iid: bytes) -> InstanceRow | None:
        """The instance's row, or None."""

    @abc.abstractmethod
    def instances(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        corrupt: list[CorruptRecord] | None = None,
    ) -> Iterator[InstanceRow]:
        """Rows matching the filters (None means any), by status then id.

        A record that does not decode raises `JournalCorrupt`, which ends the
        scan; given a ``corrupt`` list, the scan instead appends a
        `CorruptRecord` for it there and goes on with the next.
        """

    @abc.abstractmethod
    def count_by_status(self) -> dict[str, int]:
        """How many instances each status has (statuses with none are left out)."""

    @abc.abstractmethod
    def log(self, iid: bytes, run: int) -> dict[int, Any]:
        """The effect log of one run: ``{seq: entry}``."""

    @abc.abstractmethod
    def entries(self, iid: bytes, run: int) -> dict[int, LogEntry]:
        """`log`, typed: each entry read and checked in one pass (an entry of
        the wrong shape is `JournalCorrupt` naming its key, whatever
        `Journal.check_shapes` says), by seq in ascending order. What the
        runtime replays from."""

    def log_rows(self, iid: bytes, run: int) -> list[tuple[Any, bytes]]:
        """The effect log of one run as stored, undecoded: ``(position,
        bytes)`` per entry, by seq; `log_seq` gives a position's seq. Two
        reads give equal lists exactly when the log's entries (their seqs
        and bytes) are equal: what `storage._log_cache.LogCache` checks a
        decoded log against. One pass, no decoding (a cache hit's whole cost)."""
        raise NotImplementedError(f"{type(self).__name__} gives no stored log rows")

    def log_seq(self, position: Any) -> int:
        """The seq of a position `log_rows` gave (by default the position is the seq)."""
        return int(position)

    def decode_log(
        self, iid: bytes, run: int, rows: list[tuple[Any, bytes]]
    ) -> dict[int, LogEntry]:
        """`entries` of the run, from ``rows`` (what `log_rows` of this
        reader gave for it): the same entries, the same `JournalCorrupt`."""
        raise NotImplementedError(f"{type(self).__name__} decodes no stored log rows")

    @abc.abstractmethod
    def log_runs(self, iid: bytes) -> list[int]:
        """The runs that have log entries, ascending."""

    @abc.abstractmethod
    def mailbox(self, iid: bytes) -> list[tuple[int, Any]]:
        """Unread messages as ``(seq, message)``, oldest first."""

    def mailboxes(self, iids: list[bytes]) -> dict[bytes, list[tuple[int, Any]]]:
        """`mailbox` of each of ``iids`` (a remote journal reads them at once)."""
        return {iid: self.mailbox(iid) for iid in iids}

    def mailbox_page(self, iid: bytes, start: int, limit: int) -> tuple[int, list[tuple[int, Any]]]:
        """How many unread messages the instance has, and ``limit`` of them
        from the ``start``-th (0-based), oldest first: a backend that can
        decodes only those (the inspector pages a mailbox of big messages)."""
        box = self.mailbox(iid)
        return len(box), box[start : start + limit]

    def listing(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        memo: dict[bytes, Any] | None = None,
    ) -> list[Listed]:
        """Each instance matching the filters as a `Listed` tuple, in no set
        order (sorted, the tuples list the instances most recently updated
        first): what a list of instances sorts and pages by, read as cheaply
        as the backend can. A record that does not decode is listed too (the
        address its header gives, or ``"? <id>"``, and no updated time):
        reading it with `instance` says what is wrong.

        ``memo`` is a dict the caller keeps between calls (empty at first; it
        keeps no reader's snapshot): a backend may keep in it what lets a
        later call give the same tuple, unread, for a record unchanged since.
        """
        broken: list[CorruptRecord] = []
        rows: list[Listed] = [
            (-(row.record.updated or 0.0), row.address, row.iid, row.status, row.process)
            for row in self.instances(status, process, corrupt=broken)
        ]
        rows += [
            (-0.0, c.address or f"? {c.iid.hex()}", c.iid, c.status, c.process) for c in broken
        ]
        return rows

    def owner(self, iid: bytes) -> str | None:
        """The name of the node that owns the instance now, on a journal that
        several nodes share (`PostgresJournal`); None where the backend has no
        owners, the instance has none (no node claimed it, or it ended and
        was let go), or there is no such instance. What `show` and the
        inspector print; the owner may change as soon as it is read."""
        return None

    def change_marker(self) -> int | None:
        """A number that differs between this snapshot and any earlier one
        that misses a commit this one sees (LMDB: the transaction id), or
        None when the backend has none (then no read may be reused)."""
        return None

    @abc.abstractmethod
    def last_message_seq(self, iid: bytes) -> int:
        """The highest sequence number ever given to a message for that
        instance (0 if none): messages at or below it that are not unread
        were taken."""

    @abc.abstractmethod
    def instances_with_mail(self) -> Iterator[bytes]:
        """Ids of instances that have unread messages."""

    @abc.abstractmethod
    def timers(self, iid: bytes) -> list[TimerRow]:
        """That instance's timers, by due time."""

    @abc.abstractmethod
    def due_timers(
        self, now: float, limit: int = 1000, after: float | None = None
    ) -> list[TimerRow]:
        """Timers due at or before epoch ``now`` (and strictly after
        ``after``, if given), earliest first."""

    @abc.abstractmethod
    def next_due(self, after: float | None = None) -> float | None:
        """The earliest due time (strictly after ``after``, if given), or None."""

    @abc.abstractmethod
    def stream(self, iid: bytes, start: int = 0, limit: int = 1000) -> list[tuple[int, Any]]:
        """Emitted values from index ``start``: ``[(index, value), ...]``.

        Indexes run without a gap; a value missing below the stream's length
        raises `JournalCorrupt` naming it, so no consumer skips it unawares.
        """

    @abc.abstractmethod
    def stream_length(self, iid: bytes) -> int:
        """How many values the instance has emitted."""

    @abc.abstractmethod
    def cursors(self, iid: bytes) -> dict[str, int]:
        """Each consumer's position (index of its next value)."""

    def cursor(self, iid: bytes, consumer: str) -> int | None:
        """``consumer``'s position in that instance's stream, or None if it has none."""
        return self.cursors(iid).get(consumer)

    def states(self, prefix: str, limit: int | None = None) -> list[StateRow]:
        """State rows whose key starts with ``prefix``, by key, at most
        ``limit`` of them (see `storage._states`)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no state rows")

    @abc.abstractmethod
    def has_records(self, iid: bytes) -> bool:
        """Whether anything at all is stored for that id (record, log, mail,
        timers, stream or cursors); for checking cleanup."""
