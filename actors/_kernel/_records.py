"""Small public records: `Signal`, `Retry`, `Outcome`, `InstanceInfo` and the
queue definitions (`Queue`, `Rate`, `QueueInfo`). The error record kept for
anything that failed is `_failures.ErrorRecord`."""

from __future__ import annotations

import math
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


def _rate(value: Any) -> Rate | None:
    if value is None or isinstance(value, Rate):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return Rate(*value)
    raise InvalidArguments(
        f"Queue(rate=...) takes a (count, seconds) pair or an actors.Rate, not {value!r}; "
        "e.g. rate=(100, 60.0) for at most 100 starts in any 60 seconds"
    )


def _limit(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArguments(
            f"Queue({what}=...) takes a whole number, 1 or more, or None, not {value!r}"
        )
    return value


@attrs.frozen
class Rate:
    """At most ``count`` starts in any window of ``per`` seconds."""

    count: int
    per: float

    def __attrs_post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InvalidArguments(
                f"Rate(count=...) takes a whole number, 1 or more, not {self.count!r}"
            )
        if (
            isinstance(self.per, bool)
            or not isinstance(self.per, (int, float))
            or not 0 < self.per < math.inf
        ):
            raise InvalidArguments(f"Rate(per=...) takes positive seconds, not {self.per!r}")


@attrs.frozen
class Queue:
    """A named limit on how many instances run at once, and how fast they start.

    Args:
        name: the queue's name (its state in the journal is keyed by it).
        concurrency: at most this many of its instances live at once, over
            every node sharing the journal (None: no limit).
        per_node: at most this many at once started by each node (None: no limit).
        rate: at most ``count`` starts in any ``per`` seconds, as a
            ``(count, per)`` pair or a `Rate`, over every node (None: no limit).

    Raises:
        InvalidArguments: a name with ``/`` or a limit that is not a positive number.
    """

    name: str
    concurrency: int | None = attrs.field(default=None, kw_only=True)
    per_node: int | None = attrs.field(default=None, kw_only=True)
    rate: Rate | None = attrs.field(default=None, kw_only=True, converter=_rate)

    def __attrs_post_init__(self) -> None:
        check_name(self.name, "Queue's name")
        if "/" in self.name:
            raise InvalidArguments(f"a queue's name has no '/': {self.name!r}")
        _limit(self.concurrency, "concurrency")
        _limit(self.per_node, "per_node")


@attrs.frozen
class QueueInfo:
    """A queue's state as read from the journal: ``waiting`` instances (its
    depth), ``running`` (holding a slot), and how long the oldest waiting
    one has waited (``oldest_wait``, seconds, None with none waiting)."""

    name: str
    waiting: int
    running: int
    oldest_wait: float | None
    concurrency: int | None
    per_node: int | None
    rate: Rate | None
