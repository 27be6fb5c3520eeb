"""What a mailbox holds: `StoredMessage`, and the `Asker` of a message
that was asked (see `_asks`).

Their stored forms are positional msgpack arrays, kept as journals have
always held them; every reader accepts the shorter forms older journals
hold (no trace, no ask, an ask with no node)::

    message   [signal name, payload, sent at (epoch seconds), traceparent, ask]
    ask       [ask id, reply-to address, asker's node]

A message stores its traceparent only when it has one or an ask follows
it (then as None). A log entry keeps the ask its wait took in the ask's
stored form (`LogEntry.ask`); `Asker.from_stored` reads it there too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["Asker", "StoredMessage"]


@attrs.frozen(slots=True)
class Asker:
    """Who asked a message and where its answer goes.

    ``reply_to`` is the asking instance's address, or a system ask's reply
    box (`_asks.BOX_PREFIX` + ``ask_id``); ``node`` the node of a system
    asker, None for an instance (its answer goes to its mailbox, wherever
    it runs).
    """

    ask_id: str
    reply_to: str
    node: str | None = None

    def to_stored(self) -> list[Any]:
        return [self.ask_id, self.reply_to, self.node]

    @classmethod
    def from_stored(cls, stored: Sequence[Any]) -> Asker:
        return cls(stored[0], stored[1], stored[2] if len(stored) > 2 else None)


@attrs.frozen(slots=True)
class StoredMessage:
    """One message of a mailbox, as its sender committed it."""

    signal: str  # the signal's name
    payload: Any
    sent_at: float | None = None  # epoch seconds (None: a stored message without it)
    trace: str | None = None  # the sender's W3C traceparent (see `_tracing`)
    asker: Asker | None = None  # None: it was sent, not asked

    def to_stored(self) -> list[Any]:
        return self.stored(self.signal, self.payload, self.sent_at, self.trace, self.asker)

    @staticmethod
    def stored(
        signal: str, payload: Any, sent_at: float | None, trace: str | None, asker: Asker | None
    ) -> list[Any]:
        """The stored form of the message of these fields, made with no
        `StoredMessage` in between (a send's hot path)."""
        if asker is not None:
            return [signal, payload, sent_at, trace, asker.to_stored()]
        if trace is not None:
            return [signal, payload, sent_at, trace]
        return [signal, payload, sent_at]

    @classmethod
    def from_stored(cls, stored: Sequence[Any]) -> StoredMessage:
        size = len(stored)
        if size < 4:
            return cls(stored[0], stored[1], stored[2] if size > 2 else None)
        ask = stored[4] if size > 4 else None
        return cls(
            stored[0],
            stored[1],
            stored[2],
            stored[3],
            Asker.from_stored(ask) if ask else None,
        )
