"""One-way sends from a process: ``ctx.send`` and ``ctx.send_many``; and
the keyed sends of the system and its processes (`KeyedSends`).

A send is an effect (`fx.Send`). Its message is built at the call, as
`ActorSystem.send` builds one (`_message_txns.send_txn`, or `send_many_txn` for
a batch: the message, on condition that the receiver takes mail, live or
queued), so a payload the codec cannot carry, or one over
``max_payload``, raises in the process at the call and nothing is written.
Run live, the effect's log entry is added to that transaction and the
actor commits it with the writes that ride with it (`Writes.barrier`: the
takes and recorded values made before the send). So the message, the
sender's record of it, and everything the sender did before it are
durable together or not at all:

- a crash before that commit leaves none of them: replay reaches the send
  with no log entry and sends it live, once;
- a crash after it leaves all of them: replay finds the entry and sends
  nothing.

Once committed, the message is handed over as `ActorSystem.send` does
(`Router.route`): to the receiver live on this node (decoded from the
bytes written, never the sender's object), or by activating it; a
receiver another node owns is told by the commit itself (the journal's
mail notice), as for any message.

No instance that takes mail at an address: the commit fails on its
precondition and writes nothing; the process gets `NotDelivered`, and the
effect's log entry records it (riding on the next commit, like a take:
nothing outside saw it). Replay raises the same `NotDelivered` from the
entry (`_driver.error_from_entry`) and sends nothing, even to an instance
started at that address since.

With ``key=``, the rules of ``system.send(..., key=...)`` (below): a key
the receiving incarnation has had stores nothing and the send returns
normally (its log entry still records that it ran); else the key is
written with the message. Keyed sends of one key to one instance take
turns with the system's own (`KeyedSends`).

Keyed sends, ``system.send(..., key=K)`` and ``ctx.send(..., key=K)``, and
`KeyedSends`, a part of `ActorSystem` (``system.keys``) that both go
through. A keyed send first looks for the key among the incarnation's keys
(a cursor named ``_message_txns.KEY_PREFIX + key``, see `_transactions`); found, it
stores nothing and returns. Else it writes the message and the key in one
transaction, on condition that the key is still absent when it commits
(`storage.Txn.require_no_cursor`, checked under the instance's row lock): a
send of the same key through another node that committed since makes it
store nothing and return, as if it had been read. So the key is unique in
the journal, whatever node sent it. Keyed sends of one key to one instance
also take turns within a system, so a client that retries while its first
send is still being written reads the key rather than failing on it.

Keys live as long as the incarnation: continue-as-new and restarts keep
them (cursors carry over), a new incarnation at the address (after a
cancel) starts with none, since the start replaces the old one whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import attrs
import trio

from storage import MAIL_STATUSES, Journal, Txn, digest, encode, instance_id
from storage.errors import Conflict, EncodeError, JournalCorrupt

from .._kernel import _effects as fx, _message_txns, _tracing
from .._kernel._checks import check_many, check_name
from .._kernel._failures import ErrorRecord
from .._kernel._interfaces import ActorAPI
from .._kernel._log import LogEntry
from .._kernel._message_txns import KEY_PREFIX, Notice
from .._kernel._values import Signal
from ..errors import InvalidArguments, NotDelivered
from ._sending import not_delivered

__all__ = ["KeyedSends", "SendBehaviour", "new_send", "new_send_many"]


@attrs.frozen
class Prepared:
    """A live send's transaction as built at the call (the messages, their
    preconditions, a key), and the notices to route once it commits."""

    txn: Txn
    notices: Sequence[Notice]


# -- at the call ---------------------------------------------------------------------


def new_send(actor: ActorAPI, address: Any, signal: Any, payload: Any, key: str | None) -> fx.Send:
    """The effect of ``ctx.send(address, signal, payload, key=key)``.

    Raises:
        InvalidArguments: not a Signal, an address or key that is not a
            name (see `_checks.check_name`).
        LimitExceeded: a key over `_message_txns.MAX_KEY_BYTES`, a payload over
            ``max_payload`` (when run live).
        EncodeError: a payload the codec cannot carry, naming the path in it.
    """
    if not isinstance(signal, Signal):
        raise InvalidArguments(f"ctx.send takes an actors.Signal, not {signal!r}")
    iid = instance_id(check_name(address, "ctx.send's address"))
    if key is not None:
        _message_txns.key_cursor(check_name(key, "ctx.send(key=...)"))  # refused at the call
    try:
        arg_hash = digest([address, signal.name, payload, key], what="send")
    except EncodeError:
        encode(payload, what="payload")  # raises with the path inside the payload
        raise
    prepared = None
    if _runs_live(actor):
        system = actor.system
        txn, notice = _message_txns.send_txn(
            iid,
            signal.name,
            payload,
            system.epoch_now(),
            max_payload=system.max_payload,
            trace=_tracing.traceparent(system),
            key=key,
        )
        prepared = Prepared(txn, (notice,))
    seq = actor.driver.next_seq()
    return fx.Send(seq, address, arg_hash, ((address, iid),), key, prepared)


def new_send_many(actor: ActorAPI, messages: Iterable[Any]) -> fx.SendMany | None:
    """The effect of ``ctx.send_many(messages)``, ``(address, signal,
    payload)`` each; None for no messages (as `ActorSystem.send_many`,
    nothing to send, nothing recorded).

    Raises:
        InvalidArguments: ``messages`` is not a collection, or an item is
            not ``(address, Signal, payload)``.
        EncodeError, LimitExceeded: a payload the codec cannot store (a
            note names its position).
    """
    batch: list[tuple[bytes, str, Any]] = []  # (iid, signal name, payload)
    targets: list[tuple[str, bytes]] = []  # (address, iid)
    items = check_many(messages, "ctx.send_many", "(address, Signal, payload) tuples")
    for n, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 3 and isinstance(item[1], Signal)):
            raise InvalidArguments(
                f"ctx.send_many takes (address, actors.Signal, payload) tuples; item {n} is "
                f"{item!r}"
            )
        try:
            iid = instance_id(check_name(item[0], "ctx.send_many's address"))
        except InvalidArguments as exc:
            exc.add_note(f"(item {n} of the batch; none was sent)")
            raise
        targets.append((item[0], iid))
        batch.append((iid, item[1].name, item[2]))
    if not batch:
        return None
    try:
        arg_hash = digest(
            [[t[0], b[1], b[2]] for t, b in zip(targets, batch, strict=True)], what="send_many"
        )
    except EncodeError:
        for n, (_, _, payload) in enumerate(batch):
            try:
                encode(payload, what="payload")
            except EncodeError as exc:
                exc.add_note(f"(message {n} of the {len(batch)} given to send_many; none was sent)")
                raise
        raise
    prepared = None
    if _runs_live(actor):
        system = actor.system
        txn, notices = _message_txns.send_many_txn(
            batch,
            system.epoch_now(),
            max_payload=system.max_payload,
            trace=_tracing.traceparent(system),
        )
        prepared = Prepared(txn, notices)
    seq = actor.driver.next_seq()
    name = targets[0][0] if len(targets) == 1 else f"{targets[0][0]} and {len(targets) - 1} more"
    return fx.SendMany(seq, name, arg_hash, tuple(targets), None, prepared)


def _runs_live(actor: ActorAPI) -> bool:
    """Whether the next effect runs live (its log has no entry for it): only
    then is a transaction built (replay stays one encode per send)."""
    driver = actor.driver
    return driver.log.get(driver.seq + 1) is None


# -- live ------------------------------------------------------------------------------


class SendBehaviour(fx.Behaviour):  # (and fx.SendMany's, its subclass)
    @staticmethod
    def start(actor: ActorAPI, send: fx.Send, started: LogEntry | None) -> None:
        actor.start_task(_run, send)


async def _run(actor: ActorAPI, send: fx.Send) -> None:
    try:
        if send.key is None:
            await _commit(actor, send)
            return
        address, iid = send.targets[0]
        key = send.key
        sent = False

        async def keyed(*_: Any, **__: Any) -> None:
            nonlocal sent
            sent = True
            # Journals written before KEY_PREFIX may hold the key under
            # the legacy prefix (single-owner ones only; see `_sending`).
            if not actor.system.journal.shared:
                legacy = _message_txns.legacy_key_cursor(key)
                if await actor.system.journal.read(lambda r: r.cursor(iid, legacy)) is not None:
                    _finish_unsent(actor, send)
                    return
            await _commit(actor, send)

        # (KeyedSends reads the key, then calls ``keyed`` if it is new; the
        # signal and payload it passes on are in the transaction already.)
        await actor.system.keys.send(iid, address, None, None, key, keyed)
        if not sent:  # this incarnation had the key: nothing more is stored
            _finish_unsent(actor, send)
    finally:
        actor.task_finished()


async def _commit(actor: ActorAPI, send: fx.Send) -> None:
    prepared = send.prepared
    if prepared is None:  # (a send the log answered never runs live)
        raise AssertionError(f"{send!r} runs live with nothing built at its call")
    send.prepared = None
    txn = prepared.txn
    entry = send.describe(value=None)
    # Invariant: a send's messages and its log entry are written in one
    # transaction (with the sender's ridden writes before them), so replay
    # finds the entry exactly when the messages were stored: none is sent
    # twice, none is lost.
    txn.put_log(actor.iid, actor.run, send.seq, entry.to_stored())
    try:
        results = await actor.writes.barrier(txn)
    except Conflict as exc:
        if exc.reason == _message_txns.KEY_SEEN:  # another node sent one with this key first
            _finish_unsent(actor, send)
            return
        if exc.reason not in ("missing", "status"):
            raise  # "epoch": another node took the sender over
        error = await _undelivered(actor, send, exc)
        entry = send.describe(error=ErrorRecord.undelivered(error).to_stored())
        actor.finish(send, None, error, entry)  # the entry rides on the next commit
        return
    for notice in prepared.notices:
        actor.system.router.route(notice, results)
    actor.finish(send, None)  # its entry is written


def _finish_unsent(actor: ActorAPI, send: fx.Send) -> None:
    """A keyed send the receiving incarnation had already: logged, nothing sent."""
    send.prepared = None
    actor.finish(send, None, None, send.describe(value=None))  # rides: nothing outside changed


async def _undelivered(actor: ActorAPI, send: fx.Send, exc: Conflict) -> NotDelivered:
    """The `NotDelivered` of a send whose precondition failed: for one
    message, from ``exc``; for a batch, the first address (in its order)
    that takes no mail, as read after the refusal."""
    if len(send.targets) == 1:
        return _unsent(send.targets[0][0], exc.status if exc.reason == "status" else None)
    targets = send.targets

    def statuses(r: Any) -> list[str | None]:
        found: list[str | None] = []
        for _, iid in targets:
            try:
                row = r.instance(iid)
            except JournalCorrupt:
                found.append("corrupt")
                continue
            found.append(None if row is None else row.status)
        return found

    for (address, _), status in zip(
        targets, await actor.system.journal.read(statuses), strict=True
    ):
        if status not in MAIL_STATUSES:
            return _unsent(address, status)
    return NotDelivered(
        f"an instance addressed by ctx.send_many ended while the batch was committed "
        f"({exc}); nothing was stored",
        address=targets[0][0],
        reason="finished",
    )


def _unsent(address: str, status: str | None) -> NotDelivered:
    return not_delivered(
        address, status, doing=" to send to", start="ctx.spawn, ctx.call or system.start"
    )


class KeyedSends:
    """One system's keyed sends in flight, by (instance id, key)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._writing: dict[tuple[bytes, str], trio.Event] = {}

    async def send(
        self,
        iid: bytes,
        address: str,
        signal: Signal | None,
        payload: Any,
        key: Any,
        send: Callable[..., Awaitable[None]],
    ) -> None:
        """Send unless the incarnation at ``iid`` has had ``key`` already
        (``send`` writes the message with its key; ``signal`` and ``payload``
        are passed on to it, None where its transaction holds them)."""
        key = check_name(key, "send(key=...)")
        slot = (iid, key)
        # Invariant: at most one keyed send per (instance, key) reads and writes at a time.
        while (writing := self._writing.get(slot)) is not None:
            await writing.wait()
        self._writing[slot] = done = trio.Event()
        try:
            name = KEY_PREFIX + key
            seen = await self.journal.read(lambda r: r.cursor(iid, name))
            if seen is not None:
                return  # sent already to this incarnation: nothing more is stored
            await send(iid, address, signal, payload, key=key)
        finally:
            del self._writing[slot]
            done.set()
