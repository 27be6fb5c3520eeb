"""`ActorSystem.send_many`: a batch of messages in one durable commit.
`Batches` is a base of `ActorSystem` (see `_system`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from storage import LIVE_STATUSES, instance_id
from storage.errors import Conflict, JournalCorrupt

from . import _guard, _protocol, _tracing
from ._checks import check_name
from ._records import Signal
from .errors import InvalidArguments, NotDelivered

__all__ = ["Batches"]


class Batches:
    """The batch-sending part of `ActorSystem`."""

    async def send_many(self, messages: Iterable[tuple[str, Signal, Any]]) -> None:
        """Persist many messages, ``(address, signal, payload)`` each, in one
        durable commit: all of them are stored, or none.

        The cheap way to fan a batch of events out to many instances: one
        commit (one fsync) for the whole batch. Messages to one address keep
        their order.

        Raises:
            NotDelivered: an address has no live instance; it names the
                first such address and nothing is stored.
            EncodeError, LimitExceeded: a payload the codec cannot store (a
                note names its position); nothing is stored.
            InvalidArguments: an item that is not ``(address, Signal, payload)``.
            JournalCorrupt: an addressed instance's records do not decode.
        """
        _guard.refuse("system.send_many()", "send from a step (ctx.step) so the send is recorded")
        batch = []
        addresses: dict[bytes, str] = {}
        for n, item in enumerate(messages):
            if not (isinstance(item, tuple) and len(item) == 3 and isinstance(item[1], Signal)):
                raise InvalidArguments(
                    f"send_many takes (address, actors.Signal, payload) tuples; item {n} is "
                    f"{item!r}"
                )
            check_name(item[0], f"send_many's address (item {n})")
            iid = instance_id(item[0])
            addresses.setdefault(iid, item[0])
            batch.append((iid, item[1].name, item[2]))
        if not batch:
            return
        txn, notices = _protocol.send_many_txn(
            batch, self.epoch_now(), max_payload=self.max_payload,
            trace=_tracing.traceparent(self),
        )  # fmt: skip
        try:
            results = await self.journal.commit(txn)
        except Conflict as exc:
            raise await self._first_undeliverable(addresses, exc) from None
        for notice in notices:
            self._route(notice.iid, results[notice.slot], notice.message)

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
                return self._corrupt_error(iid, address)
            if status == "missing":
                return self._not_delivered(address, Conflict("", reason="missing"))
            if status not in LIVE_STATUSES:
                return self._not_delivered(address, Conflict("", reason="status", status=status))
        return NotDelivered(
            f"an instance addressed by send_many ended while the batch was committed "
            f"({exc}); nothing was stored: send the batch again",
            address=next(iter(addresses.values())), reason="finished",
        )
