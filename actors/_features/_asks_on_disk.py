"""The asks an instance owes an answer when it ends on disk, with no
system running it: "ended without replying", written into the transaction
that records its end, as `_asks.at_run_end` does for a live run's end
(see `_asks`). `at_disk_end` is the system's (a cancel written on disk);
`unanswered_on_disk` and `answer_offline` the CLI's, with no system at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from storage import Txn, instance_id

from .._kernel import _effects as fx, _message_txns
from .._kernel._hooks import After
from .._kernel._interfaces import SystemAPI
from .._kernel._log import LogEntry
from .._kernel._mailbox import Asker, StoredMessage
from ._asks import BOX_PREFIX, answer

__all__ = ["answer_offline", "at_disk_end", "unanswered_on_disk"]


def at_disk_end(
    system: SystemAPI,
    txn: Txn,
    status: str,
    log: dict[int, LogEntry],
    mail: Iterable[tuple[int, Any]],
) -> list[After]:
    """`at_run_end` for an instance ended on disk."""
    owed = unanswered_on_disk(log, mail)
    return [answer(system, txn, ask, {"ended": status}) for ask in owed]


def unanswered_on_disk(log: dict[int, LogEntry], mail: Iterable[tuple[int, Any]]) -> list[Asker]:
    """The asks an instance on disk owes an answer: taken in its current
    run (``log``, `Reader.entries`) without a reply, and unread in its ``mail``."""
    asks: dict[str, Asker] = {}
    for _, entry in sorted(log.items()):
        if entry.kind == "wait" and entry.ask and entry.is_outcome:
            taken = Asker.from_stored(entry.ask)
            asks[taken.ask_id] = taken
        elif entry.kind == "reply" and entry.name:
            asks.pop(entry.name, None)
    for _, stored in mail:
        unread = StoredMessage.from_stored(stored).asker
        if unread is not None:
            asks.setdefault(unread.ask_id, unread)
    return list(asks.values())


def answer_offline(txn: Txn, asks: Iterable[Asker], status: str, now: float) -> None:
    """Into ``txn``, written with no system running (the CLI): tell each
    asking instance among ``asks`` that the instance ended ``status``
    without replying. (A system's asks end with that system.)"""
    for ask in asks:
        if not ask.reply_to.startswith(BOX_PREFIX):
            _message_txns.add_message(
                txn, instance_id(ask.reply_to), fx.REPLY_PREFIX + ask.ask_id, {"ended": status}, now
            )
