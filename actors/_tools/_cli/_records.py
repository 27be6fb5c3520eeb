"""What the runtime stored, as the tools read it out: a stored error as one
line, a signal's name as users read it, and the message a failed run was
handling and the effect it stopped at. The command line and the web
inspector both word a record so, through `_admin`."""

from __future__ import annotations

from typing import Any

from storage import InstanceRow, Reader

from .._admin import END_PREFIX, LogEntry, error_summary, failed_at, handling

__all__ = ["error_text", "failed_at_of", "handling_of", "signal_label"]


def signal_label(name: str) -> str:
    """A signal name as users read it (system signals in parentheses)."""
    if name.startswith(END_PREFIX):
        return f"(end of {name[len(END_PREFIX) :]})"
    if name.startswith("\x00"):
        return f"({name[1:]})"
    return name


def error_text(error: Any) -> str:
    """A stored error record as one line."""
    if not isinstance(error, dict):
        return str(error)
    if "type" in error:
        return error_summary(error)
    return str(error.get("summary") or error.get("message") or error)


def handling_of(r: Reader, row: InstanceRow) -> dict[str, Any] | None:
    """The message a failed run of ``row``'s instance was handling (see
    `_describe.describe`)."""
    return _handling(r.entries(row.iid, row.record.run)) if row.status == "failed" else None


def failed_at_of(r: Reader, row: InstanceRow) -> dict[str, Any] | None:
    """The effect a failed run of ``row``'s instance stopped at, if one
    failed it (`actors._system._mail.failed_at`), for `_describe.describe`."""
    if row.status != "failed":
        return None
    found = failed_at(r.entries(row.iid, row.record.run))
    return None if found is None else found.as_dict()


def _handling(entries: dict[int, LogEntry]) -> dict[str, Any] | None:
    found = handling(entries)
    if found is None:
        return None
    effect, m = found
    return {"seq": m.id, "signal": m.signal, "payload": m.payload, "effect": effect}
