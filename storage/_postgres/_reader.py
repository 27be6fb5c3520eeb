"""The PostgreSQL `Reader`: reads in one consistent snapshot.

A reader takes a pooled connection (`_pool`), configured for REPEATABLE READ, READ
ONLY transactions, so every read through it sees one snapshot, taken at its
first query. Pooled connections may die while idle (a server restart, an
idle timeout); until the snapshot is taken, another one will do. Large
results are paged by key within the snapshot (`_PAGE` rows a query).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from .. import _journal as j, _reading as rd, _shapes
from .._reader import InstanceRow, Reader, TimerRow
from .._records import LogEntry
from .._states import StateRow
from ..errors import JournalClosed, JournalCorrupt
from ._pool import _ReadPool
from ._schema import _SQL
from ._server import _rollback

_PAGE = 1000  # rows per query when a reader iterates instances


class _PostgresReader(Reader):
    __slots__ = ("_conn", "_entry", "_message", "_pool", "_sql", "_started")

    def __init__(self, pool: _ReadPool, sql: _SQL, shapes: bool = False) -> None:
        self._pool = pool
        self._sql = sql
        # The shape checks of `Journal.check_shapes`, or None.
        self._entry = _shapes.entry_problem if shapes else None
        self._message = _shapes.message_problem if shapes else None
        self._conn: psycopg.Connection | None = pool.getconn()
        self._started = False  # whether the snapshot has been taken

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _rollback(conn)
            self._pool.putconn(conn)

    def _rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        conn = self._conn
        if conn is None:
            raise JournalClosed(
                "this reader's 'with journal.reader()' block has ended; read inside it"
            )
        # The pooled connections may have died while idle (a server restart,
        # an idle timeout). Until the snapshot is taken, another one will do.
        attempts = 1 if self._started else self._pool.max_size + 1
        for attempt in range(attempts):
            try:
                with conn.cursor(binary=True) as cur:
                    cur.execute(query, params)
                    rows = cur.fetchall()
                break
            except psycopg.OperationalError:
                if not conn.broken or attempt == attempts - 1:
                    raise
                self._conn = None
                self._pool.putconn(conn)
                self._conn = conn = self._pool.getconn()
        self._started = True
        return rows

    def _one(self, query: str, params: Any = None) -> Any:
        rows = self._rows(query, params)
        return rows[0][0] if rows else None

    def _row(self, iid: bytes, address: str, process: str, code: int, record: bytes) -> InstanceRow:
        status = j.STATUS_NAME.get(code)
        if status is None:
            raise JournalCorrupt(
                f"instance {iid.hex()} has unknown status code {code}; it was written by a "
                "newer version of the library, or the row was edited by hand",
                database="instances",
                key=iid,
            )
        return InstanceRow(
            iid, address, process, status, rd.read_instance_record(record, iid, process)
        )

    def instance(self, iid: bytes) -> InstanceRow | None:
        rows = self._rows(self._sql.instance, [iid])
        return self._row(*rows[0]) if rows else None

    def instances(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        corrupt: list[j.CorruptRecord] | None = None,
    ) -> Iterator[InstanceRow]:
        # Pages by key within the one snapshot, so a big table is never loaded at once.
        query = self._sql.instances_page[(status is not None, process is not None)]
        after: tuple[int, bytes] = (0 if status is None else j.STATUS_CODE[status], b"")
        while True:
            params: list[Any] = list(after)
            if process is not None:
                params.append(process)
            rows = self._rows(query, [*params, _PAGE])
            for row in rows:
                try:
                    found = self._row(*row)
                except JournalCorrupt as exc:
                    if corrupt is None:
                        raise
                    name = j.STATUS_NAME.get(row[3], "unknown")
                    corrupt.append(j.CorruptRecord(row[0], row[1], row[2], name, exc))
                    continue
                yield found
            if len(rows) < _PAGE:
                return
            after = (rows[-1][3], rows[-1][0])

    def count_by_status(self) -> dict[str, int]:
        return {
            j.STATUS_NAME.get(code, "unknown"): count
            for code, count in self._rows(self._sql.count_by_status)
        }

    def log(self, iid: bytes, run: int) -> dict[int, Any]:
        return {
            seq: rd.decode_record(entry, "log", iid, self._entry)
            for seq, entry in self._rows(self._sql.log, [iid, run])
        }

    def entries(self, iid: bytes, run: int) -> dict[int, LogEntry]:
        rows = self._rows(self._sql.log, [iid, run])
        return rd.read_entries(rows, lambda seq: iid)  # each row is (seq, entry)

    def decode_log(
        self, iid: bytes, run: int, rows: list[tuple[int, bytes]]
    ) -> dict[int, LogEntry]:
        return rd.read_entries(rows, lambda seq: iid)

    def log_rows(self, iid: bytes, run: int) -> list[tuple[int, bytes]]:
        # (The rows travel; only their decoding is saved. A digest the server
        # computes would save the transfer too: not done yet.)
        return [(seq, bytes(entry)) for seq, entry in self._rows(self._sql.log, [iid, run])]

    def log_runs(self, iid: bytes) -> list[int]:
        return [run for (run,) in self._rows(self._sql.log_runs, [iid])]

    def mailbox(self, iid: bytes) -> list[tuple[int, Any]]:
        return [
            (seq, rd.decode_record(message, "mail", iid, self._message))
            for seq, message in self._rows(self._sql.mailbox, [iid])
        ]

    def mailbox_page(self, iid: bytes, start: int, limit: int) -> tuple[int, list[tuple[int, Any]]]:
        total = self._one(self._sql.mailbox_count, [iid]) or 0
        rows = self._rows(self._sql.mailbox_page, [iid, max(0, limit), max(0, start)])
        page = [(seq, rd.decode_record(m, "mail", iid, self._message)) for seq, m in rows]
        return total, page

    def mailboxes(self, iids: list[bytes]) -> dict[bytes, list[tuple[int, Any]]]:
        found: dict[bytes, list[tuple[int, Any]]] = {iid: [] for iid in iids}
        for iid, seq, message in self._rows(self._sql.mailboxes, [iids]):
            iid = bytes(iid)
            found[iid].append((seq, rd.decode_record(message, "mail", iid, self._message)))
        return found

    def owner(self, iid: bytes) -> str | None:
        found = self._one(self._sql.owner, [iid])
        return None if found is None else str(found)

    def last_message_seq(self, iid: bytes) -> int:
        return self._one(self._sql.last_message_seq, [iid]) or 0

    def instances_with_mail(self) -> Iterator[bytes]:
        return iter([iid for (iid,) in self._rows(self._sql.instances_with_mail)])

    def timers(self, iid: bytes) -> list[TimerRow]:
        return [
            TimerRow(due / 1e6, i, run, seq)
            for due, i, run, seq in self._rows(self._sql.timers, [iid])
        ]

    def due_timers(
        self, now: float, limit: int = 1000, after: float | None = None
    ) -> list[TimerRow]:
        if limit <= 0:
            return []
        low = -1 if after is None else j.due_us(after)
        return [
            TimerRow(due / 1e6, iid, run, seq)
            for due, iid, run, seq in self._rows(self._sql.due_timers, [low, j.due_us(now), limit])
        ]

    def next_due(self, after: float | None = None) -> float | None:
        low = -1 if after is None else j.due_us(after)
        due = self._one(self._sql.next_due, [low])
        return None if due is None else due / 1e6

    def stream(self, iid: bytes, start: int = 0, limit: int = 1000) -> list[tuple[int, Any]]:
        if limit <= 0:
            return []
        return [
            (idx, rd.decode_record(value, "stream", iid))
            for idx, value in self._rows(self._sql.stream, [iid, max(0, start), start + limit])
        ]

    def stream_length(self, iid: bytes) -> int:
        return self._one(self._sql.stream_length, [iid]) or 0

    def cursors(self, iid: bytes) -> dict[str, int]:
        return dict(self._rows(self._sql.cursors, [iid]))

    def states(self, prefix: str, limit: int | None = None) -> list[StateRow]:
        return [
            StateRow(key, version, rd.decode_record(bytes(value), "states", key.encode()))
            for key, version, value in self._state_rows(prefix, limit)
        ]

    def _state_rows(self, prefix: str, limit: int | None) -> list[Any]:
        last = ord(prefix[-1]) if prefix else 0x10FFFF
        if last >= 0x10FFFF or 0xD7FF <= last < 0xE000:  # no next character to bound it
            return self._rows(self._sql.states, [prefix, limit])
        upper = prefix[:-1] + chr(last + 1)
        return self._rows(self._sql.states_range, [prefix, upper, prefix, limit])

    def has_records(self, iid: bytes) -> bool:
        return bool(self._one(self._sql.has_records, {"i": iid}))

    def size_bytes(self, schema: str) -> int:
        """The bytes the tables of ``schema`` take on the server."""
        size: int = self._one(self._sql.size, [schema])
        return size

    def clock(self) -> float:
        """The server's clock now (not the snapshot's start), in epoch seconds."""
        return float(self._one(self._sql.clock))
