"""Log entries and runs as the runtime reads them.

`LogEntry` (one position of a run's log) is defined with the journal format
in `storage._records`; this module adds what the runtime derives from a log,
and the one read that gives a run all it needs (`read_state`).
"""

from __future__ import annotations

from typing import Any

from storage import LIVE_STATUSES, NO_VALUE, LogEntry
from storage._log_cache import LogCache

__all__ = ["NO_VALUE", "LoadedState", "LogCache", "LogEntry", "children_named", "read_state"]


def children_named(log: dict[int, LogEntry]) -> dict[str, int]:
    """The child addresses a run's log names (its calls and spawns), each
    with the seq of the effect that made it."""
    return {
        entry.name: seq for seq, entry in sorted(log.items()) if entry.kind in ("call", "spawn")
    }


# What an activation reads of an instance, in one read: its row (None if
# there is none), its run's log, its unread mail, its timers, and the
# highest message seq its mailbox had.
LoadedState = tuple[Any, dict[int, LogEntry], list[Any], list[Any], int]


def read_state(
    r: Any, iid: bytes, *, live_only: bool = False, logs: LogCache | None = None
) -> LoadedState:
    """All an instance's run needs from the journal (reader ``r``); with
    ``live_only``, only the row of one that is not running or suspended.
    With ``logs``, the log is decoded only where it is not kept there as it
    is stored now (the log's dict is then shared: never change it)."""
    row = r.instance(iid)
    if row is None or (live_only and row.status not in LIVE_STATUSES):
        return row, {}, [], [], 0
    run = row.record.run
    return (
        row,
        r.entries(iid, run) if logs is None else logs.entries(r, iid, run),
        r.mailbox(iid),
        r.timers(iid),
        r.last_message_seq(iid),
    )
