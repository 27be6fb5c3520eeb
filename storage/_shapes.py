"""What the runtime's records look like, checked where a journal reads them.

The runtime stores its own snapshot per instance, an effect log and
messages; a journal hands them back as decoded msgpack. Valid msgpack of
another shape (a damaged byte that still decodes, a record written by
something else) would fail deep in the runtime with an AttributeError or a
TypeError; read with `Journal.check_shapes` on, it is reported as
`JournalCorrupt` naming database and key, like bytes that do not decode, and
only its instance is marked corrupt. Only what the runtime reads is checked:
the types of the fields it uses, not their meaning.

Each function gives the first problem found, as words for the error, or None.
"""

from __future__ import annotations

from typing import Any

__all__ = ["record_problem", "params_problem", "entry_problem", "message_problem"]

_NUMBER = (int, float)
# field -> the types its value may have, in an instance's record
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "run": (int,), "inc": (int,), "params": (list, tuple), "input": (dict, type(None)),
    "parent": (str, type(None)), "last_error": (str, type(None)),
    "created": (*_NUMBER, type(None)), "updated": (*_NUMBER, type(None)),
    "restarts": (list,), "failure": (dict, type(None)), "failure_end": (str, type(None)),
    "compensations": (list,), "compensated": (list,), "comp_attempts": (dict,),
    "exports_version": (int,), "error": (dict, type(None)), "reason": (str, type(None)),
}  # fmt: skip
# field -> the types its value may have, in a log entry
_ENTRY_FIELDS: dict[str, tuple[type, ...]] = {
    "k": (str,), "n": (str, type(None)), "e": (dict,), "s": (str,), "due": _NUMBER,
    "m": (int,), "a": (int,), "q": (list,),
}  # fmt: skip


def _fields_problem(value: Any, fields: dict[str, tuple[type, ...]], what: str) -> str | None:
    if not isinstance(value, dict):
        return f"{what} is a {type(value).__name__}, not a map"
    for name, types in fields.items():
        if name in value:
            field = value[name]
            if not isinstance(field, types) or (isinstance(field, bool) and bool not in types):
                return f"{what}'s {name!r} is {field!r}, a {type(field).__name__}"
    return None


def record_problem(value: Any) -> str | None:
    """What is wrong with an instance's record (the runtime's snapshot), if anything."""
    problem = _fields_problem(value, _RECORD_FIELDS, "the record")
    if problem is not None:
        return problem
    run = value.get("run", 0)
    if not 0 <= run <= 0xFFFFFFFF:  # journals key log entries by a 4-byte run number
        return f"the record's run number {run} is out of range"
    for name, part in (("restarts", "at"), ("compensations", "id")):
        for item in value.get(name, ()):
            if not isinstance(item, dict) or part not in item:
                return f"the record's {name!r} holds {item!r}, not a map with {part!r}"
    return None


def params_problem(record: dict[str, Any], process: str) -> str | None:
    """What is wrong with a record's path params for its process template
    (one non-empty str without "/" per ``:name`` segment), if anything."""
    params = record.get("params", ())
    wanted = sum(part.startswith(":") for part in process.split("/"))
    if len(params) != wanted:
        return f"the record has {len(params)} path param(s) where {process!r} takes {wanted}"
    for param in params:
        if not isinstance(param, str) or not param or "/" in param:
            return f"the record's path param {param!r} is not a non-empty str without '/'"
    return None


def entry_problem(value: Any) -> str | None:
    """What is wrong with an effect log entry, if anything."""
    problem = _fields_problem(value, _ENTRY_FIELDS, "the log entry")
    if problem is None and "k" not in value:
        return "the log entry has no kind ('k')"
    if problem is None and value["k"] == "sleep" and "due" not in value:
        return "the timer's log entry has no due time ('due')"
    return problem


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
        if not isinstance(ask, (list, tuple)) or len(ask) < 2 or not all(
            isinstance(part, str) for part in ask[:2]
        ):
            return f"the message's ask is {ask!r}, not [ask id, reply-to address, node]"
    return None
