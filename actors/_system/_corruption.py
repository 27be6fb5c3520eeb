"""Instances whose records do not decode: `Corruption`, a part of `ActorSystem`.

An instance is marked ``corrupt`` (its status only: its records stay as
they are, for a restore or a cleanup) when its run, a sender, a consumer or
the scan at open meets a record of it that does not decode. Calls that
address it then raise `JournalCorrupt` naming the database and key of that
record (`error`), read again after a reopen.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from storage import Txn
from storage.errors import JournalCorrupt

from .._kernel import _events

if TYPE_CHECKING:
    from .._kernel._interfaces import ActorAPI, SystemAPI

__all__ = ["Corruption"]

log = logging.getLogger("actors")


class Corruption:
    """Marks instances corrupt and says why (see the module docstring)."""

    def __init__(self, system: SystemAPI) -> None:
        self.system = system
        self.journal = system.journal
        # Why each instance marked corrupt in this session is: the record
        # that did not decode (see error).
        self._found: dict[bytes, JournalCorrupt] = {}

    async def mark(self, actor: ActorAPI, exc: JournalCorrupt) -> None:
        """``actor``'s run met ``exc``: say so, record it, tell its watchers."""
        await self._mark(actor.iid, actor.address, exc)

    async def _mark(self, iid: bytes, address: str, exc: JournalCorrupt) -> None:
        _events.corrupt(address, exc)
        await self.record(iid, exc)
        self.system.statuses.changed(iid)

    async def records_damaged(self, iid: bytes, address: str, exc: JournalCorrupt) -> None:
        """A record of the instance that its run never reads (a stream value,
        a consumer's cursor, the mail counter a sender met) is damaged: the
        instance is marked corrupt all the same, as if its run had met the
        record, so its handles raise instead of waiting on it. A live one stops at its
        next suspension (see `Actor.corrupted`), writing nothing more."""
        actor = self.system.registry.live.get(iid)
        if actor is not None and not actor.done:
            actor.arrivals.corrupted(exc)
            return
        if iid not in self._found:
            await self._mark(iid, address, exc)

    async def record(self, iid: bytes, exc: JournalCorrupt) -> None:
        """Record that the instance is corrupt (status only: its records stay
        as they are, for a restore or a cleanup)."""
        self._found[iid] = exc
        txn = Txn()
        txn.set_status(iid, "corrupt")
        try:
            await self.journal.commit(txn)
        except Exception:  # noqa: BLE001 - the header itself may be unreadable
            log.exception("could not mark %s corrupt", iid.hex())

    def error(self, iid: bytes, address: str) -> JournalCorrupt:
        """What a call addressing a corrupt instance raises: the first of its
        records that does not decode, by database and key."""
        found = self._found.get(iid)
        if found is None:  # marked in an earlier session: find the record again
            try:
                with self.journal.reader() as r:
                    row = r.instance(iid)
                    if row is not None:
                        r.entries(iid, row.record.run)
                        r.mailbox(iid)
                        r.timers(iid)
            except JournalCorrupt as exc:
                found = self._found[iid] = exc
        if found is None:
            return JournalCorrupt(
                f"{address!r} is marked corrupt (database 'instances', key {iid.hex()}), "
                "though its records decode now; clean it up (system.cleanup) or start it "
                "afresh after restoring the journal",
                database="instances",
                key=iid,
            )
        return JournalCorrupt(
            f"the records of {address!r} are corrupt: {found}",
            database=found.database,
            key=found.key,
        )
