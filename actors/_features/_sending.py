"""How messages reach instances: `ActorSystem.send` and `send_many`, the
send of a message with an extra (an ask's: `_asks`), and the hand-over of a
committed message to its live instance (or the activation of a passivated
one). `Router` is a part of `ActorSystem` (see `_system`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from storage import MAIL_STATUSES, STATUS_WORDS, Journal, Txn, decode, instance_id
from storage.errors import Conflict, JournalCorrupt

from .._kernel import _guard, _message_txns, _tracing
from .._kernel._checks import check_many, check_name
from .._kernel._message_txns import Notice
from .._kernel._values import Signal
from ..errors import InvalidArguments, NotDelivered

RELOAD_AFTER = 0.1  # seconds between requests that a live instance in doubt passivate

if TYPE_CHECKING:
    from .._kernel._interfaces import CorruptionAPI, NodesAPI, RegistryAPI, StatusesAPI
    from .._kernel._outages import JournalWatch

__all__ = ["Router", "not_delivered", "refused_status"]

_IIDS_KEPT = 4096  # addresses whose instance ids are kept (see Router.address_iid)


class Router:
    """How messages reach instances: a part of `ActorSystem` (see the module docstring)."""

    def __init__(
        self,
        journal: Journal,
        registry: RegistryAPI,
        statuses: StatusesAPI,
        nodes: NodesAPI,
        corruption: CorruptionAPI,
        outages: JournalWatch,
        epoch_now: Callable[[], float],
        *,
        claim_mail: Callable[[bytes], bool],
        keyed_send: Callable[..., Awaitable[None]],
        max_payload: int,
        tracing: bool,
    ) -> None:
        """Handed what it uses, as the system is made: the journal; the
        registry (its live table, where it hands messages, and
        ``activate_for_mail``, ``spawn_system_task``), the statuses
        (``snapshot``, ``event``), the node view (``owned_elsewhere``,
        ``mail_noticed``), the corruption (``error``, ``records_damaged``),
        the journal watch and the clock; the asks' ``claim_mail`` (mail
        another node wrote under an instance id: True if a caller of this
        system's waits for it and will read it, not an instance) and
        `KeyedSends.send` (``keyed_send``); and the settings."""
        self.journal = journal
        self.registry = registry
        self.live = registry.live  # (on every send: see route)
        self.statuses = statuses
        self.nodes = nodes
        self.corruption = corruption
        self.outages = outages
        self.epoch_now = epoch_now
        self.claim_mail = claim_mail
        self.keyed_send = keyed_send
        self.max_payload = max_payload
        self.tracing = tracing  # (read by _tracing.traceparent, handed the router)
        self.iids: dict[str, bytes] = {}  # see address_iid

    def send(
        self, address: str, signal: Signal, payload: Any = None, *, key: str | None = None
    ) -> Awaitable[None]:
        """The body of `ActorSystem.send`: checks the arguments and returns
        the send to await. (Not a coroutine itself: every resumption of a
        coroutine re-enters each frame under it, and a send resumes once per
        commit.)"""
        if _guard.stepping.address is not None:
            _guard.refuse("system.send()", "send from a step (ctx.step) so the send is recorded")
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"send takes an actors.Signal, not {signal!r}")
        iid = self.iids.get(address) if type(address) is str else None
        if iid is None:
            iid = self.address_iid(address, "send's address")
        if key is None:
            return self.send_iid(iid, address, signal, payload)
        # Refused before anything is read: the same on every journal.
        _message_txns.key_cursor(check_name(key, "send(key=...)"))
        return self.keyed_send(iid, address, signal, payload, key, self.send_iid)

    async def send_iid(
        self,
        iid: bytes,
        address: str,
        signal: Signal,
        payload: Any,
        *,
        extra: list[Any] | None = None,
        key: str | None = None,
    ) -> None:
        """Send (durably) to ``iid``; ``extra`` is stored beside the payload
        (`_mailbox`), ``key`` is `send`'s."""
        if key is not None and not self.journal.shared:
            # (See _sends.KeyedSends: this incarnation has not had the key under KEY_PREFIX.)
            # Journals written before KEY_PREFIX hold keys under the legacy
            # prefix: LMDB ones, as a shared journal (PostgreSQL) refused its
            # NUL. Nothing writes under it now, so one read settles it.
            legacy = _message_txns.legacy_key_cursor(key)
            if await self.journal.read(lambda r: r.cursor(iid, legacy)) is not None:
                return  # sent already to this incarnation: nothing more is stored
        txn, notice = _message_txns.send_txn(
            iid,
            signal.name,
            payload,
            self.epoch_now(),
            max_payload=self.max_payload,
            trace=_tracing.traceparent(self) if self.tracing else None,
            extra=extra,
            key=key,
        )
        # Routed by the journal as soon as it commits, before this sender
        # resumes: sender and receiver then run in one scheduling round.
        txn.then = partial(self.route, notice)
        # (Its outcome not learned, each receiver reads its mailbox again.)
        txn.in_doubt = self.sent_in_doubt
        try:
            await self.journal.commit(txn)
        except Conflict as exc:
            if exc.reason == _message_txns.KEY_SEEN:
                return  # another node sent it with this key first: nothing is stored
            if exc.status == "corrupt" or self.statuses.snapshot(iid)[0] == "corrupt":
                raise self.corruption.error(iid, address) from None
            raise not_delivered(address, refused_status(exc)) from None
        except JournalCorrupt as exc:
            if exc.database in ("mail", "counters"):  # its mailbox cannot take mail
                await self.corruption.records_damaged(iid, address, exc)
            raise

    def mail_in_doubt(self, iid: bytes) -> None:
        """A commit that may have added mail for ``iid`` has an unknown
        outcome (PostgreSQL: the connection was lost after COMMIT): once the
        journal answers, bring the instance in (its load reads the mailbox),
        or have a live one on a shared journal read its mailbox as for a mail
        notice, so a message that was written is not left unread. A live
        actor on a journal with one owner cannot tell a message read from
        the journal from one it took and has not yet recorded: it is
        passivated once idle and loaded again, which reads what is there."""

        async def look() -> None:
            await self.outages.back()
            # What was in flight lands first (a cancelled sender's commit
            # may still be on its way): the read below must see it.
            await self.journal.flush()
            actor = self.live.get(iid)
            if actor is not None and actor.fenced:  # it remembers what it took
                self.nodes.mail_noticed(iid)
                return
            while actor is not None and self.live.get(iid) is actor:
                actor.request_passivation()  # (when idle: else look again soon)
                with trio.move_on_after(RELOAD_AFTER):
                    await self.statuses.event(iid).wait()
            self.registry.activate_for_mail(iid)

        self.registry.spawn_system_task(look)

    def sent_in_doubt(self, txn: Txn) -> None:
        """Mail ``txn`` adds may be written (its outcome was not learned):
        each receiver reads its mailbox again (see `storage.Txn.in_doubt`)."""
        for iid in sorted(txn.receivers()):
            self.mail_in_doubt(iid)

    def route(self, notice: Notice, results: Sequence[int]) -> None:
        """The message of ``notice`` was committed (its transaction's
        results: ``results``) to a mailbox: hand it over, or wake the
        instance.

        Invariant: a live receiver gets the payload decoded from the bytes
        the journal stored (``notice.message``), never the sender's object,
        so what it sees is what a replay reads (a tuple stays what the codec
        makes of it; a sender mutating its dict after ``send`` returns
        changes nothing)."""
        iid = notice.iid
        actor = self.live.get(iid)
        if actor is not None and not actor.done:
            actor.arrivals.deliver(results[notice.slot], decode(notice.message))
        elif not self.nodes.owned_elsewhere(iid):
            # (Owned elsewhere: the commit notified the owner. If that node
            # dies, the takeover scan finds the instance and its mail.)
            self.registry.activate_for_mail(iid)

    async def send_system(self, iid: bytes, address: str, signal: Signal, payload: Any) -> None:
        """Send a runtime message (no liveness check: the receiver decides)."""
        txn, notice = _message_txns.system_send_txn(iid, signal.name, payload, self.epoch_now())
        # Durable: a runtime message (a cancel, an escalation) acts once stored,
        # and its number is only known then, whatever the journal's durability.
        txn.in_doubt = self.sent_in_doubt
        results = await self.journal.commit(txn, durable=True)
        self.route(notice, results)

    def mail_noticed(self, iid: bytes) -> None:
        """Another node wrote mail for ``iid``: for a caller of this system's
        (a reply to its ask), or a message for an instance this node owns."""
        if not self.claim_mail(iid):
            self.nodes.mail_noticed(iid)

    async def send_many(self, messages: Iterable[tuple[str, Signal, Any]]) -> None:
        """The body of `ActorSystem.send_many`."""
        _guard.refuse("system.send_many()", "send from a step (ctx.step) so the send is recorded")
        batch = []
        addresses: dict[bytes, str] = {}
        for n, item in enumerate(check_many(messages, "send_many", "(address, signal, payload)")):
            if not (isinstance(item, tuple) and len(item) == 3 and isinstance(item[1], Signal)):
                raise InvalidArguments(
                    f"send_many takes (address, actors.Signal, payload) tuples; item {n} is "
                    f"{item!r}"
                )
            try:
                iid = self.address_iid(item[0], "send_many's address")
            except InvalidArguments as exc:
                exc.add_note(f"(item {n} of the batch; none was sent)")
                raise
            addresses.setdefault(iid, item[0])
            batch.append((iid, item[1].name, item[2]))
        if not batch:
            return
        txn, notices = _message_txns.send_many_txn(
            batch,
            self.epoch_now(),
            max_payload=self.max_payload,
            trace=_tracing.traceparent(self),
        )
        txn.in_doubt = self.sent_in_doubt
        try:
            results = await self.journal.commit(txn)
        except Conflict as exc:
            raise await self._first_undeliverable(addresses, exc) from None
        for notice in notices:
            self.route(notice, results)

    async def _first_undeliverable(self, addresses: dict[bytes, str], exc: Conflict) -> Exception:
        """The error for a `send_many` that one of its instances refused: the
        first address (in the batch's order) that is not live now, as read
        after the refusal."""

        def statuses(r: Any) -> dict[bytes, str]:
            found = {}
            for iid in addresses:
                try:
                    row = r.instance(iid)
                except JournalCorrupt:
                    found[iid] = "corrupt"
                    continue
                found[iid] = "missing" if row is None else row.status
            return found

        for iid, status in (await self.journal.read(statuses)).items():
            address = addresses[iid]
            if status == "corrupt":
                return self.corruption.error(iid, address)
            if status == "missing":
                return not_delivered(address, None)
            if status not in MAIL_STATUSES:
                return not_delivered(address, status)
        return NotDelivered(
            f"an instance addressed by send_many ended while the batch was committed "
            f"({exc}); nothing was stored: send the batch again",
            address=next(iter(addresses.values())),
            reason="finished",
        )

    def address_iid(self, address: Any, what: str) -> bytes:
        """The instance id of ``address`` (`InvalidArguments` naming ``what``
        if it is not a name). Ids of addresses seen lately are kept: a
        sender that sends to the same few instances pays for the check and
        the hash once."""
        iids = self.iids
        iid = iids.get(address) if type(address) is str else None
        if iid is None:
            iid = instance_id(check_name(address, what))
            if len(iids) >= _IIDS_KEPT:
                iids.clear()
            iids[address] = iid
        return iid


def refused_status(exc: Conflict) -> str | None:
    """The status of the receiver a message's precondition refused (``exc``):
    None if there is no instance."""
    return None if exc.reason == "missing" else exc.status or "finished"


def not_delivered(
    address: str,
    status: str | None,
    *,
    doing: str = "",
    start: str = "system.start or signal_with_start",
) -> NotDelivered:
    """Why a message to ``address`` stored nothing: no instance (``status``
    None), or one with that status, which takes no mail; ``doing`` says what
    the message was for (" to ask"), ``start`` how one starts an instance."""
    if status is None:
        return NotDelivered(
            f"no instance at {address!r}{doing}; start one first ({start}) or check the address",
            address=address,
            reason="unknown",
        )
    words = STATUS_WORDS.get(status, f"it is {status}")
    return NotDelivered(
        f"no live instance at {address!r}{doing} ({words}); start a new one or check the address",
        address=address,
        reason=status,
    )
