"""Effects: the lazily-run, numbered operations a process awaits.

An effect takes its sequence number when the process *creates* it, and its
outcome is logged under that number, so ``ctx.all(a, b)`` replays the same
whichever of ``a`` and ``b`` finished first. Awaiting an effect yields it to
the instance's driver (see `_instance`), which answers from the log or runs
it live. Composites (`First`, `All`) have no number of their own: their
outcome follows from their children's.
"""

from __future__ import annotations

import datetime as _dt
import reprlib
from collections.abc import Callable, Generator
from types import CodeType
from typing import Any, ClassVar, Generic, NoReturn, TypeVar, cast

from storage import argument_digests

from ..errors import ContextError
from ._log import LogEntry
from ._messages import Asker
from ._records import Outcome, Retry, Signal

T = TypeVar("T", covariant=True)  # what awaiting the effect gives
B = TypeVar("B", bound="type[Behaviour]")


class Behaviour:
    """How one kind of leaf effect runs live: the actor calls these (see
    `_instance.Actor.begin`), and the module of the effect's feature says
    what they do, registering a subclass with `runs_live`. So the actor
    knows no kind of effect, and a new kind is its class, its behaviour and
    its tests. ``actor`` is the live instance (`_interfaces.ActorAPI`)."""

    @staticmethod
    def start(actor: Any, leaf: Any, started: LogEntry | None) -> None:
        """Begin ``leaf``, which replay left open; ``started`` is the entry
        an earlier activation logged for it as it began (a step's attempt,
        a timer's due time, a call's child), if any."""
        raise AssertionError(f"{leaf!r} cannot run live: no feature registered its behaviour")

    @staticmethod
    def abandon(actor: Any, leaf: Any) -> None:
        """Stop live ``leaf``: it lost a race, or its run is interrupted.
        (By default nothing: an emit that lost a race still completes its
        write.)"""

    @staticmethod
    def drop(actor: Any, leaf: Any) -> None:
        """Clear what an earlier activation began for ``leaf``, now never
        run: the race it was in was decided without it."""

    @staticmethod
    def take(actor: Any, wait: Any, signal: Signal, seq: int, payload: Any) -> None:
        """Complete ``wait`` (a kind of `Wait`) with message ``seq``, which
        the mailbox matched to it; the take itself is in the actor's
        ridden writes already."""
        raise AssertionError(f"{wait!r} takes no message: it is no wait")


def runs_live(*kinds: type[Effect[Any]]) -> Callable[[B], B]:
    """Class decorator: ``kinds`` of effect run live as the decorated
    `Behaviour` says (a feature module's hook into the actor)."""

    def register(behaviour: B) -> B:
        for kind in kinds:
            kind.behaviour = behaviour
        return behaviour

    return register


class Effect(Generic[T]):
    """Something a process awaits. Created by `Context` methods only.

    ``Effect[T]``: awaiting it gives a ``T`` (for type checkers)."""

    # made_in, made_at: the code object and instruction offset that made the
    # effect, set by `Context` (never by __init__: a replay pays nothing for
    # them); read only to say where a forgotten effect was made. logged:
    # its outcome is in the log, so replay answers its await at once (set
    # by `Context`; see `__await__`).
    __slots__ = (
        "done",
        "error",
        "hash",
        "logged",
        "made_at",
        "made_in",
        "name",
        "parent",
        "seq",
        "value",
    )
    kind = "effect"
    behaviour: ClassVar[type[Behaviour]] = Behaviour  # how it runs live (`runs_live`)
    makes_child: ClassVar[bool] = False  # a call or spawn: its log names a child
    # Whether its live run logs a *started* record before its outcome (a
    # step's attempt, a timer's due time, a call's child, an ask sent);
    # every other kind logs its outcome only, so a started record of one
    # is a history the runtime never wrote (`Driver.replay` refuses it).
    logs_start: ClassVar[bool] = False
    # A call (True) or a spawn (False), for a kind that makes a child: a
    # call's live run lasts until the child's end, a spawn's until it exists.
    awaited: ClassVar[bool] = False
    ends_run: ClassVar[bool] = False  # ctx.continue_as_new: awaiting it ends the run
    made_in: CodeType
    made_at: int

    # Subclasses call ``Effect.__init__(self, ...)``, not ``super().__init__``:
    # a replay makes one effect per log entry, and super() costs one more call.
    # (`Wait.__init__`, the commonest, writes these stores out: keep it in step.)

    def __init__(self, seq: int, name: str = "", hash: bytes = b"") -> None:
        self.seq = seq
        self.name = name
        self.hash = hash
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.parent: Composite[Any] | None = None
        self.logged = False

    def __await__(self) -> Generator[Effect[Any], Any, T]:
        if self.logged:  # answered at once: a generator is the faster await
            return self._answered()
        # It may wait long: the effect is its own iterator, for the process
        # holds its await while it waits, and a generator is 200 B more per
        # waiting instance. The coroutine's first step takes `__next__`,
        # which hands the effect to the driver; the driver answers by
        # sending the value (`send`, or `__next__` for None) or throwing the
        # error (which CPython raises at the await: there is no `throw`).
        # A StopIteration raised per await costs ~0.2 µs more than a
        # generator's return, which a replay of many effects would feel.
        return cast("Generator[Effect[Any], Any, T]", self)

    def _answered(self) -> Generator[Effect[Any], Any, T]:
        if not self.done:
            # The driver answers with the value (send) or the error (throw).
            answer: T = yield self
            return answer
        if self.error is not None:
            raise self.error
        value: T = self.value
        return value

    def __next__(self) -> Effect[Any]:
        if not self.done:
            return self
        if self.error is not None:
            raise self.error
        raise StopIteration(self.value)

    def send(self, value: Any) -> NoReturn:
        """The driver's answer: the await gives ``value``."""
        raise StopIteration(value)

    def leaves(self) -> list[Effect[Any]]:
        return [self]

    def decided_above(self) -> bool:
        """Whether a composite it is in is done already (a race it is in was
        decided without it): then it never runs."""
        parent = self.parent
        while parent is not None:
            if parent.done:
                return True
            parent = parent.parent
        return False

    def replayed(self, value: Any, entry: LogEntry, driver: Any) -> Any:
        """What the process gets from ``value``, the outcome ``entry`` logged
        for this effect, as `_driver.Driver.replay` answers it: the value as
        logged, for most kinds."""
        return value

    def describe(self, **outcome: Any) -> LogEntry:
        """The effect's log entry: kind, name and argument hash (what replay
        compares), with the fields of ``outcome`` (its value, error, the
        message it took, ...). Entries are immutable: one is built whole."""
        return LogEntry.build(self.kind, self.name, self.hash, **outcome)

    def compensable(self) -> bool:
        """Whether a cancel that cuts it short registers its compensation (a
        step with ``compensate=``: it may have applied)."""
        return False

    def cancel_inline(self) -> None:
        """Cancel its run where it runs in the actor's own task (a step
        awaited alone); other kinds run elsewhere, and are abandoned."""

    def as_call(self) -> str:
        """The call that made it, as process code reads: ``ctx.emit(...)``."""
        return f"ctx.{self.kind}({self.name!r})" if self.name else f"ctx.{self.kind}(...)"

    def with_arguments(self) -> str:
        """The call with the arguments it was made with, for a message that
        says what differs from a log entry (`as_call` unless the kind has
        arguments worth showing)."""
        return self.as_call()

    def arguments(self) -> tuple[str, tuple[Any, ...], dict[str, Any]] | None:
        """``(head, args, kwargs)``: its hash is the digest of ``[head,
        list(args), kwargs]``, and its log entry keeps the digests of
        ``args`` and ``kwargs`` one by one (`LogEntry.parts`,
        `storage.argument_digests`); None for a kind that keeps none."""
        return None

    def made_where(self) -> str:
        """``file:line`` of the code that made it (``?`` if `Context` did not say)."""
        try:
            code, offset = self.made_in, self.made_at
        except AttributeError:
            return "?"
        for start, end, line in code.co_lines():
            if start <= offset < end and line is not None:
                return f"{code.co_filename}:{line}"
        return f"{code.co_filename}:{code.co_firstlineno}"  # pragma: no cover

    def __repr__(self) -> str:
        return f"<{self.kind} effect #{self.seq} {self.name!r}>"


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
        self.logged = False
        self.signals = signals
        self.pair = pair  # receive() gives (signal, payload); wait() the payload

    def matches(self, name: str) -> Signal | None:
        for signal in self.signals:
            if signal.name == name:
                return signal
        return None

    def replayed(self, value: Any, entry: LogEntry, driver: Any) -> Any:
        # The message it took may have been asked: ctx.reply answers that ask.
        ask = entry.ask
        driver.took(self.seq, Asker.from_stored(ask) if ask else None)
        return (self.matches(entry.signal or ""), value) if self.pair else value

    def as_call(self) -> str:
        names = ", ".join(signal.name for signal in self.signals)
        return f"ctx.receive({names})" if self.pair else f"ctx.wait({names})"


class Call(Wait[T]):
    """An awaited child: done when the child's end message arrives."""

    __slots__ = ("address", "creating", "input", "params", "proc", "queue")
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
        self.queue: tuple[Any, int] | None = None  # (Queue, priority): start it queued

    def as_call(self) -> str:
        return f"ctx.call({self.address!r})"


class Spawn(Effect[T]):
    """A detached, supervised child: done once the child exists (its
    `ChildHandle` is ``T``)."""

    __slots__ = ("address", "creating", "input", "params", "proc", "queue", "restart")
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
        self.queue: tuple[Any, int] | None = None  # (Queue, priority): start it queued


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


class Ask(Wait[Any]):
    """``ctx.ask``: send a message that asks (once, recorded), then wait for
    the reply message its ask id names (see `_asks`)."""

    __slots__ = ("address", "ask_id", "payload", "signal")
    kind = "ask"
    logs_start = True
    replayed = Effect.replayed  # the answer, as logged (no message of a wait's)

    def __init__(
        self, seq: int, hash: bytes, address: str, signal: Signal, payload: Any, ask_id: str
    ) -> None:
        super().__init__(seq, (reply_signal(ask_id),), pair=False)
        self.name = address
        self.hash = hash
        self.address = address
        self.signal = signal
        self.payload = payload
        self.ask_id = ask_id

    def as_call(self) -> str:
        return f"ctx.ask({self.address!r}, {self.signal.name})"


class Reply(Effect[None]):
    """``ctx.reply``: answer the ask ``ask``, or, with None, record that the
    message taken was not asked (a no-op)."""

    __slots__ = ("ask", "payload")
    kind = "reply"

    def __init__(self, seq: int, hash: bytes, payload: Any, ask: Asker | None) -> None:
        Effect.__init__(self, seq, ask.ask_id if ask is not None else "", hash)
        self.payload = payload
        self.ask = ask

    def as_call(self) -> str:
        return "ctx.reply(...)"


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


REPLY_PREFIX = "\x00reply "


def reply_signal(ask_id: str) -> Signal:
    """The system signal carrying the reply to the ask ``ask_id``."""
    return Signal._system(REPLY_PREFIX + ask_id)


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


class Composite(Effect[T]):
    """A race or join over child effects; unnumbered."""

    __slots__ = ("children", "names", "remaining")

    def __init__(self, children: list[Effect[Any]], names: list[str] | None) -> None:
        Effect.__init__(self, -1)
        self.children = children
        self.names = names
        self.remaining = len(children)  # children not done yet
        for child in children:
            if child.parent is not None or child.done:
                raise _reused(child)
            child.parent = self

    def leaves(self) -> list[Effect[Any]]:
        return [leaf for child in self.children for leaf in child.leaves()]

    def settle_from_children(self, child: Effect[Any] | None = None) -> bool:
        """Decide the outcome, True if decided: from ``child``, which just
        finished (O(1), the live path), or else from all children (replay)."""
        raise NotImplementedError  # pragma: no cover


def _first_seq(effect: Effect[Any]) -> int:
    return min(leaf.seq for leaf in effect.leaves())


def _reused(effect: Effect[Any]) -> Exception:
    return ContextError(
        f"{effect!r} was already awaited or passed to another first/all/settled; "
        "create a new effect for each use"
    )


class First(Composite[tuple[str, Any]]):
    """Done when its first child is: ``(name, value)``, or that child's error."""

    __slots__ = ()
    kind = "first"

    def settle_from_children(self, child: Effect[Any] | None = None) -> bool:
        for name, each in zip(self.names or (), self.children, strict=False):
            if each.done if child is None else each is child:
                self.done = True
                if each.error is not None:
                    self.error = each.error
                else:
                    self.value = (name, each.value)
                return True
        return False

    def as_call(self) -> str:
        named = zip(self.names or (), self.children, strict=False)
        return f"ctx.first({', '.join(f'{name}={each.as_call()}' for name, each in named)})"


class All(Composite[list[Any]]):
    """``all``: a list of values, or the error of the lowest-numbered failure.
    ``settled``: a list of `Outcome`, never an error."""

    __slots__ = ("settled",)
    kind = "all"

    def __init__(self, children: list[Effect[Any]], settled: bool) -> None:
        super().__init__(children, None)
        self.settled = settled

    def settle_from_children(self, child: Effect[Any] | None = None) -> bool:
        if child is not None:  # live: one more child finished
            self.remaining -= 1
            if not self.settled and child.error is not None:
                self.done = True
                self.error = child.error
                return True
            if self.remaining > 0:
                return False
        elif not self.settled:  # replay: the lowest-numbered failure wins
            for each in sorted(self.children, key=_first_seq):
                if each.done and each.error is not None:
                    self.done = True
                    self.error = each.error
                    return True
        self.remaining = sum(1 for c in self.children if not c.done)
        if self.remaining == 0:
            self.done = True
            if self.settled:
                self.value = [
                    Outcome(ok=c.error is None, value=c.value, error=c.error) for c in self.children
                ]
            else:
                self.value = [c.value for c in self.children]
            return True
        return False

    def as_call(self) -> str:
        verb = "settled" if self.settled else "all"
        return f"ctx.{verb}({', '.join(each.as_call() for each in self.children)})"


class Then(Composite[T]):
    """One child's value passed through ``fn`` (which may raise instead):
    what ``ctx.ask(..., timeout=)`` and ``ctx.scope`` give. The child's
    error passes through unchanged. As any composite, it logs nothing of its
    own, so replay decides it from the child's outcome again."""

    __slots__ = ("call", "fn")
    kind = "then"

    def __init__(self, child: Effect[Any], fn: Callable[[Any], T], call: str) -> None:
        Composite.__init__(self, [child], None)
        self.fn = fn
        self.call = call  # what as_call says

    def settle_from_children(self, child: Effect[Any] | None = None) -> bool:
        only = self.children[0]
        if not only.done:
            return False
        self.done = True
        if only.error is not None:
            self.error = only.error
        else:
            try:
                self.value = self.fn(only.value)
            except Exception as exc:  # noqa: BLE001 - raised in the process, as if it ran there
                self.error = exc
        return True

    def as_call(self) -> str:
        return self.call


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40
_SHORT.maxlist = _SHORT.maxdict = 5
_SHORT.maxlevel = 2


def shorten(value: Any) -> str:
    """``value``'s repr, cut short for a message."""
    return _SHORT.repr(value)
