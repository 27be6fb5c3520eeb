"""What the runtime's records look like, checked where a journal reads them.

The runtime stores an effect log and messages per instance; a journal
hands them back as decoded msgpack (the instance's record is checked where
`storage._records.InstanceRecord` reads it). Valid msgpack of another shape (a damaged byte that still decodes, a record written by
something else) would fail deep in the runtime with an AttributeError or a
TypeError; read with `Journal.check_shapes` on, it is reported as
`JournalCorrupt` naming database and key, like bytes that do not decode, and
only its instance is marked corrupt. Only what the runtime reads is checked:
the types of the fields it uses, not their meaning.

Each function gives the first problem found, as words for the error, or None.
"""

from __future__ import annotations

from typing import Any

from ._records import LogEntry, RecordShapeError

__all__ = ["entry_problem", "message_problem"]

_NUMBER = (int, float)


def entry_problem(value: Any) -> str | None:
    """What is wrong with an effect log entry, if anything (the checks of
    `LogEntry.from_stored`, which reads it)."""
    try:
        LogEntry.from_stored(value)
    except RecordShapeError as exc:
        return str(exc)
    return None


def message_problem(value: Any) -> str | None:
    """What is wrong with a mailbox message ``[signal, payload, sent, trace, ask]``
    (the last two optional), if anything."""
    if not isinstance(value, (list, tuple)) or len(value) < 2:
        return f"the message is {value!r}, not [signal, payload, ...]"
    if not isinstance(value[0], str):
        return f"the message's signal is {value[0]!r}, not a name"
    if value[0].startswith("\x00") and not isinstance(value[1], dict):
        return f"the runtime's message {value[0]!r} carries {value[1]!r}, not a map"
    if len(value) > 2 and not isinstance(value[2], (*_NUMBER, type(None))):
        return f"the message's time is {value[2]!r}, not a number"
    if len(value) > 4 and value[4] is not None:
        ask = value[4]
        if (
            not isinstance(ask, (list, tuple))
            or len(ask) < 2
            or not all(isinstance(part, str) for part in ask[:2])
        ):
            return f"the message's ask is {ask!r}, not [ask id, reply-to address, node]"
    return None
