"""Every error the runtime raises on purpose, under one root, `ActorError`.

The journal errors are defined once in `storage.errors` and re-exported here.
"""

from __future__ import annotations

from typing import Any

from storage.errors import (
    ActorError as ActorError,
    Conflict as Conflict,
    EncodeError as EncodeError,
    JournalClosed as JournalClosed,
    JournalCorrupt as JournalCorrupt,
    JournalDiskFull as JournalDiskFull,
    JournalFull as JournalFull,
    JournalLocked as JournalLocked,
    JournalUnavailable as JournalUnavailable,
)

__all__ = [
    "ActorError",
    "AlreadyStarted",
    "AskTimeout",
    "ChildFailed",
    "Conflict",
    "ContextError",
    "EncodeError",
    "HistoryFormatError",
    "InstanceRemoved",
    "InvalidArguments",
    "JournalClosed",
    "JournalCorrupt",
    "JournalDiskFull",
    "JournalFull",
    "JournalLocked",
    "JournalUnavailable",
    "LimitExceeded",
    "NonDeterminismError",
    "NotDelivered",
    "ProcessCancelled",
    "ProcessFailed",
    "StepFailed",
    "StepTimeout",
    "UnknownProcess",
]


class NotDelivered(ActorError, LookupError):
    """No live instance has the address; nothing was stored. ``reason`` says why
    (``"unknown"``, ``"completed"``, ``"failed"``, ``"cancelled"``, ...)."""

    def __init__(self, message: str, *, address: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.reason = reason


class _Failure(ActorError):
    """Carries the recorded error of something that failed elsewhere."""

    def __init__(self, message: str, *, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        error = error or {}
        #: The original error's qualified type name, message and traceback text.
        self.error_type: str = error.get("type", "")
        self.error_message: str = error.get("message", "")
        self.error_traceback: str = error.get("traceback", "")


class ProcessFailed(_Failure):
    """The process ended with an exception; the message carries its type and text."""


class ProcessCancelled(ActorError):
    """The process was cancelled (``reason`` says by whom), or the handle belongs
    to an earlier instance at that address that was cancelled."""

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class StepFailed(_Failure):
    """A step failed on its last attempt (or its validation failed); the message
    carries the step name, the attempt count and the last cause."""


class StepTimeout(StepFailed):
    """A step's last attempt ran past its timeout."""


class ChildFailed(_Failure):
    """An awaited child (``ctx.call``/``ctx.scope``) or a supervised child past
    its restart limit failed; carries the child's address and error."""

    def __init__(self, message: str, *, address: str = "", error: dict[str, Any] | None = None):
        super().__init__(message, error=error)
        self.address = address


class NonDeterminismError(ActorError):
    """Replayed code asked for a different effect than the log holds at that
    position. The instance is kept suspended (never failed) until code that
    matches its history resumes it."""

    def __init__(
        self,
        message: str,
        *,
        address: str = "",
        position: int = 0,
        expected: Any = None,
        found: Any = None,
    ) -> None:
        super().__init__(message)
        self.address = address
        self.position = position
        self.expected = expected
        self.found = found


class UnknownProcess(ActorError, LookupError):
    """The process definition (or template) is not registered with this system."""


class InvalidArguments(ActorError, TypeError):
    """Arguments do not fit: wrong number of path params, an empty or '/'-holding
    param, input the process function does not accept, or a reserved keyword."""


class ContextError(ActorError, RuntimeError):
    """Process code did something only effects may do (awaited a trio primitive,
    started a task, used a ``ctx`` outside its process)."""


class LimitExceeded(ActorError, ValueError):
    """A configured limit was hit (payload size, scope size, ...); the message
    names the limit and the setting that raises it."""


class AskTimeout(ActorError, TimeoutError):
    """An ask got no reply within its ``timeout``. The message stays asked:
    the instance may still take it and reply, to no one."""

    def __init__(self, message: str, *, address: str = "", timeout: float = 0.0) -> None:
        super().__init__(message)
        self.address = address
        self.timeout = timeout


class AlreadyStarted(ActorError):
    """``start(..., if_exists="error")`` found an instance at the address that
    does not start afresh; ``status`` is its status."""

    def __init__(self, message: str, *, address: str = "", status: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.status = status


class HistoryFormatError(ActorError, ValueError):
    """A history file cannot be read: it is not one, it is damaged, or it is
    of a format ``version`` this code does not read (``version`` holds it)."""

    def __init__(self, message: str, *, version: int | None = None) -> None:
        super().__init__(message)
        self.version = version


class InstanceRemoved(ActorError, LookupError):
    """The instance a handle refers to was removed from the journal after it
    ended (by a cleanup), before the handle read its outcome; ``address``
    and ``incarnation`` say which one."""

    def __init__(self, message: str, *, address: str = "", incarnation: int = 0) -> None:
        super().__init__(message)
        self.address = address
        self.incarnation = incarnation
