"""What a mailbox holds and the mailbox of one live instance.

`StoredMessage` is one message as its sender committed it; `Mailbox` holds
a live instance's unread messages, in order, and the waits that take them.

A message may carry an *extra*: a value its sender attached beside the
payload, stored with it, which the kernel carries without reading it (the
ask feature's ``[ask id, reply-to, node]``, `_features._ask_forms`, is the
one kind there is). A wait that takes the message records its extra in its
log entry, and the driver keeps it for the feature (`Driver.took`).

A message is committed to the journal's mailbox by its sender and handed to
the live instance (`Mailbox.put`); a wait the process awaits registers here
(`Mailbox.add_wait`); `Mailbox.take_match` pairs them. Taking a message is
the owner's write (it rides on the instance's next commit); the mailbox only
keeps the in-memory side consistent with it.

Invariants (kept by every method below):

- A message id is in ``messages`` (unread) or taken (in the log), never both.
- ``messages`` holds its keys ascending (a dict keeps insertion order): the
  order the senders' commits gave them. So no list of its keys is kept
  beside it (``order`` reads them), which every live instance would pay for.
- A message at or below ``floor`` that is not unread was taken already, so a
  late hand-over of it from its sender is dropped.
- ``waits`` holds the live waits that have taken nothing yet, by effect seq;
  the oldest matching message goes to the lowest-numbered wait.
- ``messages`` and ``waits`` are the shared empty `_NO_MESSAGES` and
  `_NO_WAITS` while nothing is in them (they are never written: each write
  here replaces them first), so an instance that waits with nothing unread
  holds no dict and only a list of its one wait. Readers outside read them
  as any dict and list.
- ``extras`` holds the extra of each unread message that has one, by
  message id; a message without one has nothing kept for it.
- A message id in ``withheld`` (a drop of it is being written, or was
  written: see `_mail`) is never unread here: no hand-over or re-read of
  the journal's mailbox makes it so, and so no wait takes it.

Stored forms are positional msgpack arrays, kept as journals have
always held them; every reader accepts the shorter forms older journals
hold (no trace, no extra)::

    message   [signal name, payload, sent at (epoch seconds), traceparent, extra]

A message stores its traceparent only when it has one or an extra follows
it (then as None). A log entry keeps the extra its wait took as it was
stored (storage's `LogEntry.ask`, the field's name from when asks were the
only extras).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

from ._values import Signal

__all__ = ["Mailbox", "StoredMessage"]


@attrs.frozen(slots=True)
class StoredMessage:
    """One message of a mailbox, as its sender committed it."""

    signal: str  # the signal's name
    payload: Any
    sent_at: float | None = None  # epoch seconds (None: a stored message without it)
    trace: str | None = None  # the sender's W3C traceparent (see `_tracing`)
    extra: Any = None  # its sender's extra, as stored (None: it has none)

    def to_stored(self) -> list[Any]:
        return self.stored(self.signal, self.payload, self.sent_at, self.trace, self.extra)

    @staticmethod
    def stored(
        signal: str, payload: Any, sent_at: float | None, trace: str | None, extra: Any
    ) -> list[Any]:
        """The stored form of the message of these fields, made with no
        `StoredMessage` in between (a send's hot path)."""
        if extra is not None:
            return [signal, payload, sent_at, trace, extra]
        if trace is not None:
            return [signal, payload, sent_at, trace]
        return [signal, payload, sent_at]

    @classmethod
    def from_stored(cls, stored: Sequence[Any]) -> StoredMessage:
        return cls(*cls.unpacked(stored))

    @staticmethod
    def unpacked(stored: Sequence[Any]) -> tuple[str, Any, float | None, str | None, Any]:
        """The fields of a message's stored form, with no `StoredMessage`
        made (a delivery's hot path: a frozen class sets each field
        through ``object.__setattr__``)."""
        size = len(stored)
        if size < 4:
            return stored[0], stored[1], stored[2] if size > 2 else None, None, None
        # (An empty extra, which no version wrote, reads as none.)
        return stored[0], stored[1], stored[2], stored[3], (stored[4] or None) if size > 4 else None


class Waiting(Protocol):
    """What the mailbox uses of a wait (`_effects.Wait`, which stands above it)."""

    @property
    def seq(self) -> int: ...

    def matches(self, name: str) -> Signal | None: ...


W = TypeVar("W", bound=Waiting)


def _seq(wait: Waiting) -> int:
    return wait.seq


# The contents of an empty mailbox (see the invariants): shared, never written.
_NO_MESSAGES: dict[int, tuple[str, Any]] = {}
_NO_WAITS: list[Any] = []


class Mailbox(Generic[W]):
    """Unread messages and pending waits of one instance. Owned by its `Actor`."""

    __slots__ = ("extras", "floor", "messages", "taken", "waits", "withheld")

    def __init__(self, remember_taken: bool) -> None:
        # unread: seq -> (signal name, payload), ascending
        self.messages: dict[int, tuple[str, Any]] = _NO_MESSAGES
        self.floor = 0  # the highest message seq the journal had when last read
        # On a shared journal, mail also arrives by re-reading the journal's
        # mailbox, which can still list a message this activation took but
        # has not committed yet: remember what was taken, so it is not re-read.
        self.taken: set[int] | None = set() if remember_taken else None
        self.waits: list[W] = _NO_WAITS
        # the extras of unread messages: seq -> extra; made at the first (most
        # messages have none, and there is one mailbox per live instance)
        self.extras: dict[int, Any] | None = None
        # message ids a drop holds back from every take (see `withhold`);
        # made at the first (few instances ever have a message dropped)
        self.withheld: set[int] | None = None

    def put(self, seq: int, name: str, payload: Any) -> bool:
        """Add message ``seq`` as unread, unless it is unread here or was
        taken already (a late or repeated hand-over): then False."""
        if seq in self.messages or seq <= self.floor:
            return False
        if self.withheld is not None and seq in self.withheld:
            return False
        if self.taken is not None and seq in self.taken:
            return False
        self._add(seq, (name, payload))
        return True

    @property
    def order(self) -> list[int]:
        """The ids of the unread messages, ascending."""
        return list(self.messages)

    def _add(self, seq: int, message: tuple[str, Any]) -> None:
        # (seq is not unread here.)
        messages = self.messages
        if messages is _NO_MESSAGES:
            self.messages = {seq: message}
        elif not messages or seq > next(reversed(messages)):
            # The common case: messages arrive in commit order. (A dict
            # emptied by `withhold` is kept, so it can be empty here.)
            messages[seq] = message
        else:
            messages[seq] = message
            self.messages = dict(sorted(messages.items()))

    def reload(self, floor: int, unread: Iterable[tuple[int, Any]]) -> list[tuple[int, str, Any]]:
        """Bring the mailbox in line with what the journal holds.

        ``floor`` is the journal's highest message seq and ``unread`` its
        unread messages ``(seq, (name, payload, ...))``. Messages handed over
        meanwhile that the journal no longer lists were taken: dropped.
        Returns the messages that are new here, in order.
        """
        self.floor = floor
        listed = {seq for seq, _ in unread}
        messages = dict(self.messages)
        for seq in [s for s in messages if s <= floor and s not in listed]:
            del messages[seq]
            if self.extras:
                self.extras.pop(seq, None)
        added = []
        withheld = self.withheld or ()
        for seq, stored in unread:
            if seq not in messages and seq not in withheld:
                message = StoredMessage.from_stored(stored)
                added.append((seq, message.signal, message.payload))
                messages[seq] = (message.signal, message.payload)
                if message.extra is not None:
                    self.keep_extra(seq, message.extra)
        self.messages = dict(sorted(messages.items())) if messages else _NO_MESSAGES
        return added

    def withhold(self, seq: int) -> tuple[str, Any] | None:
        """Hold message ``seq`` back from every take (a drop of it is being
        written): out of the unread ones, and never unread here again until
        `release`. Returns it (signal name, payload) if it was unread here;
        None if it was taken already, or not handed over yet."""
        if self.withheld is None:
            self.withheld = set()
        self.withheld.add(seq)
        return self.messages.pop(seq, None)  # (the shared empty one: nothing to pop)

    def release(self, seq: int, message: tuple[str, Any] | None, *, dropped: bool) -> None:
        """The drop of message ``seq`` is over. ``dropped``: it was written,
        and the message stays held back (a late hand-over of it is refused);
        else ``message`` (what `withhold` returned) is unread again."""
        if dropped:
            if self.extras:
                self.extras.pop(seq, None)  # never taken, so never settled here
            return
        if self.withheld is not None:
            self.withheld.discard(seq)
        if message is not None and seq not in self.messages:
            self._add(seq, message)

    def keep_extra(self, seq: int, extra: Any) -> None:
        """Message ``seq`` (unread) carries ``extra``."""
        if self.extras is None:
            self.extras = {}
        self.extras[seq] = extra

    def add_wait(self, wait: W) -> None:
        """Register a live wait; it takes a message at the next `take_match`."""
        waits = self.waits
        if waits:
            bisect.insort(waits, wait, key=_seq)
        else:
            self.waits = [wait]  # (the usual case: one wait at a time)

    def remove_wait(self, wait: W) -> None:
        """Drop a wait that will take nothing (it lost a race, or was abandoned)."""
        waits = self.waits
        if wait in waits:
            if len(waits) == 1:
                self.waits = _NO_WAITS
            else:
                waits.remove(wait)

    def take_match(self, live: Collection[object]) -> tuple[W, Signal, int, Any] | None:
        """Take the oldest message that the lowest-numbered live wait matches.

        Returns ``(wait, signal, message seq, payload)`` with both removed
        from the mailbox (the caller logs the take), or None if no wait in
        ``live`` matches any unread message.
        """
        messages = self.messages
        waits = self.waits
        if not waits or not messages:
            return None
        for w, wait in enumerate(waits):
            if wait not in live:
                continue
            for mseq, (name, payload) in messages.items():
                signal = wait.matches(name)
                if signal is None:
                    continue
                # (Emptied, they go back to the shared empty ones: a dict
                # keeps its table when its last key is deleted.)
                if len(messages) == 1:
                    self.messages = _NO_MESSAGES
                else:
                    del messages[mseq]
                if len(waits) == 1:
                    self.waits = _NO_WAITS
                else:
                    del waits[w]
                if self.taken is not None:
                    self.taken.add(mseq)
                return wait, signal, mseq, payload
        return None
