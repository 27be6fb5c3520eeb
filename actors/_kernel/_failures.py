"""The error record: how a failure is stored, summed up and raised again.

`ErrorRecord` is what the runtime writes wherever something failed: a
failed log entry (`LogEntry.error`), an instance's record, a child's end
message, a log event. Its stored form is a msgpack map, as journals have
always held it; `to_stored` and `from_stored` are the only code that knows
its keys, and keys this version does not know are kept (``extra``) and
written back as they were::

    raise      the exception replay raises, where it is not StepFailed:
               "ChildFailed", "ProcessCancelled" or "NotDelivered"
    child      the child of a ChildFailed
    cause      the child's own error record (stored form)
    type       the original exception's qualified type name
    message    its text
    traceback  its traceback text
    timeout    True: a step's last attempt timed out (StepTimeout)
    summary    one line that says what failed, and where
    stage      the step's validation that failed ("input validation", ...)
    crashed    a step's attempts that a crash interrupted
    attempts   the attempts it spent
    address    the address a NotDelivered names
    reason     why it was not delivered, or why it was cancelled

A field that is None is not stored (the keys are written in this order).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import ChildFailed, NotDelivered, ProcessCancelled, StepFailed, StepTimeout

__all__ = ["ErrorRecord", "describe_error", "error_summary", "exception_text"]

# The stored keys, in the order they are written: the order of the fields.
_KEYS = (
    ("raises", "raise"),
    ("child", "child"),
    ("cause", "cause"),
    ("type", "type"),
    ("message", "message"),
    ("traceback", "traceback"),
    ("timeout", "timeout"),
    ("summary", "summary"),
    ("stage", "stage"),
    ("crashed", "crashed"),
    ("attempts", "attempts"),
    ("address", "address"),
    ("reason", "reason"),
)
_KNOWN = frozenset(key for _, key in _KEYS)


@attrs.frozen(slots=True)
class ErrorRecord:
    """A failure, as it is stored (see the module docstring for each field)."""

    raises: str | None = None
    child: str | None = None
    cause: dict[str, Any] | None = None
    type: str | None = None
    message: str | None = None
    traceback: str | None = None
    timeout: bool | None = None
    summary: str | None = None
    stage: str | None = None
    crashed: int | None = None
    attempts: int | None = None
    address: str | None = None
    reason: str | None = None
    extra: dict[str, Any] | None = None  # keys of another version, kept as they were

    @classmethod
    def of(cls, exc: BaseException, **fields: Any) -> ErrorRecord:
        """The record of ``exc``: its type, message and traceback text (and
        ``fields``). Works for any exception, including ones whose
        ``__str__`` raises or that are not `Exception` subclasses."""
        kind = type(exc)
        message = exception_text(exc, f"<{kind.__qualname__} with unprintable message>")
        try:
            text = "".join(traceback.format_exception(exc))
        except Exception:  # noqa: BLE001
            text = ""
        return cls(
            type=_storable(f"{kind.__module__}.{kind.__qualname__}"),
            message=_storable(message),
            traceback=_storable(text),
            **fields,
        )

    @classmethod
    def undelivered(cls, error: NotDelivered) -> ErrorRecord:
        """The record of a ``NotDelivered`` raised in the process (an ask or
        a send to an address with no live instance)."""
        return cls(
            raises="NotDelivered",
            type="actors.errors.NotDelivered",
            message=str(error),
            summary=str(error),
            address=error.address,
            reason=error.reason,
        )

    @classmethod
    def cancelled(cls, reason: str) -> ErrorRecord:
        """The record of a `ProcessCancelled` with ``reason`` (what a cancel
        that compensates records, and a cancelled child's cause)."""
        return cls(type="actors.errors.ProcessCancelled", message=reason)

    def to_stored(self) -> dict[str, Any]:
        """The map the journal stores."""
        stored = {key: value for name, key in _KEYS if (value := getattr(self, name)) is not None}
        if self.extra:
            stored.update(self.extra)
        return stored

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> ErrorRecord:
        """The record of a stored map (any map: a field of the wrong type
        is kept as it was, and read as what it holds)."""
        extra = {key: value for key, value in stored.items() if key not in _KNOWN}
        return cls(
            **{name: stored[key] for name, key in _KEYS if key in stored},
            extra=extra or None,
        )

    def summed_up(self) -> str:
        """The summary it carries, else ``"ValueError: boom"``."""
        return self.summary or _summary(self.type, self.message)

    def exception(self) -> BaseException:
        """The exception a replay raises in the process for this failure."""
        summary = self.summed_up()
        if self.raises == "ChildFailed":
            return ChildFailed(summary, address=self.child or "", error=self.cause)
        if self.raises == "ProcessCancelled":
            return ProcessCancelled(summary, reason=self.reason or "")
        if self.raises == "NotDelivered":
            return NotDelivered(
                self.message or summary, address=self.address or "", reason=self.reason or ""
            )
        cls = StepTimeout if self.timeout else StepFailed
        return cls(summary, error=self.to_stored())


def describe_error(exc: BaseException) -> dict[str, Any]:
    """A readable, storable record of ``exc`` (`ErrorRecord.of`), stored form."""
    return ErrorRecord.of(exc).to_stored()


def error_summary(error: Mapping[str, Any] | None) -> str:
    """``"ValueError: boom"`` for a stored error record."""
    if not error:
        return "unknown error"
    return _summary(error.get("type"), error.get("message"))


def _summary(type: str | None, message: str | None) -> str:
    kind = (type or "Error").rsplit(".", 1)[-1]
    return f"{kind}: {message}" if message else kind


def exception_text(exc: BaseException, unprintable: str) -> str:
    """``str(exc)``, else its repr, else ``unprintable``: an exception whose
    ``__str__`` raises must not hide the error it reports."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - user code: any failure
        try:
            return repr(exc)
        except Exception:  # noqa: BLE001
            return unprintable


def _storable(text: str) -> str:
    """``text`` with lone surrogates escaped, so the record always encodes
    (an error about bad text often quotes the bad text)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
