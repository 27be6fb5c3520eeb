"""The key layout of an LMDB journal: its databases, key packing, format.

One LMDB environment in a directory, named databases with big-endian keys
so a prefix scan returns records in order:

=============  =====================================  ==========================
database       key                                    value
=============  =====================================  ==========================
instances      iid(16)                                status(1) hlen(2) header record
status         status(1) iid(16)                      process template (utf-8)
log            iid(16) run(4) seq(4)                  entry
mail           iid(16) seq(8)                         message
timers         due_us(8) iid(16) run(4) seq(4)        empty
timer_ids      iid(16) run(4) seq(4)                  due_us(8)
stream         iid(16) index(8)                       value
cursors        iid(16) consumer(utf-8)                position(8)
counters       iid(16) kind(1)                        next number(8)
=============  =====================================  ==========================

The writer (`_applier`) and the reader (`_reader`) both pack and unpack keys
with the structs and constants here, so the layout is written down once.
"""

from __future__ import annotations

import struct
from pathlib import Path

from ..errors import JournalCorrupt

_RUN_SEQ = struct.Struct(">II")
_LOG_KEY = struct.Struct(">16xII")  # a whole log key: iid(16) run(4) seq(4), read as (run, seq)
_Q = struct.Struct(">Q")
_H = struct.Struct(">H")
_DBS = (
    "instances",
    "status",
    "log",
    "mail",
    "timers",
    "timer_ids",
    "stream",
    "cursors",
    "counters",
    "meta",
)
# The journal format: the layout of the databases and of the records in
# them. Stored in meta["format"] when a journal is created, checked on every
# open. Invariant: a journal is read only by code that reads its format; a
# change to the layout bumps _FORMAT and brings a migration or a refusal.
_FORMAT = b"1"


def _format_mismatch(path: Path, found: bytes | None) -> JournalCorrupt:
    """The error for a journal whose format this code does not read."""
    mine = _FORMAT.decode()
    if found is None:
        return JournalCorrupt(
            f"{path} has no journal format marker (this version reads format {mine}): "
            "it was not written by this library, or its meta database was damaged; "
            "open a journal directory this library created",
            database="meta",
            key=b"format",
        )
    theirs = found.decode(errors="replace")
    newer = found.isdigit() and int(found) > int(_FORMAT)
    advice = (
        "upgrade the library to a version that reads it"
        if newer
        else f"open it with the version of the library that wrote it (format {theirs})"
    )
    return JournalCorrupt(
        f"{path} holds journal format {theirs}, and this version of the library reads "
        f"format {mine} only; nothing was read or changed. To use it, {advice}",
        database="meta",
        key=b"format",
    )


# A key of the due-time index that is not this long is damaged: the global
# scans pass it by (the timer service must not stop for it), and the
# instance's own read of its timers reports it (`_LMDBReader.timers`).
_TIMER_KEY = 32
_MAIL_COUNTER = b"m"
_STREAM_COUNTER = b"s"


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
