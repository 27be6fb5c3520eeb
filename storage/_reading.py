"""Reading stored values back: each failure is `JournalCorrupt` naming the
database and key of the record, so only its instance is marked corrupt.
Every journal's reader decodes through these."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

from ._codec import decode, stream_unpacker
from ._records import ENTRY_READERS, InstanceRecord, LogEntry, RecordShapeError
from .errors import JournalCorrupt

__all__ = [
    "corrupt",
    "decode_entries",
    "decode_record",
    "key_size",
    "number",
    "read_entries",
    "read_entry",
    "read_instance_record",
]


def corrupt(database: str, key: bytes, problem: str) -> JournalCorrupt:
    """The error for stored record ``key`` of ``database`` that is unusable."""
    return JournalCorrupt(
        f"record {key.hex()} in database {database!r} {problem}; the instance it belongs "
        "to is marked corrupt and every other instance keeps working; restore the journal "
        "from a backup or clean the instance up",
        database=database,
        key=key,
    )


def decode_record(
    data: bytes, database: str, key: bytes, shape: Callable[[Any], str | None] | None = None
) -> Any:
    """Decode a stored value, turning any failure into `JournalCorrupt`.

    ``shape`` (a ``*_problem`` function of `storage._shapes`) checks what decoded:
    valid msgpack of the wrong shape is as corrupt as bytes that do not decode.
    """
    try:
        value = decode(data)
    except Exception as exc:
        raise corrupt(database, key, f"does not decode ({exc})") from exc
    problem = None if shape is None else shape(value)
    if problem is not None:
        raise corrupt(database, key, f"has the wrong shape: {problem}")
    return value


def read_instance_record(data: bytes, key: bytes, process: str) -> InstanceRecord:
    """Decode an instance's stored record and check its shape, including its
    path params against ``process``; any failure is `JournalCorrupt` naming
    the database and ``key``."""
    value = decode_record(data, "instances", key)
    try:
        record = InstanceRecord.from_stored(value)
    except RecordShapeError as exc:
        raise corrupt("instances", key, f"has the wrong shape: {exc}") from None
    except TypeError as exc:  # not a map of field names
        raise corrupt("instances", key, f"has the wrong shape: {exc}") from None
    problem = record.params_problem(process)
    if problem is not None:
        raise corrupt("instances", key, f"has the wrong shape: {problem}")
    return record


def read_entry(data: bytes, key: bytes) -> LogEntry:
    """Decode a stored log entry into a `LogEntry`; any failure is
    `JournalCorrupt` naming the database and ``key``."""
    value = decode_record(data, "log", key)
    try:
        return LogEntry.from_stored(value)
    except RecordShapeError as exc:
        raise corrupt("log", key, f"has the wrong shape: {exc}") from None


def read_entries(rows: list[tuple[int, bytes]], key: Callable[[int], bytes]) -> dict[int, LogEntry]:
    """The log entries of ``rows`` (seq, stored value), by seq: a run's log.

    Read the fast way (`decode_entries`; the LMDB reader does the same with
    its cursor's rows); if any entry will not read so, all are read again
    one by one, and the first damaged one is `JournalCorrupt` naming the
    database and ``key(seq)``."""
    if not rows:
        return {}
    try:
        return dict(
            zip([seq for seq, _ in rows], decode_entries([value for _, value in rows]), strict=True)
        )
    except Exception:  # noqa: BLE001 - the checked reading says what it was
        pass
    return {seq: read_entry(value, key(seq)) for seq, value in rows}


def decode_entries(values: Sequence[bytes]) -> list[LogEntry]:
    """The entries of ``values`` (stored log entries), in order, decoded in
    one pass: a wake reads every entry of a run's log, so this is its hot
    loop.

    It takes only what `read_entry` takes, and makes the same entries of
    it; for anything else it raises (any exception: the caller then reads
    each value with `read_entry`, which says what is wrong)."""
    # One unpacker over all the values, iterated in C; each entry of a
    # shape seen before goes straight to the reader made for that shape.
    unpacker = stream_unpacker()
    unpacker.feed(b"".join(values))
    tell, readers = unpacker.tell, ENTRY_READERS
    found: list[LogEntry] = []
    append = found.append
    for stored, end in zip(unpacker, accumulate(map(len, values)), strict=False):
        # Invariant: each value holds exactly one encoding: the unpacker
        # stops where the value ends (a value holding two, or part of one,
        # goes the checked way).
        if tell() != end or stored.__class__ is not dict:
            raise ValueError("a log entry that only the checked way reads")
        read = readers[tuple(stored)]
        entry = None if read is None else read(stored)
        if entry is None:
            raise ValueError("a log entry that only the checked way reads")
        append(entry)
    if len(found) != len(values):  # the last value holds part of an encoding
        raise ValueError("a log entry that only the checked way reads")
    return found


def number(data: bytes, database: str, key: bytes) -> int:
    """A stored 8-byte big-endian number (a counter, a cursor, a due time)."""
    if len(data) != 8:
        raise corrupt(database, key, f"holds {len(data)} bytes where an 8-byte number belongs")
    return int.from_bytes(data, "big")


def key_size(key: bytes, size: int, database: str) -> bytes:
    """``key``, checked to be ``size`` bytes long as its database's layout says."""
    if len(key) != size:
        raise corrupt(database, key, f"has a {len(key)}-byte key where the layout has {size}")
    return key
