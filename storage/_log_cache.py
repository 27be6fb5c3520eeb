"""`LogCache`: the decoded logs of runs read recently, each kept beside the
stored bytes it was decoded from, so that waking an instance again decodes
only what was written since.

Why. A wake reads its run's whole log and decodes every entry (~2 µs an
entry), though most of it was decoded at the instance's last wake. An
instance that passivates and wakes often pays that again and again.

How it stays right. A decoded log is never trusted by itself: every use
reads the run's stored rows again (`Reader.log_rows`: one cursor pass, no
decoding, in the reader's snapshot) and compares them with the rows it was
decoded from. Only a log whose stored rows still begin with exactly the
kept ones (the same seqs, byte for byte) is answered from here, and then
only the rows past them are decoded. So whoever changed the log (this
node's actor, another node on a shared PostgreSQL journal, a retry, a
fork, a crash budget's resume, a history import, a command line in another
process on the same LMDB directory) changed the bytes this compares: a
changed log is decoded afresh, never answered stale. Comparing the bytes
(not a count and the last entry) is what that takes: the runtime itself
overwrites entries in the middle of a log (a started record by its
outcome: a timer or step of a join that ends after later effects), and
an import or resume rewrites any entry under the same run.

What is shared. An entry whose outcome the process could change in place
(a list, a dict, a record: anything but an immutable scalar) is decoded
afresh from its kept bytes at each use, so what one activation's code did
to a value never reaches the next (the process sees what was encoded). The
rest, handed out again, are frozen `LogEntry`s of immutable values.

Bounds. At most ``max_entries`` entries and ``max_bytes`` stored bytes in
all (a decoded entry takes a few times its stored bytes), evicted least
recently used first; a log over either bound alone is not kept. One cache
per system: a restart starts with none.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import attrs

from . import _reading as rd
from ._diagnosis import SCALARS
from ._reader import Reader
from ._records import NO_VALUE, LogEntry

__all__ = ["LogCache"]

# Values a process cannot change in place: shared between activations.
_FROZEN = frozenset({*SCALARS, type(NO_VALUE)})


def _shareable(entry: LogEntry) -> bool:
    """Whether ``entry`` may be handed to more than one activation: nothing
    in it that process code is given can be changed in place."""
    value = entry.value
    if type(value) not in _FROZEN and (
        type(value) not in (tuple, frozenset) or any(type(v) not in _FROZEN for v in value)
    ):
        return False
    return entry.error is None and entry.ask is None and entry.extra is None


@attrs.define(slots=True)
class _Kept:
    """One run's log: its stored rows, and what was decoded of them."""

    rows: list[tuple[Any, bytes]]  # as `Reader.log_rows` gave them
    shared: dict[int, LogEntry]  # the shareable entries, by seq (never changed: replaced)
    # (seq, index in rows) of the entries decoded afresh at each use
    fresh: list[tuple[int, int]]
    size: int  # stored bytes


@attrs.define(slots=True)
class LogCache:
    """Decoded logs by ``(iid, run)``, least recently used first (see the module docstring)."""

    max_entries: int = 200_000
    max_bytes: int = 64 << 20
    _logs: OrderedDict[tuple[bytes, int], _Kept] = attrs.field(
        factory=OrderedDict, init=False, repr=False
    )
    _entries: int = attrs.field(default=0, init=False)
    _bytes: int = attrs.field(default=0, init=False)
    # hits and misses (a miss decodes the whole log): what the tests and benchmarks read
    hits: int = attrs.field(default=0, init=False)
    misses: int = attrs.field(default=0, init=False)
    # A remote journal reads in worker threads, several at once: the table
    # and its totals change under the lock. A log taken out of the table is
    # its reader's alone until it is put back (one actor per instance reads it).
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    def __len__(self) -> int:
        return len(self._logs)

    def entries(self, r: Reader, iid: bytes, run: int) -> dict[int, LogEntry]:
        """`Reader.entries` of ``r``: the same entries, decoding only the
        rows not kept here as they are stored now.

        Raises `JournalCorrupt` as `Reader.entries` does."""
        rows = r.log_rows(iid, run)
        if not rows:  # a fresh run's: nothing to keep
            return {}
        with self._lock:
            kept = self._take(iid, run)
        count = 0 if kept is None else len(kept.rows)
        # Invariant: a log is answered from here only if its stored rows
        # begin with exactly the rows it was decoded from (seqs and bytes).
        hit = kept is not None and len(rows) >= count and rows[:count] == kept.rows
        found = self._extend(r, kept, rows) if hit and kept is not None else None
        if found is None:  # new, changed, or a row the fast decoding refused
            entries = r.decode_log(iid, run, rows)  # (names a damaged row)
            kept = self._classify(rows, entries)
        else:
            kept, entries = found
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
            self._keep(iid, run, kept)
        return entries

    def kept(self) -> list[tuple[bytes, int]]:
        """The ``(iid, run)`` of each log it keeps, least recently used first."""
        with self._lock:
            return list(self._logs)

    def decoded(self) -> int:
        """How many decoded entries it keeps (those shared between wakes)."""
        with self._lock:
            return sum(len(kept.shared) for kept in self._logs.values())

    def forget(self, iid: bytes) -> None:
        """Drop every kept log of ``iid`` (to free its memory at once)."""
        with self._lock:
            for key in [key for key in self._logs if key[0] == iid]:
                self._take(*key)

    # -- inside --------------------------------------------------------------------

    def _take(self, iid: bytes, run: int) -> _Kept | None:
        kept = self._logs.pop((iid, run), None)
        if kept is not None:
            self._entries -= len(kept.rows)
            self._bytes -= kept.size
        return kept

    def _keep(self, iid: bytes, run: int, kept: _Kept) -> None:
        if len(kept.rows) > self.max_entries or kept.size > self.max_bytes:
            return
        self._logs[(iid, run)] = kept
        self._entries += len(kept.rows)
        self._bytes += kept.size
        while self._entries > self.max_entries or self._bytes > self.max_bytes:
            self._take(*next(iter(self._logs)))

    def _extend(
        self, r: Reader, kept: _Kept, rows: list[tuple[Any, bytes]]
    ) -> tuple[_Kept, dict[int, LogEntry]] | None:
        """``kept`` with ``rows`` past it decoded, and the log to hand out;
        None if a row does not decode the fast way."""
        start = len(kept.rows)
        shared, fresh = kept.shared, kept.fresh
        size = kept.size
        if len(rows) > start:
            tail = rows[start:]
            try:
                decoded = rd.decode_entries([value for _, value in tail])
            except Exception:  # noqa: BLE001 - the checked reading says what it was
                return None
            shared, fresh = dict(shared), list(fresh)
            for index, ((position, value), entry) in enumerate(
                zip(tail, decoded, strict=True), start
            ):
                seq = r.log_seq(position)
                size += len(value)
                if _shareable(entry):
                    shared[seq] = entry
                else:
                    fresh.append((seq, index))
        entries = shared
        if fresh:
            try:
                again = rd.decode_entries([rows[index][1] for _, index in fresh])
            except Exception:  # noqa: BLE001 - (as above)
                return None
            entries = dict(shared)
            entries.update(zip([seq for seq, _ in fresh], again, strict=True))
        return _Kept(rows, shared, fresh, size), entries

    @staticmethod
    def _classify(rows: list[tuple[Any, bytes]], entries: dict[int, LogEntry]) -> _Kept:
        """What to keep of ``entries``, just decoded from ``rows`` and handed
        out: the shareable ones (a new dict: the caller's is its own)."""
        shared: dict[int, LogEntry] = {}
        fresh: list[tuple[int, int]] = []
        size = 0
        # `Reader.decode_log` gives the entries in the rows' order (by seq).
        pairs = zip(entries.items(), rows, strict=True)
        for index, ((seq, entry), (_, value)) in enumerate(pairs):
            size += len(value)
            if _shareable(entry):
                shared[seq] = entry
            else:
                fresh.append((seq, index))
        return _Kept(rows, shared, fresh, size)
