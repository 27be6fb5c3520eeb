"""Log entries as the runtime uses them.

`LogEntry` (one position of a run's log) is defined with the journal format
in `storage._records`; this module adds what the runtime derives from a log.
"""

from __future__ import annotations

from storage import NO_VALUE, LogEntry

__all__ = ["LogEntry", "NO_VALUE", "children_named"]


def children_named(log: dict[int, LogEntry]) -> dict[str, int]:
    """The child addresses a run's log names (its calls and spawns), each
    with the seq of the effect that made it."""
    return {
        entry.name: seq for seq, entry in sorted(log.items()) if entry.kind in ("call", "spawn")
    }
