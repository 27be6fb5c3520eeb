"""The journal transactions that add messages to mailboxes: a user's send
(keyed or not), many sends at once, a runtime message; and the mailbox
record and send keys they write.

A message, as stored in a mailbox: ``[signal name, payload, sent at]``
(epoch seconds), and a 4th element, the sender's W3C traceparent, when it
was sent inside a trace (see `_tracing`), and a 5th (the 4th then None if
there is no trace), the sender's extra, when it attached one (see
`_mailbox`: an ask's, `_features._ask_forms`); readers ignore what they do
not use.

A send with an idempotency key records the key as a cursor named
``KEY_PREFIX + key`` in the same transaction, so the key lives exactly as
long as the incarnation (carried across continue-as-new and restarts,
deleted with the instance).

As every builder of `_transactions`, these never read or commit themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage import MAIL_STATUSES, Txn, encode
from storage.errors import EncodeError

from ..errors import LimitExceeded
from ._mailbox import StoredMessage

__all__ = [
    "KEY_PREFIX",
    "KEY_SEEN",
    "LEGACY_KEY_PREFIX",
    "MAX_KEY_BYTES",
    "Notice",
    "add_message",
    "key_cursor",
    "key_of",
    "legacy_key_cursor",
    "send_many_txn",
    "send_txn",
    "system_send_txn",
]


class Notice:
    """A message a transaction adds for an instance: hand it to that instance
    (``Router.route``) with ``results[slot]`` once committed.

    ``message`` is the mailbox record as encoded for the journal: the only
    form a receiver is handed, so a live receiver sees what replay reads.

    (A plain class: a send makes one, and a frozen attrs class's
    ``__init__`` sets each field through ``object.__setattr__``. Nothing
    changes a notice once made.)"""

    __slots__ = ("iid", "message", "slot")

    def __init__(self, iid: bytes, message: bytes, slot: int) -> None:
        self.iid = iid
        self.message = message
        self.slot = slot

    def __repr__(self) -> str:
        return f"Notice(iid={self.iid!r}, message={self.message!r}, slot={self.slot})"


def add_message(
    txn: Txn,
    iid: bytes,
    name: str,
    payload: Any,
    now: float,
    *,
    max_payload: int | None = None,
    trace: str | None = None,
    extra: list[Any] | None = None,
) -> Notice:
    """Append a message to ``iid``'s mailbox in ``txn``; returns the notice
    to route once it commits. ``trace``, the sender's W3C traceparent, is
    stored beside the payload, never in it; so is ``extra``, the sender's
    (`StoredMessage`), which nothing here reads.

    Raises:
        EncodeError: the payload cannot be stored (naming the path inside it).
        LimitExceeded: it encodes to more than ``max_payload`` bytes.
    """
    txn.routed = True  # the caller hands it on by its number
    try:
        stored = (
            [name, payload, now]  # (the usual message: `StoredMessage.stored` spelled out)
            if trace is None and extra is None
            else StoredMessage.stored(name, payload, now, trace, extra)
        )
        slot = txn.append_message(iid, stored)
    except EncodeError:
        encode(payload, what="payload")  # raises with the path inside the payload
        raise
    message: bytes = txn.ops[-1][2]
    # The limit is on the payload alone: the message's bytes less those of
    # the same message around None (which encodes to one byte). Measured
    # only when the whole message is over it (the payload is never larger).
    if max_payload is not None and len(message) > max_payload:
        size = len(message) - (len(encode(StoredMessage.stored(name, None, now, trace, extra))) - 1)
        if size > max_payload:
            raise LimitExceeded(
                f"the {name!r} payload encodes to {size} bytes, over the "
                f"max_payload={max_payload} limit; send a reference (an id or a "
                "path) instead, or raise open_system(max_payload=...)"
            )
    return Notice(iid, message, slot)


# A send's idempotency key is a cursor named KEY_PREFIX + key (see the module
# doc). Invariant: no stream consumer has such a name. The prefix starts with
# a control character (U+001F, the unit separator), which consumer names may
# not hold (`_checks.check_text`), and has no NUL, which PostgreSQL's text
# cannot hold.
KEY_PREFIX = "\x1fkey "

# Where journals written before hold their keys: LMDB (and memory) ones
# only, since PostgreSQL refused the NUL. Keys are read under it too (see
# `legacy_key_cursor`), never written.
LEGACY_KEY_PREFIX = "\x00key "

#: The `Conflict.reason` of a keyed send whose key the incarnation had
#: already (see `send_txn`): nothing was stored, as if it had been read.
KEY_SEEN = "cursor"

#: The longest send key, in bytes of UTF-8, on every journal. With its
#: prefix after a 16-byte instance id it fits LMDB's 511-byte keys with room
#: to spare (a stream consumer's name has the same limit, see `_streams`).
MAX_KEY_BYTES = 200


def key_cursor(key: str) -> str:
    """The name of the cursor that holds send key ``key`` (a checked name,
    see `_checks.check_name`).

    Raises:
        LimitExceeded: ``key`` is over `MAX_KEY_BYTES` bytes of UTF-8.
    """
    # (A str of n characters is at most 4n bytes: short keys are not encoded.)
    if len(key) > MAX_KEY_BYTES // 4 and len(key.encode()) > MAX_KEY_BYTES:
        raise LimitExceeded(
            f"a send key is at most {MAX_KEY_BYTES} bytes of UTF-8, and {key[:20]!r}... is "
            f"{len(key.encode())}; pass a shorter key (a hash of a long one, say)"
        )
    return KEY_PREFIX + key


def legacy_key_cursor(key: str) -> str:
    """Where a journal written before `KEY_PREFIX` holds send key ``key``."""
    return LEGACY_KEY_PREFIX + key


def key_of(cursor: str) -> str | None:
    """The send key a cursor of that name holds (under either prefix), or
    None if it is a stream consumer's."""
    for prefix in (KEY_PREFIX, LEGACY_KEY_PREFIX):
        if cursor.startswith(prefix):
            return cursor[len(prefix) :]
    return None


def send_txn(
    iid: bytes,
    name: str,
    payload: Any,
    now: float,
    *,
    max_payload: int,
    trace: str | None = None,
    extra: list[Any] | None = None,
    key: str | None = None,
) -> tuple[Txn, Notice]:
    """A user's send: the message, on condition that the instance takes
    mail (live or queued: `MAIL_STATUSES`; else the commit raises `Conflict`
    and stores nothing); with ``key``, the key too, on condition that the
    incarnation has not had it (else `Conflict` with reason `KEY_SEEN`: the
    caller read it absent, and a send on another node stored it since)."""
    txn = Txn()
    txn.require(iid, MAIL_STATUSES)
    notice = add_message(
        txn, iid, name, payload, now, max_payload=max_payload, trace=trace, extra=extra
    )
    if key is not None:
        # Invariant: a key is stored once per incarnation, on every journal
        # and whatever node sends it: the journal checks it absent in the
        # send's own commit, under the instance's row lock.
        name = key_cursor(key)
        txn.require_no_cursor(iid, name)
        txn.set_cursor(iid, name, 0)
    return txn, notice


def send_many_txn(
    messages: Sequence[tuple[bytes, str, Any]],
    now: float,
    *,
    max_payload: int,
    trace: str | None = None,
) -> tuple[Txn, list[Notice]]:
    """Many user sends in one transaction: ``(iid, signal name, payload)``
    each, on condition that every instance addressed takes mail (as
    `send_txn`; else the commit raises `Conflict` and stores none of them).

    Raises:
        EncodeError, LimitExceeded: as `add_message`, with a note naming the
            message's position in ``messages``.
    """
    txn = Txn()
    for iid in dict.fromkeys(iid for iid, _, _ in messages):
        txn.require(iid, MAIL_STATUSES)
    notices = []
    for n, (iid, name, payload) in enumerate(messages):
        try:
            notices.append(
                add_message(txn, iid, name, payload, now, max_payload=max_payload, trace=trace)
            )
        except (EncodeError, LimitExceeded) as exc:
            exc.add_note(f"(message {n} of the {len(messages)} given to send_many; none was sent)")
            raise
    return txn, notices


def system_send_txn(iid: bytes, name: str, payload: Any, now: float) -> tuple[Txn, Notice]:
    """A runtime message (escalation, cancel request): no liveness check,
    the receiver decides what it means."""
    txn = Txn()
    return txn, add_message(txn, iid, name, payload, now)
