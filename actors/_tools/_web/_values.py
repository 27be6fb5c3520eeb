"""One stored value of an instance, read whole: what the value page
(``/value?address=...&part=...``) shows when an instance's page cuts a value
at `_html.VALUE_LIMIT` characters.

It reads the one value: a message by its position in the unread mail (and
checks its number, so a message taken meanwhile is not mistaken for the one
after it), a log entry by its number in the current run.
"""

from __future__ import annotations

from typing import Any

from storage import InstanceRow, Reader

from .._admin import StoredMessage
from .._cli._records import handling_of
from ._query import ValueQuery

__all__ = ["TITLES", "ValueGone", "read_value"]

# What the value page calls each part (`_query.PARTS`).
TITLES = {
    "input": "Input",
    "result": "Result",
    "exports": "Exports",
    "handling": "The message the failed run was handling",
    "mail": "Message #{seq}",
    "log": "Effect #{seq}",
    "compensation": "Compensation {at}: arguments",
}


class ValueGone(LookupError):
    """The value asked for is not there (any more); the message says so."""


def read_value(r: Reader, row: InstanceRow, query: ValueQuery) -> Any:
    """The value ``query`` names, of ``row``'s instance; `ValueGone` if it has none."""
    record, address, part = row.record, row.address, query.part
    if part == "input":
        return {"params": record.params, "input": record.input}
    if part == "result":
        return record.result
    if part == "exports":
        return record.exports
    if part == "handling":
        found = handling_of(r, row)
        if found is None:
            raise ValueGone(f"{address!r} was handling no message when it failed")
        return found["payload"]
    if part == "mail":
        assert query.at is not None  # (parse_value requires it)
        _, page = r.mailbox_page(row.iid, query.at, 1)
        if not page or page[0][0] != query.seq:
            raise ValueGone(
                f"message #{query.seq} of {address!r} is not unread at position {query.at} "
                "any more (taken, or dropped); its page shows the unread mail there is"
            )
        return StoredMessage.from_stored(page[0][1]).payload
    if part == "log":
        entry = r.log(row.iid, record.run).get(query.seq or 0)
        if entry is None:
            raise ValueGone(
                f"the log of {address!r} (run {record.run}) has no entry #{query.seq}; "
                "its page shows the entries there are"
            )
        return entry["e"] if "e" in entry else entry.get("v")
    assert part == "compensation" and query.at is not None
    if query.at >= len(record.compensations):
        raise ValueGone(
            f"{address!r} has {len(record.compensations)} compensations, "
            f"none at position {query.at}"
        )
    c = record.compensations[query.at]
    return {"args": c.get("args"), "kwargs": c.get("kwargs")}
