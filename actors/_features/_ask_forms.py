"""The ask's forms, apart from its service (`_asks`): the effects of
``ctx.ask`` and ``ctx.reply`` (`Ask`, `Reply`), who asked a message
(`Asker`) and its stored form, the reply's signal, ask ids, and what an
instance owes its askers when it ends on disk with no system running it
(`unanswered_on_disk`, `answer_offline`: the CLI's).

An asked message carries its asker as its *extra* (`_kernel._mailbox`),
stored beside the payload; the kernel carries it without reading it, and
the wait that takes the message keeps it for ``ctx.reply`` (`Driver.took`).
Its stored form, the one the kernel sees::

    asker     [ask id, reply-to address, asker's node]

older journals may hold it without the node. ``reply-to`` is the asking
instance's address, or a system ask's reply box (`BOX_PREFIX` + ask id);
``node`` the node of a system asker, None for an instance (its answer
goes to its mailbox, wherever it runs). An extra's first element
identifies it (`Driver.owed`): here the ask id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from storage import STATUS_WORDS, Txn, instance_id

from .._kernel import _effects as fx, _message_txns
from .._kernel._failures import ErrorRecord
from .._kernel._log import LogEntry
from .._kernel._mailbox import StoredMessage
from .._kernel._values import Signal
from ..errors import NotDelivered

__all__ = [
    "BOX_PREFIX",
    "REPLY_PREFIX",
    "Ask",
    "Asker",
    "Reply",
    "answer_offline",
    "ask_id_of",
    "ended",
    "reply_outcome",
    "reply_signal",
    "unanswered_on_disk",
]

BOX_PREFIX = "\x00ask "  # the reply-to address of a system ask: BOX_PREFIX + ask id
REPLY_PREFIX = "\x00reply "  # the signal of a reply message: REPLY_PREFIX + ask id


def reply_signal(ask_id: str) -> Signal:
    """The system signal carrying the reply to the ask ``ask_id``."""
    return Signal._system(REPLY_PREFIX + ask_id)


def ask_id_of(address: str, inc: int, run: int, seq: int) -> str:
    """The id of ``ctx.ask`` effect ``seq``: unique across incarnations and runs."""
    return f"{address}#{inc}.{run}.{seq}"


@attrs.frozen(slots=True)
class Asker:
    """Who asked a message and where its answer goes (see the module
    docstring), read from its stored form. The hot paths (an ask sent, a
    reply) keep the stored form as it is; this reads it off them."""

    ask_id: str
    reply_to: str
    node: str | None = None

    def to_stored(self) -> list[Any]:
        return self.stored(self.ask_id, self.reply_to, self.node)

    @classmethod
    def from_stored(cls, stored: Sequence[Any]) -> Asker:
        return cls(*cls.fields(stored))

    @staticmethod
    def stored(ask_id: str, reply_to: str, node: str | None) -> list[Any]:
        """The stored form of the asker of these fields, with no `Asker`
        made (an ask's hot path): the one place that lays it out."""
        return [ask_id, reply_to, node]

    @staticmethod
    def fields(stored: Sequence[Any]) -> tuple[str, str, str | None]:
        """``(ask_id, reply_to, node)`` of a stored form, with no `Asker`
        made (a reply's hot path). A form written before nodes were kept
        has two elements: its node reads as None."""
        return stored[0], stored[1], stored[2] if len(stored) > 2 else None


class Ask(fx.Wait[Any]):
    """``ctx.ask``: send a message that asks (once, recorded), then wait for
    the reply message its ask id names (see `_asks`)."""

    __slots__ = ("address", "ask_id", "payload", "signal")
    kind = "ask"
    logs_start = True
    replayed = fx.Effect.replayed  # the answer, as logged (no message of a wait's)

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


class Reply(fx.Effect[None]):
    """``ctx.reply``: answer the asker ``ask`` (its stored form), or, with
    None, record that the message taken was not asked (a no-op)."""

    __slots__ = ("ask", "payload")
    kind = "reply"

    def __init__(self, seq: int, hash: bytes, payload: Any, ask: list[Any] | None) -> None:
        fx.Effect.__init__(self, seq, ask[0] if ask is not None else "", hash)
        self.payload = payload
        self.ask = ask

    def as_call(self) -> str:
        return "ctx.reply(...)"


_ENDED_WORDS = {
    "unknown": "there is no instance there",
    "continued as new": "the run that took it continued as new",
    "restarted": "the run that took it was restarted",
}


def ended(address: str, status: str) -> NotDelivered:
    """What an asker of ``address`` raises when it ended ``status`` without replying."""
    words = _ENDED_WORDS.get(status) or STATUS_WORDS.get(status, f"it is {status}")
    return NotDelivered(
        f"{address!r} ended without replying to the ask ({words}); its process must "
        "ctx.reply to each message it takes from ask, or ask another instance",
        address=address,
        reason=status,
    )


def reply_outcome(ask: Ask, payload: Any, mseq: int) -> tuple[Any, BaseException | None, LogEntry]:
    """What a ``ctx.ask`` gets from its reply message ``mseq``: value, error
    and the log entry that records it (the take rides with it)."""
    if isinstance(payload, dict) and "v" in payload:
        return payload["v"], None, ask.describe(message=mseq, value=payload["v"])
    status = payload.get("ended", "ended") if isinstance(payload, dict) else "ended"
    error = ended(ask.address, status)
    return None, error, ask.describe(message=mseq, error=ErrorRecord.undelivered(error).to_stored())


# -- an instance ended on disk ------------------------------------------------------


def unanswered_on_disk(
    log: dict[int, LogEntry], mail: Iterable[tuple[int, Any]]
) -> list[list[Any]]:
    """The askers (stored forms) an instance on disk owes an answer: taken
    in its current run (``log``, `Reader.entries`) without a reply, and
    unread in its ``mail``. (`_asks.at_disk_end` answers them.)"""
    owed: dict[str, list[Any]] = {}
    for _, entry in sorted(log.items()):
        if entry.kind == "wait" and entry.ask and entry.is_outcome:
            owed[entry.ask[0]] = entry.ask
        elif entry.kind == "reply" and entry.name:
            owed.pop(entry.name, None)
    for _, stored in mail:
        unread = StoredMessage.from_stored(stored).extra
        if unread is not None:
            owed.setdefault(unread[0], unread)
    return list(owed.values())


def answer_offline(txn: Txn, asks: Iterable[list[Any]], status: str, now: float) -> None:
    """Into ``txn``, written with no system running (the CLI): tell each
    asking instance among ``asks`` (stored forms, `unanswered_on_disk`)
    that the instance ended ``status`` without replying. (A system's asks
    end with that system.)"""
    for stored in asks:
        ask = Asker.from_stored(stored)
        if not ask.reply_to.startswith(BOX_PREFIX):
            _message_txns.add_message(
                txn, instance_id(ask.reply_to), REPLY_PREFIX + ask.ask_id, {"ended": status}, now
            )
