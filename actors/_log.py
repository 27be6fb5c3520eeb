"""Log entries: what a run records at each effect position, as typed records.

An entry holding a value or an error is an *outcome*; one without is a
*started* record (a step attempt, a timer's due time, a call's child) that
lets a resumed run continue where the last one stopped.

In the journal an entry is a map with short keys; that is the journal
format, and `LogEntry.to_stored` / `LogEntry.from_stored` are the only code
that knows it. Keys this version does not know are kept (``extra``) and
written back as they were, never dropped.

=====  =============================================
key    field
=====  =============================================
k      kind (the effect's kind: "step", "wait", ...)
n      name
h      argument hash
v      value (present only in an outcome)
e      error record (present only in a failed outcome)
m      seq of the message a wait or call took
s      signal name of the message a ``receive`` took
a      attempt (steps, from 1)
f      failed attempts so far (steps)
c      attempts cut short by closing the system (steps)
key    idempotency key (steps)
due    due time, epoch seconds (timers)
child  address of the child a call created
q      the ask a wait took: ``[ask id, reply-to address, asker's node]``
=====  =============================================
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["LogEntry", "NO_VALUE", "children_named", "read_log"]


class _NoValue:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_VALUE"


#: The ``value`` of an entry that holds none (``None`` is a value).
NO_VALUE: Any = _NoValue()

_KNOWN = frozenset(
    ("k", "n", "h", "v", "e", "m", "s", "a", "f", "c", "key", "due", "child", "q")
)


@attrs.define(slots=True, eq=True)
class LogEntry:
    """One position of a run's log."""

    kind: str
    name: str = ""
    hash: bytes = b""
    value: Any = NO_VALUE
    error: dict[str, Any] | None = None
    message: int | None = None
    signal: str | None = None
    attempt: int | None = None
    failures: int | None = None
    closed: int | None = None
    key: str | None = None
    due: float | None = None
    child: str | None = None
    ask: list[Any] | None = None
    extra: dict[str, Any] | None = None  # keys of another version, kept as they were

    @property
    def is_outcome(self) -> bool:
        """True if the entry holds the effect's value or error."""
        return self.value is not NO_VALUE or self.error is not None

    def to_stored(self) -> dict[str, Any]:
        """The map the journal stores."""
        stored: dict[str, Any] = {"k": self.kind, "n": self.name, "h": self.hash}
        if self.value is not NO_VALUE:
            stored["v"] = self.value
        if self.error is not None:
            stored["e"] = self.error
        if self.message is not None:
            stored["m"] = self.message
        if self.signal is not None:
            stored["s"] = self.signal
        if self.attempt is not None:
            stored["a"] = self.attempt
        if self.failures is not None:
            stored["f"] = self.failures
        if self.closed is not None:
            stored["c"] = self.closed
        if self.key is not None:
            stored["key"] = self.key
        if self.due is not None:
            stored["due"] = self.due
        if self.child is not None:
            stored["child"] = self.child
        if self.ask is not None:
            stored["q"] = self.ask
        if self.extra:
            stored.update(self.extra)
        return stored

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> LogEntry:
        """The entry of a map the journal stored."""
        get = stored.get
        extra = {k: v for k, v in stored.items() if k not in _KNOWN} if len(stored) > 3 else None
        return cls(
            kind=get("k", ""), name=get("n", ""), hash=get("h", b""),
            value=stored["v"] if "v" in stored else NO_VALUE, error=get("e"),
            message=get("m"), signal=get("s"), attempt=get("a"), failures=get("f"),
            closed=get("c"),
            key=get("key"), due=get("due"), child=get("child"), ask=get("q"),
            extra=extra or None,
        )  # fmt: skip

    def identity(self) -> dict[str, str]:
        """``{"k": kind, "n": name}``: how `NonDeterminismError` reports an effect."""
        return {"k": self.kind, "n": self.name}

    def show(self) -> str:
        """``step 'charge'``: kind and name, for messages."""
        return f"{self.kind} {self.name!r}" if self.name else self.kind


def read_log(stored: dict[int, Any]) -> dict[int, LogEntry]:
    """A run's log as `Reader.log` gives it, typed."""
    return {seq: LogEntry.from_stored(entry) for seq, entry in stored.items()}


def children_named(log: dict[int, LogEntry]) -> dict[str, int]:
    """The child addresses a run's log names (its calls and spawns), each
    with the seq of the effect that made it."""
    return {
        entry.name: seq
        for seq, entry in sorted(log.items())
        if entry.kind in ("call", "spawn")
    }
