"""`MemoryJournal`: the journal's semantics in memory, for tests and for
users who want no persistence."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import _journal as j, _reading as rd, _shapes, _states
from ._journal import CorruptRecord, InstanceRow, Journal, Reader, Settled, Ticket, TimerRow, Txn
from ._records import LogEntry
from .errors import JournalClosed, JournalCorrupt, JournalLocked

__all__ = ["MemoryJournal"]


class MemoryJournal(Journal):
    """A journal held in this process's memory.

    Same semantics as `LMDBJournal` (values go through the codec, so what
    reads back is a fresh copy), nothing survives the process. The object
    keeps its data across ``close``/``open``, so a test can close a system
    and open a new one on the same journal to exercise recovery.
    """

    def __init__(self) -> None:
        self.durability = "sync"
        self.lost_chains = j.LostChains()  # (none here: every commit is applied at once)
        self._open = False
        # iid -> (status code, process, address, record bytes)
        self._instances: dict[bytes, tuple[int, str, str, bytes]] = {}
        self._logs: dict[bytes, dict[int, dict[int, bytes]]] = {}
        self._mail: dict[bytes, dict[int, bytes]] = {}
        self._mail_next: dict[bytes, int] = {}
        self._timers: dict[tuple[bytes, int, int], int] = {}
        # Invariant: every live timer has an entry here; entries whose due no
        # longer matches self._timers are stale and skipped.
        self._timer_heap: list[tuple[int, bytes, int, int]] = []
        self._streams: dict[bytes, list[bytes]] = {}
        self._cursors: dict[bytes, dict[str, int]] = {}
        self._states: dict[str, tuple[int, bytes]] = {}  # key -> (version, value)
        # Invariant: the keys of _states, sorted, so a prefix is a range
        # (`states` reads the identity index's buckets without a scan).
        self._state_keys: list[str] = []

    async def open(self) -> None:
        if self._open:
            raise JournalLocked(
                "this MemoryJournal is already owned by an open system; close that "
                "system first, or give each system its own MemoryJournal()"
            )
        self._open = True

    async def close(self) -> None:
        self._open = False

    def _check_open(self) -> None:
        if not self._open:
            raise JournalClosed(
                "the journal is not open; use it inside 'async with actors.open_system(...)' "
                "or 'async with journal:'"
            )

    def submit(self, txn: Txn) -> Ticket:
        self._check_open()
        outcome: list[int] | BaseException = self._run(txn)
        if txn.then is not None:  # handed on before its committer resumes
            outcome = txn.hand_on(outcome)
        return Settled(outcome)

    def _run(self, txn: Txn) -> list[int] | Exception:
        """Check ``txn``'s preconditions and apply it, all or nothing: its
        results, or the exception it failed with (nothing applied)."""
        try:
            if txn.requires:
                j.check_requires(txn.requires, self._status_code, self._incarnation)
            if txn.expects:
                _states.check_expects(txn.expects, self._state_version)
            if txn.fresh_cursors:
                j.check_fresh_cursors(
                    txn.fresh_cursors, lambda iid, name: name in self._cursors.get(iid, {})
                )
        except Exception as exc:
            return exc
        if txn.results:  # it appends
            try:
                self._check_appends(txn)
            except JournalCorrupt as exc:
                return exc
        results: list[int] = []
        for op in txn.ops:
            self._apply(op, results)
        if txn.claims is not None:
            results.append(0)  # a single owner's epoch (see Journal.claim)
        return results

    def _check_appends(self, txn: Txn) -> None:
        """Fail the transaction, before any of it applies, if a message it
        appends would take a number that holds an unread message.

        Invariant: a message once written is only ever taken, never replaced
        (a lost counter must not make a send overwrite one).
        """
        next_seq: dict[bytes, int] = {}
        emptied: set[bytes] = set()
        for op in txn.ops:
            if op[0] == j.DELETE_INSTANCE:
                emptied.add(op[1])
                next_seq[op[1]] = 1
            elif op[0] == j.APPEND_MESSAGE:
                iid = op[1]
                seq = next_seq.get(iid) or self._mail_next.get(iid, 1)
                next_seq[iid] = seq + 1
                if iid not in emptied and seq in self._mail.get(iid, {}):
                    raise rd.corrupt(
                        "mail",
                        _mail_key(iid, seq),
                        "already exists where a new one was to be written (the instance's "
                        "message counter was damaged or lost); nothing was overwritten",
                    )

    def _state_version(self, key: str) -> int:
        found = self._states.get(key)
        return 0 if found is None else found[0]

    def _status_code(self, iid: bytes) -> int | None:
        row = self._instances.get(iid)
        return None if row is None else row[0]

    def _incarnation(self, iid: bytes) -> int:
        return j.stored_incarnation(self._instances[iid][3], iid)

    def _apply(self, op: tuple[Any, ...], results: list[int]) -> None:
        code = op[0]
        if code == j.PUT_LOG:
            _, iid, run, seq, entry = op
            self._logs.setdefault(iid, {}).setdefault(run, {})[seq] = entry
        elif code == j.TAKE_MESSAGE:
            box = self._mail.get(op[1])
            if box is not None:
                box.pop(op[2], None)
        elif code == j.APPEND_MESSAGE:
            _, iid, message = op
            seq = self._mail_next.get(iid, 1)
            self._mail_next[iid] = seq + 1
            self._mail.setdefault(iid, {})[seq] = message
            results.append(seq)
        elif code == j.PUT_INSTANCE:
            _, iid, status, process, address, record = op
            self._instances[iid] = (status, process, address, record)
        elif code == j.SET_STATUS:
            _, iid, status = op
            row = self._instances.get(iid)
            if row is not None:
                self._instances[iid] = (status, *row[1:])
        elif code == j.ADD_TIMER:
            _, iid, run, seq, due = op
            self._timers[(iid, run, seq)] = due
            heapq.heappush(self._timer_heap, (due, iid, run, seq))
        elif code == j.CANCEL_TIMER:
            self._timers.pop((op[1], op[2], op[3]), None)
        elif code == j.DROP_LOG:
            runs = self._logs.get(op[1])
            if runs is not None:
                runs.pop(op[2], None)
        elif code == j.APPEND_STREAM:
            values = self._streams.setdefault(op[1], [])
            values.append(op[2])
            results.append(len(values) - 1)
        elif code == j.SET_CURSOR:
            self._cursors.setdefault(op[1], {})[op[2]] = op[3]
        elif code == j.DELETE_CURSOR:
            self._cursors.get(op[1], {}).pop(op[2], None)
        elif code == j.DELETE_INSTANCE:
            iid = op[1]
            self._instances.pop(iid, None)
            self._logs.pop(iid, None)
            self._mail.pop(iid, None)
            self._mail_next.pop(iid, None)
            self._streams.pop(iid, None)
            self._cursors.pop(iid, None)
            for key in [k for k in self._timers if k[0] == iid]:
                del self._timers[key]
        elif code == _states.PUT_STATE:
            key = op[1]
            if key not in self._states:
                bisect.insort(self._state_keys, key)
            self._states[key] = (self._state_version(key) + 1, op[2])
        elif code == _states.DELETE_STATE:
            if self._states.pop(op[1], None) is not None:
                del self._state_keys[bisect.bisect_left(self._state_keys, op[1])]
        else:  # pragma: no cover - a programming error in the runtime
            raise ValueError(f"unknown journal op {code}")

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        self._check_open()
        yield _MemoryReader(self)

    def describe(self) -> str:
        return "MemoryJournal()"


def _mail_key(iid: bytes, seq: int) -> bytes:
    """The key LMDB would store message ``seq`` of ``iid`` under, for errors."""
    return iid + seq.to_bytes(8, "big")


class _MemoryReader(Reader):
    __slots__ = ("_entry", "_j", "_message")

    def __init__(self, journal: MemoryJournal) -> None:
        self._j = journal
        # The shape checks of `Journal.check_shapes`, or None.
        shapes = journal.check_shapes
        self._entry = _shapes.entry_problem if shapes else None
        self._message = _shapes.message_problem if shapes else None

    def _row(self, iid: bytes, row: tuple[int, str, str, bytes]) -> InstanceRow:
        status, process, address, data = row
        record = rd.read_instance_record(data, iid, process)
        return InstanceRow(iid, address, process, j.STATUS_NAME[status], record)

    def instance(self, iid: bytes) -> InstanceRow | None:
        row = self._j._instances.get(iid)
        return None if row is None else self._row(iid, row)

    def instances(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        corrupt: list[CorruptRecord] | None = None,
    ) -> Iterator[InstanceRow]:
        code = None if status is None else j.STATUS_CODE[status]
        rows = sorted(self._j._instances.items(), key=lambda kv: (kv[1][0], kv[0]))
        for iid, row in rows:
            if (code is None or row[0] == code) and (process is None or row[1] == process):
                try:
                    found = self._row(iid, row)
                except JournalCorrupt as exc:
                    if corrupt is None:
                        raise
                    name = j.STATUS_NAME.get(row[0], "unknown")
                    corrupt.append(CorruptRecord(iid, row[2], row[1], name, exc))
                    continue
                yield found

    def count_by_status(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self._j._instances.values():
            name = j.STATUS_NAME[row[0]]
            counts[name] = counts.get(name, 0) + 1
        return counts

    def log(self, iid: bytes, run: int) -> dict[int, Any]:
        entries = self._j._logs.get(iid, {}).get(run, {})
        return {
            seq: rd.decode_record(
                v, "log", iid + run.to_bytes(4, "big") + seq.to_bytes(4, "big"), self._entry
            )
            for seq, v in sorted(entries.items())
        }

    def entries(self, iid: bytes, run: int) -> dict[int, LogEntry]:
        return self.decode_log(iid, run, self.log_rows(iid, run))

    def log_rows(self, iid: bytes, run: int) -> list[tuple[int, bytes]]:
        return sorted(self._j._logs.get(iid, {}).get(run, {}).items())

    def decode_log(
        self, iid: bytes, run: int, rows: list[tuple[int, bytes]]
    ) -> dict[int, LogEntry]:
        prefix = iid + run.to_bytes(4, "big")
        return rd.read_entries(rows, lambda seq: prefix + seq.to_bytes(4, "big"))

    def log_runs(self, iid: bytes) -> list[int]:
        return sorted(run for run, entries in self._j._logs.get(iid, {}).items() if entries)

    def mailbox(self, iid: bytes) -> list[tuple[int, Any]]:
        box = [
            (seq, rd.decode_record(v, "mail", _mail_key(iid, seq), self._message))
            for seq, v in sorted(self._j._mail.get(iid, {}).items())
        ]
        if box and box[-1][0] > self.last_message_seq(iid):
            raise rd.corrupt(
                "counters",
                iid + b"m",
                f"says fewer messages were sent than the mailbox holds (up to {box[-1][0]})",
            )
        return box

    def last_message_seq(self, iid: bytes) -> int:
        return self._j._mail_next.get(iid, 1) - 1

    def instances_with_mail(self) -> Iterator[bytes]:
        return iter([iid for iid, box in self._j._mail.items() if box])

    def timers(self, iid: bytes) -> list[TimerRow]:
        rows = [
            TimerRow(due / 1e6, i, run, seq)
            for (i, run, seq), due in self._j._timers.items()
            if i == iid
        ]
        return sorted(rows, key=lambda t: (t.due, t.run, t.seq))

    def _live_heap(self) -> list[tuple[int, bytes, int, int]]:
        heap = self._j._timer_heap
        timers = self._j._timers
        while heap and timers.get(heap[0][1:]) != heap[0][0]:
            heapq.heappop(heap)
        return heap

    def due_timers(
        self, now: float, limit: int = 1000, after: float | None = None
    ) -> list[TimerRow]:
        bound = j.due_us(now)
        low = -1 if after is None else j.due_us(after)
        rows = [
            TimerRow(due / 1e6, iid, run, seq)
            for (iid, run, seq), due in self._j._timers.items()
            if low < due <= bound
        ]
        rows.sort(key=lambda t: (t.due, t.iid, t.run, t.seq))
        return rows[:limit]

    def next_due(self, after: float | None = None) -> float | None:
        heap = self._live_heap()
        if after is None:
            return heap[0][0] / 1e6 if heap else None
        low = j.due_us(after)
        later = [due for due in self._j._timers.values() if due > low]
        return min(later) / 1e6 if later else None

    def stream(self, iid: bytes, start: int = 0, limit: int = 1000) -> list[tuple[int, Any]]:
        values = self._j._streams.get(iid, [])
        return [
            (i, rd.decode_record(values[i], "stream", iid + i.to_bytes(8, "big")))
            for i in range(max(0, start), min(len(values), start + limit))
        ]

    def stream_length(self, iid: bytes) -> int:
        return len(self._j._streams.get(iid, []))

    def cursor(self, iid: bytes, consumer: str) -> int | None:
        return self._j._cursors.get(iid, {}).get(consumer)

    def cursors(self, iid: bytes) -> dict[str, int]:
        return dict(self._j._cursors.get(iid, {}))

    def states(self, prefix: str, limit: int | None = None) -> list[_states.StateRow]:
        ordered = self._j._state_keys
        keys: list[str] = []
        at = bisect.bisect_left(ordered, prefix)
        while at < len(ordered) and ordered[at].startswith(prefix):
            if limit is not None and len(keys) >= limit:
                break
            keys.append(ordered[at])
            at += 1
        found = []
        for key in keys:
            version, value = self._j._states[key]
            found.append(
                _states.StateRow(key, version, rd.decode_record(value, "states", key.encode()))
            )
        return found

    def has_records(self, iid: bytes) -> bool:
        jr = self._j
        return (
            iid in jr._instances
            or any(jr._logs.get(iid, {}).values())
            or bool(jr._mail.get(iid))
            or bool(jr._streams.get(iid))
            or bool(jr._cursors.get(iid))
            or any(k[0] == iid for k in jr._timers)
        )
