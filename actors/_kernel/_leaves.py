"""The leaf effects: each has a number, and its outcome is logged under it
(waits, calls, spawns, joins, sends, timers, steps, ...). A feature may
define kinds of its own on these (the ask's, `_features._ask_forms`)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

from storage import Txn, argument_digests

from ._effect import Effect, shorten
from ._log import LogEntry
from ._values import Retry, Signal

__all__ = [
    "END_PREFIX",
    "Call",
    "ContinueAsNew",
    "Emit",
    "Join",
    "Marker",
    "Publish",
    "Recorded",
    "Send",
    "SendMany",
    "Spawn",
    "StartGate",
    "Step",
    "Timer",
    "Wait",
    "end_signal",
]

T = TypeVar("T", covariant=True)  # what awaiting the effect gives


class Wait(Effect[T]):
    """Take the oldest mailbox message whose signal is one of ``signals``."""

    __slots__ = ("pair", "signals")
    kind = "wait"

    def __init__(self, seq: int, signals: tuple[Signal, ...], pair: bool) -> None:
        # Effect.__init__, written out: a wake makes one wait per message taken.
        self.seq = seq
        self.name = signals[0].name if len(signals) == 1 else ",".join(s.name for s in signals)
        self.hash = b""
        self.done = False
        self.value = None
        self.error = None
        self.parent = None
        self.logged = None
        self.signals = signals
        self.pair = pair  # receive() gives (signal, payload); wait() the payload

    def matches(self, name: str) -> Signal | None:
        for signal in self.signals:
            if signal.name == name:
                return signal
        return None

    def replayed(self, value: Any, entry: LogEntry, driver: Any) -> Any:
        # The message it took may carry an extra: the driver keeps it (`took`).
        driver.took(self.seq, entry.ask or None)
        return (self.matches(entry.signal or ""), value) if self.pair else value

    def taking(self, value: Any, message: int, signal: Signal, extra: Any) -> LogEntry:
        """The entry of this wait's take of message ``message``, which
        carried ``extra`` (None: none). The extra is kept in storage's
        `LogEntry.ask`, named when an ask's was the one kind there was."""
        return LogEntry.build(
            self.kind,
            self.name,
            self.hash,
            value=value,
            message=message,
            signal=signal.name if self.pair else None,
            ask=extra,
        )

    def as_call(self) -> str:
        names = ", ".join(signal.name for signal in self.signals)
        return f"ctx.receive({names})" if self.pair else f"ctx.wait({names})"


class StartGate(Protocol):
    """What a new instance's start waits behind before it runs (a slot of
    a queue: `_features._queues.QueuedStart`). It is stored with ``status``
    (not "running"), its place added to its start's transaction (`hold`;
    `commit` adds it and commits), and `committed` follows the commit:
    whoever keeps the gate starts it when it may."""

    @property
    def status(self) -> str: ...

    def hold(self, txn: Txn, iid: bytes, address: str) -> None: ...

    def committed(self) -> None: ...

    async def commit(self, txn: Txn, iid: bytes, address: str) -> None: ...


class Call(Wait[T]):
    """An awaited child: done when the child's end message arrives."""

    __slots__ = ("address", "creating", "gate", "input", "params", "proc")
    kind = "call"
    makes_child = True
    awaited = True
    logs_start = True
    replayed = Effect.replayed  # the child's result, as logged (no message of a wait's)

    def __init__(
        self,
        seq: int,
        hash: bytes,
        proc: Any,
        params: tuple[str, ...],
        input: dict[str, Any],
        address: str,
    ) -> None:
        super().__init__(seq, (end_signal(address),), pair=False)
        self.name = address
        self.hash = hash
        self.proc = proc
        self.params = params
        self.input = input
        self.address = address
        self.creating = False
        self.gate: StartGate | None = None  # what the child's start waits behind

    def as_call(self) -> str:
        return f"ctx.call({self.address!r})"


class Spawn(Effect[T]):
    """A detached, supervised child: done once the child exists (its
    `ChildHandle` is ``T``)."""

    __slots__ = ("address", "creating", "gate", "input", "params", "proc", "restart")
    kind = "spawn"
    makes_child = True

    def replayed(self, value: Any, entry: LogEntry, driver: Any) -> Any:
        return driver.owner.child_handle(value)  # (``value``: the child's address)

    def __init__(
        self,
        seq: int,
        hash: bytes,
        proc: Any,
        params: tuple[str, ...],
        input: dict[str, Any],
        address: str,
        restart: str,
    ) -> None:
        Effect.__init__(self, seq, address, hash)
        self.proc = proc
        self.params = params
        self.input = input
        self.address = address
        self.restart = restart
        self.creating = False
        self.gate: StartGate | None = None  # what the child's start waits behind


class Join(Effect[T]):
    """``ctx.join``: done when the child at ``address`` (the incarnation
    ``incarnation``, once known) has ended for good: its result, or
    `ChildFailed` (see `_joins`)."""

    __slots__ = ("address", "incarnation", "scope")
    kind = "join"

    def __init__(self, seq: int, hash: bytes, address: str, incarnation: int | None) -> None:
        Effect.__init__(self, seq, address, hash)
        self.address = address
        self.incarnation = incarnation
        self.scope: Any = None  # the trio.CancelScope of its live wait

    def as_call(self) -> str:
        return f"ctx.join({self.address!r})"


class Marker(Effect[Any]):
    """``ctx.patched``: a patch id recorded where live code first asked for it."""

    __slots__ = ()
    kind = "patch"


class Emit(Effect[None]):
    """Append a value to the instance's stream (durable before it is visible)."""

    __slots__ = ("payload",)
    kind = "emit"

    def __init__(self, seq: int, hash: bytes, payload: Any) -> None:
        Effect.__init__(self, seq, "", hash)
        self.payload = payload


class Publish(Effect[None]):
    """Replace the instance's exports (durable before watchers see them)."""

    __slots__ = ("payload",)
    kind = "publish"

    def __init__(self, seq: int, hash: bytes, payload: Any) -> None:
        Effect.__init__(self, seq, "", hash)
        self.payload = payload


class Send(Effect[None]):
    """``ctx.send``: a message to another instance's mailbox, written in
    one transaction with this effect's log entry (see `_sends`)."""

    __slots__ = ("key", "prepared", "targets")
    kind = "send"

    def __init__(
        self,
        seq: int,
        name: str,
        hash: bytes,
        targets: tuple[tuple[str, bytes], ...],
        key: str | None,
        prepared: Any,
    ) -> None:
        Effect.__init__(self, seq, name, hash)
        self.targets = targets  # (address, instance id) of each message, in order
        self.key = key
        # What `_sends` built at the call for a live run (its transaction);
        # None when the log answers the effect.
        self.prepared = prepared


class SendMany(Send):
    """``ctx.send_many``: several messages, all written or none, in one
    transaction with this effect's log entry."""

    __slots__ = ()
    kind = "send_many"


END_PREFIX = "\x00end "


def end_signal(address: str) -> Signal:
    """The system signal carrying the end of the awaited child at ``address``."""
    return Signal._system(END_PREFIX + address)


class Timer(Effect[None]):
    """A durable timer: done when its due time (epoch seconds) passes."""

    __slots__ = ("delay", "due", "until")
    kind = "sleep"
    logs_start = True

    def __init__(self, seq: int, hash: bytes, delay: float | None, until: float | None) -> None:
        Effect.__init__(self, seq, "", hash)
        self.delay = delay
        self.until = until
        self.due: float | None = None

    def as_call(self) -> str:
        if self.until is None:
            delay = self.delay
            shown = int(delay) if delay is not None and delay.is_integer() else delay
            return f"ctx.sleep({shown!r})"
        when = _dt.datetime.fromtimestamp(self.until, tz=_dt.UTC)
        return f"ctx.sleep_until({when.isoformat()})"


class Step(Effect[T]):
    """Run ``fn`` at least once and record its result exactly once."""

    __slots__ = (
        "args",
        "at_most_once",
        "compensate",
        "fn",
        "key",
        "kwargs",
        "parts",
        "retry",
        "scope",
        "thread",
        "timeout",
        "validate_input",
        "validate_output",
    )
    kind = "step"
    logs_start = True

    def __init__(
        self,
        seq: int,
        name: str,
        hash: bytes,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        retry: Retry | None,
        timeout: float | None,
        compensate: Callable[..., Any] | None,
        validate_input: Callable[[Any], Any] | None,
        validate_output: Callable[[Any], Any] | None,
        key: str,
        thread: bool = True,
        at_most_once: bool = False,
    ) -> None:
        Effect.__init__(self, seq, name, hash)
        self.thread = thread
        self.at_most_once = at_most_once  # a crash fails it (no crash budget)
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.retry = retry
        self.timeout = timeout
        self.compensate = compensate
        self.validate_input = validate_input
        self.validate_output = validate_output
        self.key = key
        self.scope: Any = None  # the trio.CancelScope of a live run
        # Each argument's digest (`LogEntry.parts`): set by `Context` for a
        # step made live, else left to `describe` (a replay pays nothing).
        self.parts: list[Any] | None = None

    def as_call(self) -> str:
        return f"ctx.step({self.name})"

    def describe(self, **outcome: Any) -> LogEntry:
        parts = self.parts
        if parts is None and (self.args or self.kwargs):
            parts = self.parts = argument_digests(self.args, self.kwargs)
        return LogEntry.build(self.kind, self.name, self.hash, parts=parts, **outcome)

    def arguments(self) -> tuple[str, tuple[Any, ...], dict[str, Any]] | None:
        return self.name, self.args, self.kwargs

    def compensable(self) -> bool:
        return self.compensate is not None

    def cancel_inline(self) -> None:
        if self.scope is not None:
            self.scope.cancel()

    def with_arguments(self) -> str:
        shown = [shorten(a) for a in self.args]
        shown += [f"{k}={shorten(v)}" for k, v in sorted(self.kwargs.items())]
        return f"ctx.step({', '.join([self.name, *shown])})"


class Recorded(Effect[Any]):
    """A value computed once and replayed: ``ctx.now()``, ``random()``, ``uuid()``."""

    __slots__ = ("kind",)

    def __init__(self, seq: int, kind: str) -> None:
        Effect.__init__(self, seq, kind)
        self.kind = kind


class ContinueAsNew(Effect[NoReturn]):
    """End this run and start a fresh one under the same id with new input."""

    __slots__ = ("input",)
    kind = "continue_as_new"
    ends_run = True

    def __init__(self, seq: int, input: dict[str, Any]) -> None:
        Effect.__init__(self, seq)
        self.input = input
