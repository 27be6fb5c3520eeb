"""Small public records: `Signal`, `Retry`, `Outcome`, `InstanceInfo`, and
the error record kept for anything that failed."""

from __future__ import annotations

import traceback
from typing import Any

import attrs


@attrs.frozen(slots=True)
class Signal:
    """A named kind of message. Signals compare equal by name."""

    name: str = attrs.field()

    @name.validator
    def _check(self, _: Any, value: str) -> None:
        if not isinstance(value, str) or not value or value.startswith("\x00"):
            raise TypeError(
                f"a Signal needs a non-empty str name not starting with NUL, not {value!r}"
            )

    @classmethod
    def _system(cls, name: str) -> Signal:
        """A signal of the runtime's own (names starting with NUL)."""
        signal = object.__new__(cls)
        object.__setattr__(signal, "name", name)
        return signal


@attrs.frozen(slots=True)
class Retry:
    """How a step retries: up to ``attempts`` attempts in all, waiting
    ``backoff`` seconds after the first failure and doubling up to
    ``max_backoff``, each wait scaled by a jitter factor in [0.5, 1.0] from
    the system's random source. Exceptions of a type in ``non_retryable``
    fail the step at once."""

    attempts: int = 3
    backoff: float = 0.1
    max_backoff: float = 30.0
    non_retryable: tuple[type[BaseException], ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry(attempts={self.attempts}) must allow at least 1 attempt")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("Retry backoff and max_backoff must be >= 0")

    def delay(self, attempt: int, jitter: float) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 1)."""
        return min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * (0.5 + jitter / 2)


@attrs.frozen(slots=True)
class Outcome:
    """What `Context.settled` gives for each effect: ``ok`` and ``value``, or
    ``error`` (the exception the effect raised)."""

    ok: bool
    value: Any = None
    error: BaseException | None = None


@attrs.frozen(slots=True)
class InstanceInfo:
    """A row of `ActorSystem.query`: an instance as last recorded."""

    id: str
    process: str
    status: str
    created: float | None
    updated: float | None
    last_error: str | None = None


def describe_error(exc: BaseException) -> dict[str, Any]:
    """A readable, storable record of ``exc``: type, message, traceback text.

    Works for any exception, including ones whose ``__str__`` raises or that
    are not `Exception` subclasses."""
    kind = type(exc)
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - an odd __str__ must not hide the error
        try:
            message = repr(exc)
        except Exception:  # noqa: BLE001
            message = f"<{kind.__qualname__} with unprintable message>"
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:  # noqa: BLE001
        text = ""
    return {"type": f"{kind.__module__}.{kind.__qualname__}", "message": message, "traceback": text}


def error_summary(error: dict[str, Any] | None) -> str:
    """``"ValueError: boom"`` for an error record."""
    if not error:
        return "unknown error"
    kind = error.get("type", "Error").rsplit(".", 1)[-1]
    message = error.get("message", "")
    return f"{kind}: {message}" if message else kind
