"""Small public values: `Signal`, `Retry`, `Outcome`, `InstanceInfo` (a
queue's definition is the queues' own, `_features._queue_state`). The error record kept for
anything that failed is `_failures.ErrorRecord`. (Not "records": those are
the journal's, `storage._records`.)"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from storage import Status

from ..errors import InvalidArguments
from ._checks import check_name, check_seconds


def _fields(value: Any) -> tuple[str, ...]:
    """`Signal.identity` as given: a tuple of distinct path-param names."""
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        raise InvalidArguments(
            f"Signal(identity=...) takes a tuple of field names, like ('order_id',), not {value!r}"
        )
    fields = tuple(value)
    for field in fields:
        check_name(field, "a Signal's identity field")
        if "/" in field or field.startswith(":"):
            raise InvalidArguments(
                f"a Signal's identity field is a path param's name (order_id for "
                f"':order_id'), not {field!r}"
            )
    if len(set(fields)) != len(fields):
        raise InvalidArguments(f"Signal(identity=...) repeats a field: {fields!r}")
    return fields


@attrs.frozen(slots=True)
class Signal:
    """A named kind of message. Signals compare equal by name.

    ``identity`` names the fields a signal routed by identity carries
    (``Signal("orders.shipped", identity=("order_id",))``): ``system.signal``
    delivers it to every live instance of each process that listens to it
    (``@process(..., listens=[...])``) whose path params of those names
    have the values given. The default, ``()``, is a signal sent to an
    address (``send``, ``ask``) only.

    Raises:
        InvalidArguments: a name that is not a non-empty str (or starts
            with NUL), identity fields that are not distinct non-empty strs.
    """

    name: str = attrs.field()
    identity: tuple[str, ...] = attrs.field(default=(), eq=False, converter=_fields)

    @name.validator
    def _check(self, _: Any, value: str) -> None:
        check_name(value, "a Signal's name")
        if value.startswith("\x00"):
            raise InvalidArguments(
                f"a Signal's name may not start with NUL (the runtime's own signals "
                f"do), not {value!r}; pick another name"
            )

    @classmethod
    def _system(cls, name: str) -> Signal:
        """A signal of the runtime's own (names starting with NUL)."""
        signal = object.__new__(cls)
        object.__setattr__(signal, "name", name)
        object.__setattr__(signal, "identity", ())
        return signal


#: The crash budget of a step (see `Retry.crashes`): how many of its
#: attempts cut short by a crash run again before its instance is parked
#: stuck instead. Three, as DBOS's default recovery attempts are a few:
#: enough for a host that died of something else, few enough that a step
#: that kills its host every time stops within minutes.
CRASHES = 3


@attrs.frozen(slots=True)
class Retry:
    """How a step retries: up to ``attempts`` attempts that raise, waiting
    ``backoff`` seconds after the first failure and doubling up to
    ``max_backoff``, each wait scaled by a jitter factor in [0.5, 1.0] from
    the system's random source. Exceptions of a type in ``non_retryable``
    fail the step at once.

    ``crashes`` is a separate budget: how many attempts cut short by a
    crash of the host (or, on a shared journal, a lost lease) are run again.
    Such an attempt raised nothing, so it runs again after recovery under
    the same idempotency key and spends none of ``attempts``; once one more
    is cut short, the step is not run again and the instance is parked
    stuck (`Handle.stuck`, a WARNING naming the step) until
    ``system.retry`` resumes it, so a step that kills its host every time
    runs ``crashes + 1`` times, not for ever. A step without ``retry=`` has one
    attempt and the same default crash budget (`CRASHES`). A step made with
    ``ctx.step(..., at_most_once=True)`` has no crash budget: a crash spends
    one of ``attempts``, as an exception does.

    Raises:
        InvalidArguments: ``attempts`` is not a whole number of 1 or more,
            ``crashes`` not one of 0 or more, a backoff not a number of
            seconds, or ``non_retryable`` not a tuple of exception classes.
    """

    attempts: int = 3
    backoff: float = 0.1
    max_backoff: float = 30.0
    non_retryable: tuple[type[BaseException], ...] = ()
    crashes: int = attrs.field(default=CRASHES, kw_only=True)

    def __attrs_post_init__(self) -> None:
        attempts = self.attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise InvalidArguments(
                f"Retry(attempts=...) takes a whole number of attempts, 1 or more, not {attempts!r}"
            )
        crashes = self.crashes
        if isinstance(crashes, bool) or not isinstance(crashes, int) or crashes < 0:
            raise InvalidArguments(
                f"Retry(crashes=...) takes a whole number of crashes, 0 or more, not {crashes!r}"
            )
        object.__setattr__(self, "backoff", check_seconds(self.backoff, "Retry(backoff=...)"))
        object.__setattr__(
            self, "max_backoff", check_seconds(self.max_backoff, "Retry(max_backoff=...)")
        )
        kinds = self.non_retryable
        if not isinstance(kinds, tuple) or not all(
            isinstance(k, type) and issubclass(k, BaseException) for k in kinds
        ):
            raise InvalidArguments(
                f"Retry(non_retryable=...) takes a tuple of exception classes, not {kinds!r}"
            )

    def delay(self, attempt: int, jitter: float) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 1)."""
        doubled: float = self.backoff * 2 ** (attempt - 1)
        return min(self.max_backoff, doubled) * (0.5 + jitter / 2)


@attrs.frozen(slots=True)
class Outcome:
    """What `Context.settled` gives for each effect: ``ok`` and ``value``, or
    ``error`` (the exception the effect raised)."""

    ok: bool
    value: Any = None
    error: BaseException | None = None


#: What `ActorSystem.start` does when the address is taken (see there).
IfExists = Literal["return", "error"]
#: When a child is restarted after it ends (see `actors.process`).
Restart = Literal["permanent", "transient", "temporary"]
#: Where a new stream consumer begins (see `ActorSystem.stream`).
StreamFrom = Literal["start", "latest"]


@attrs.frozen(slots=True)
class InstanceInfo:
    """A row of `ActorSystem.query`: an instance as last recorded."""

    id: str
    process: str
    status: Status
    created: float | None
    updated: float | None
    last_error: str | None = None
