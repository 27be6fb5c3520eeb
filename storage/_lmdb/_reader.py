"""`_LMDBReader`: one read snapshot of an LMDB journal.

A reader wraps one LMDB read transaction (`LMDBJournal.reader` opens it
under the journal's read lock, so the writer never resizes the map beneath
it): every method is a point lookup or a prefix scan of the `_layout`
databases, and every record it decodes is checked, naming the database and
key of a damaged one (`JournalCorrupt`), and, when the journal's
``check_shapes`` is on, the shape of what decoded (`storage._shapes`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from itertools import takewhile
from operator import itemgetter
from typing import Any

import lmdb
import msgpack

from .. import _journal as j, _reading as rd, _shapes
from .._reader import CorruptRecord, InstanceRow, Reader, TimerRow
from .._records import LogEntry
from .._states import STATE_PREFIX, StateRow
from ..errors import JournalCorrupt
from ._layout import (
    _H,
    _LOG_KEY,
    _MAIL_COUNTER,
    _Q,
    _RUN_SEQ,
    _STREAM_COUNTER,
    _TIMER_KEY,
    _prefix_end,
)


def _header_address(value: bytes) -> str | None:
    """The address in an instance value's header (status(1) hlen(2)
    [address, process]), which may read when the record after it does not."""
    try:
        hlen = _H.unpack_from(value, 1)[0]
        address = msgpack.unpackb(value[3 : 3 + hlen])[0]
    except Exception:  # noqa: BLE001 - a best effort on a broken value
        return None
    return address if isinstance(address, str) else None


def _check_index(iid: bytes, expected: int, found: int, length: int) -> None:
    """Raise `JournalCorrupt` unless the stream index ``found`` of ``iid`` is
    the one expected next, below the stream's counter ``length``."""
    if found >= length:
        raise rd.corrupt(
            "counters",
            iid + _STREAM_COUNTER,
            f"says {length} values were emitted, but the stream holds index {found}",
        )
    if found != expected:
        raise _missing_value(iid, expected, f"the stream goes on at index {found}")


def _missing_value(iid: bytes, index: int, why: str) -> JournalCorrupt:
    return rd.corrupt(
        "stream", iid + _Q.pack(index), f"is missing ({why}), so value {index} was lost"
    )


# `listing` keeps a value of up to this many bytes to compare with the next
# read of it, and the hash of a longer one.
_SAME = 256


class _LMDBReader(Reader):
    __slots__ = ("_dbs", "_entry", "_message", "_txn")

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: dict[str, Any], shapes: bool) -> None:
        self._txn = txn
        self._dbs = dbs
        # The shape checks of `Journal.check_shapes`, or None.
        self._entry = _shapes.entry_problem if shapes else None
        self._message = _shapes.message_problem if shapes else None

    def _scan(self, name: str, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        with self._txn.cursor(db=self._dbs[name]) as cur:
            if not cur.set_range(prefix):
                return
            for key, value in cur:
                if not key.startswith(prefix):
                    return
                yield key, value

    def _row(self, iid: bytes, value: bytes) -> InstanceRow:
        try:
            hlen = _H.unpack_from(value, 1)[0]
            address, process = msgpack.unpackb(value[3 : 3 + hlen])
            status = j.STATUS_NAME[value[0]]
            if not (isinstance(address, str) and isinstance(process, str)):
                raise TypeError(f"address and process are {address!r} and {process!r}")
        except Exception as exc:
            raise JournalCorrupt(
                f"record {iid.hex()} in database 'instances' has a broken header ({exc!r}); "
                "the instance it belongs to is marked corrupt and every other instance keeps "
                "working; restore the journal from a backup or clean the instance up",
                database="instances",
                key=iid,
            ) from exc
        record = rd.read_instance_record(value[3 + hlen :], iid, process)
        return InstanceRow(iid, address, process, status, record)

    def instance(self, iid: bytes) -> InstanceRow | None:
        value = self._txn.get(iid, db=self._dbs["instances"])
        return None if value is None else self._row(iid, value)

    def instances(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        corrupt: list[CorruptRecord] | None = None,
    ) -> Iterator[InstanceRow]:
        prefix = b"" if status is None else bytes((j.STATUS_CODE[status],))
        wanted = None if process is None else process.encode()
        get = self._txn.get
        db = self._dbs["instances"]
        for key, proc in self._scan("status", prefix):
            if wanted is not None and proc != wanted:
                continue
            value = get(key[1:], db=db)
            if value is None:
                continue
            try:
                row = self._row(key[1:], value)
            except JournalCorrupt as exc:
                if corrupt is None:
                    raise
                corrupt.append(
                    CorruptRecord(
                        key[1:],
                        _header_address(value),
                        proc.decode(errors="replace"),
                        j.STATUS_NAME.get(key[0], "unknown"),
                        exc,
                    )
                )
                continue
            yield row

    def count_by_status(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for key, _ in self._scan("status", b""):
            name = j.STATUS_NAME.get(key[0], "unknown")
            counts[name] = counts.get(name, 0) + 1
        return counts

    def log(self, iid: bytes, run: int) -> dict[int, Any]:
        prefix = iid + struct.pack(">I", run)
        return {
            _RUN_SEQ.unpack_from(rd.key_size(key, 24, "log"), 16)[1]: rd.decode_record(
                value, "log", key, self._entry
            )
            for key, value in self._scan("log", prefix)
        }

    def entries(self, iid: bytes, run: int) -> dict[int, LogEntry]:
        return self.decode_log(iid, run, self.log_rows(iid, run))

    def log_rows(self, iid: bytes, run: int) -> list[tuple[bytes, bytes]]:
        # (key, value) as the cursor gives them, in one pass, in C: the key holds the seq.
        prefix = iid + struct.pack(">I", run)
        end = _prefix_end(prefix)
        with self._txn.cursor(db=self._dbs["log"]) as cur:
            if not cur.set_range(prefix):
                return []
            # The pairs whose key sorts below the prefix's end: those that
            # start with the prefix (a tuple (key, value) sorts below (end,)
            # exactly when key < end).
            pairs = cur.iternext() if end is None else takewhile((end,).__gt__, cur.iternext())
            return list(pairs)

    def log_seq(self, position: Any) -> int:
        return int(_LOG_KEY.unpack(position)[1])

    def decode_log(
        self, iid: bytes, run: int, rows: list[tuple[bytes, bytes]]
    ) -> dict[int, LogEntry]:
        # A wake reads every entry of the run: each entry read the fast way
        # (`_reading.decode_entries`); if any of them will not read so, they
        # are all read again the checked way, which names the damaged one.
        if not rows:
            return {}  # no log yet (a fresh run)
        try:
            keys, values = zip(*rows, strict=False)
            # _LOG_KEY.unpack refuses a key of another size than the layout's.
            seqs = map(itemgetter(1), map(_LOG_KEY.unpack, keys))
            return dict(zip(seqs, rd.decode_entries(values), strict=True))
        except Exception:  # noqa: BLE001 - the checked reading says what it was
            pass
        return {
            _RUN_SEQ.unpack_from(rd.key_size(key, 24, "log"), 16)[1]: rd.read_entry(value, key)
            for key, value in rows
        }

    def log_runs(self, iid: bytes) -> list[int]:
        runs: list[int] = []
        with self._txn.cursor(db=self._dbs["log"]) as cur:
            key_from = iid
            while cur.set_range(key_from):
                key = cur.key()
                if not key.startswith(iid):
                    break
                run = _RUN_SEQ.unpack_from(rd.key_size(key, 24, "log"), 16)[0]
                runs.append(run)
                key_from = iid + struct.pack(">I", run + 1)
                if run == 0xFFFFFFFF:
                    break
        return runs

    def mailbox(self, iid: bytes) -> list[tuple[int, Any]]:
        box = [
            (
                _Q.unpack_from(rd.key_size(key, 24, "mail"), 16)[0],
                rd.decode_record(value, "mail", key, self._message),
            )
            for key, value in self._scan("mail", iid)
        ]
        if box and box[-1][0] > self.last_message_seq(iid):
            raise rd.corrupt(
                "counters",
                iid + _MAIL_COUNTER,
                f"says fewer messages were sent than the mailbox holds (up to {box[-1][0]})",
            )
        return box

    def mailbox_page(self, iid: bytes, start: int, limit: int) -> tuple[int, list[tuple[int, Any]]]:
        # The keys are counted (no value is copied); the page's values alone
        # are decoded.
        end = _prefix_end(iid)
        page: list[tuple[int, Any]] = []
        with self._txn.cursor(db=self._dbs["mail"]) as cur:
            keys = cur.iternext(values=False) if cur.set_range(iid) else iter(())
            total = sum(1 for _ in takewhile(lambda k: end is None or k < end, keys))
            if start < total and limit > 0 and cur.set_range(iid):
                for _ in range(start):
                    cur.next()
                for key, value in cur:
                    if len(page) >= limit or not key.startswith(iid):
                        break
                    seq = _Q.unpack_from(rd.key_size(key, 24, "mail"), 16)[0]
                    page.append((seq, rd.decode_record(value, "mail", key, self._message)))
        return total, page

    def listing(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        memo: dict[bytes, Any] | None = None,
    ) -> list[j.Listed]:
        # One pass over the instances database: the status byte, the header
        # and the record's "updated" field; no record is checked or built.
        # With a memo, a value equal to the one read last time (compared
        # whole up to _SAME bytes, by its 64-bit hash above) gives last
        # time's tuple; the memo holds one entry per instance there is.
        code = None if status is None else j.STATUS_CODE[status]
        seen: dict[bytes, tuple[bytes | int, j.Listed]] = {} if memo is None else memo
        rows: list[j.Listed] = []
        scanned = 0
        with self._txn.cursor(db=self._dbs["instances"]) as cur:
            for iid, value in cur.iternext():
                held = value[0] if value else -1  # the status's code
                if code is not None and held != code:
                    continue
                scanned += 1
                stamp = value if len(value) <= _SAME else hash(value)
                known = seen.get(iid)
                if known is not None and known[0] == stamp:
                    row = known[1]
                else:
                    row = self._listed(iid, value, held)
                    seen[iid] = (stamp, row)
                if process is None or row[4] == process:
                    rows.append(row)
        if len(seen) > scanned:  # some may be gone: forget those
            with self._txn.cursor(db=self._dbs["instances"]) as cur:
                alive = set(cur.iternext(values=False))
            for iid in [i for i in seen if i not in alive]:
                del seen[iid]
        return rows

    def _listed(self, iid: bytes, value: bytes, held: int) -> j.Listed:
        address, proc, updated = None, "?", 0.0
        try:
            hlen = _H.unpack_from(value, 1)[0]
            address, proc = msgpack.unpackb(value[3 : 3 + hlen])
            updated = rd.decode_record(value[3 + hlen :], "instances", iid).get("updated")
        except Exception:  # noqa: BLE001 - listed; reading it says what is wrong
            address = address if isinstance(address, str) else _header_address(value)
            indexed = self._txn.get(value[:1] + iid, db=self._dbs["status"])
            proc = indexed.decode(errors="replace") if indexed is not None else "?"
        if not isinstance(updated, (int, float)):
            updated = 0.0
        name = j.STATUS_NAME.get(held, "unknown")
        proc = proc if isinstance(proc, str) else "?"
        return (-float(updated), address or f"? {iid.hex()}", iid, name, proc)

    def change_marker(self) -> int | None:
        return self._txn.id()

    def last_message_seq(self, iid: bytes) -> int:
        key = iid + _MAIL_COUNTER
        found = self._txn.get(key, db=self._dbs["counters"])
        return 0 if found is None else rd.number(found, "counters", key)

    def instances_with_mail(self) -> Iterator[bytes]:
        with self._txn.cursor(db=self._dbs["mail"]) as cur:
            key_from = b""
            while cur.set_range(key_from):
                iid = cur.key()[:16]
                yield iid
                end = _prefix_end(iid)
                if end is None:
                    return
                key_from = end

    def timers(self, iid: bytes) -> list[TimerRow]:
        rows = []
        for key, value in self._scan("timer_ids", iid):
            run, seq = _RUN_SEQ.unpack_from(rd.key_size(key, 24, "timer_ids"), 16)
            due = rd.number(value, "timer_ids", key)
            # Invariant: a timer is in both databases; one missing from the
            # due-time index would never fire.
            if self._txn.get(value + key, db=self._dbs["timers"]) is None:
                raise rd.corrupt("timers", value + key, "is missing, so the timer would never fire")
            rows.append(TimerRow(due / 1e6, iid, run, seq))
        rows.sort(key=lambda t: (t.due, t.run, t.seq))
        return rows

    def due_timers(
        self, now: float, limit: int = 1000, after: float | None = None
    ) -> list[TimerRow]:
        bound = j.due_us(now)
        rows: list[TimerRow] = []
        with self._txn.cursor(db=self._dbs["timers"]) as cur:
            start = b"" if after is None else _Q.pack(j.due_us(after) + 1)
            if not cur.set_range(start):
                return rows
            for key in cur.iternext(values=False):
                if len(key) != _TIMER_KEY:
                    continue  # see _TIMER_KEY
                due = _Q.unpack_from(key)[0]
                if due > bound or len(rows) >= limit:
                    break
                run, seq = _RUN_SEQ.unpack_from(key, 24)
                rows.append(TimerRow(due / 1e6, key[8:24], run, seq))
        return rows

    def next_due(self, after: float | None = None) -> float | None:
        with self._txn.cursor(db=self._dbs["timers"]) as cur:
            start = b"" if after is None else _Q.pack(j.due_us(after) + 1)
            if not cur.set_range(start):
                return None
            for key in cur.iternext(values=False):
                if len(key) == _TIMER_KEY:  # see _TIMER_KEY
                    due_us: int = _Q.unpack_from(key)[0]
                    return due_us / 1e6
            return None

    def stream(self, iid: bytes, start: int = 0, limit: int = 1000) -> list[tuple[int, Any]]:
        # Invariant: indexes run without a gap from 0 to the counter; a value
        # that is missing is reported, never skipped.
        rows: list[tuple[int, Any]] = []
        start = max(0, start)
        length = self.stream_length(iid)
        with self._txn.cursor(db=self._dbs["stream"]) as cur:
            if cur.set_range(iid + _Q.pack(start)):
                for key, value in cur:
                    if not key.startswith(iid) or len(rows) >= limit:
                        break
                    index = _Q.unpack_from(rd.key_size(key, 24, "stream"), 16)[0]
                    _check_index(iid, start + len(rows), index, length)
                    rows.append((index, rd.decode_record(value, "stream", key)))
        if len(rows) < limit and start + len(rows) < length:
            raise _missing_value(iid, start + len(rows), f"the counter says {length} were emitted")
        return rows

    def stream_length(self, iid: bytes) -> int:
        key = iid + _STREAM_COUNTER
        found = self._txn.get(key, db=self._dbs["counters"])
        return 0 if found is None else rd.number(found, "counters", key)

    def cursor(self, iid: bytes, consumer: str) -> int | None:
        key = iid + consumer.encode()
        value = self._txn.get(key, db=self._dbs["cursors"])
        return None if value is None else rd.number(bytes(value), "cursors", key)

    def cursors(self, iid: bytes) -> dict[str, int]:
        found = {}
        for key, value in self._scan("cursors", iid):
            try:
                consumer = key[16:].decode()
            except UnicodeDecodeError as exc:
                raise rd.corrupt("cursors", key, "names its consumer in broken UTF-8") from exc
            found[consumer] = rd.number(value, "cursors", key)
        if found and max(found.values()) > self.stream_length(iid):
            consumer = max(found, key=found.__getitem__)
            raise rd.corrupt(
                "cursors",
                iid + consumer.encode(),
                f"puts consumer {consumer!r} at {found[consumer]}, past the values emitted",
            )
        return found

    def states(self, prefix: str, limit: int | None = None) -> list[StateRow]:
        found: list[StateRow] = []
        for key, value in self._scan("meta", STATE_PREFIX + prefix.encode()):
            if limit is not None and len(found) >= limit:
                break
            version = rd.number(value[:8], "meta", key)
            decoded = rd.decode_record(value[8:], "meta", key)
            found.append(StateRow(key[len(STATE_PREFIX) :].decode(), version, decoded))
        return found

    def has_records(self, iid: bytes) -> bool:
        if self._txn.get(iid, db=self._dbs["instances"]) is not None:
            return True
        return any(
            next(self._scan(name, iid), None) is not None
            for name in ("log", "mail", "timer_ids", "stream", "cursors", "counters")
        )
