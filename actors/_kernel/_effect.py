"""`Effect`: what a process awaits, and `Behaviour`: how a kind of leaf
effect runs live (which runs which kind is wired by the system:
`_system._wiring`). The kinds are in `_leaves` and `_composites`; `_effects`
holds them all (what ``fx.`` names)."""

from __future__ import annotations

import reprlib
from collections.abc import Generator
from types import CodeType
from typing import Any, ClassVar, Generic, NoReturn, TypeGuard, TypeVar

from ..errors import ContextError
from ._log import NO_VALUE, LogEntry
from ._values import Signal

__all__ = ["Behaviour", "Composite", "Effect", "shorten"]

T = TypeVar("T", covariant=True)  # what awaiting the effect gives


class Behaviour:
    """How one kind of leaf effect runs live: the actor calls these (see
    `_instance.Actor.begin`), and the module of the effect's feature says
    what they do in a subclass, which the system's wiring names for the
    kind (`_system._wiring`). So the actor knows no kind of effect, and a
    new kind is its class, its behaviour, its row in the wiring and its
    tests. ``actor`` is the live instance (`_interfaces.ActorAPI`)."""

    @staticmethod
    def start(actor: Any, leaf: Any, started: LogEntry | None) -> None:
        """Begin ``leaf``, which replay left open; ``started`` is the entry
        an earlier activation logged for it as it began (a step's attempt,
        a timer's due time, a call's child), if any."""
        raise AssertionError(f"{leaf!r} cannot run live: its behaviour has no start")

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


class Effect(Generic[T]):
    """Something a process awaits. Created by `Context` methods only.

    ``Effect[T]``: awaiting it gives a ``T`` (for type checkers)."""

    # made_in, made_at: the code object and instruction offset that made the
    # effect, set by `Context` (never by __init__: a replay pays nothing for
    # them); read only to say where a forgotten effect was made. logged:
    # None, or the driver whose log holds its outcome, so replay answers
    # its await at once (set by `Context`; see `__await__`).
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
        self.logged: Any = None

    def __await__(self) -> Generator[Effect[Any], Any, T]:
        driver = self.logged
        if driver is not None:  # answered at once: a generator is the faster await
            # A wake's hot path: the effect just made, awaited alone, whose
            # value the log holds, is answered here, inside the process's
            # own step, as `_driver.Driver.advance` would answer it (the
            # same check, `answered_by`), without the round trip out of
            # the coroutine and back: a replayed effect costs half the calls.
            # Anything else (a mismatch, a started record, an error, a
            # child, one awaited twice or late, a burst's end) goes the
            # driver's way, which says what is wrong.
            if driver.fresh is self and driver.burst > 0 and self.parent is None:
                entry = driver.log.get(self.seq)
                if not (self.done or self.ends_run) and self.answered_by(entry):
                    driver.fresh = None  # (awaited at once: `advance`'s usual case)
                    driver.burst -= 1
                    self.done = True
                    self.value = self.replayed(entry.value, entry, driver)
            return self._answered()
        # It may wait long: the effect is its own iterator, for the process
        # holds its await while it waits, and a generator is 200 B more per
        # waiting instance. The coroutine's first step takes `__next__`,
        # which hands the effect to the driver; the driver answers by
        # sending the value (`send`, or `__next__` for None) or throwing the
        # error (which CPython raises at the await: there is no `throw`).
        # A StopIteration raised per await costs ~0.2 µs more than a
        # generator's return, which a replay of many effects would feel.
        return self  # type: ignore[return-value]  # (no cast: a call per await)

    def answered_by(self, entry: LogEntry | None) -> TypeGuard[LogEntry]:
        """Whether ``entry``, the log's at this effect's seq, answers it
        as a replay does: the same kind, name and argument hash, holding a
        value (an error, a started record or a child goes the driver's
        longer way). The one place replay's check is written: the driver
        and `__await__` both ask it."""
        return (
            entry is not None
            and entry.value is not NO_VALUE
            and entry.kind == self.kind
            and entry.name == self.name
            and entry.hash == self.hash
            and not self.makes_child
        )

    def _answered(self) -> Generator[Effect[Any], Any, T]:
        if not self.done:
            # The driver answers with the value (send) or the error (throw).
            got: T = yield self
            return got
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


def _reused(effect: Effect[Any]) -> Exception:
    return ContextError(
        f"{effect!r} was already awaited or passed to another first/all/settled; "
        "create a new effect for each use"
    )


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40
_SHORT.maxlist = _SHORT.maxdict = 5
_SHORT.maxlevel = 2


def shorten(value: Any) -> str:
    """``value``'s repr, cut short for a message."""
    return _SHORT.repr(value)
