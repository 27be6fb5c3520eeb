"""The records of replaced incarnations: what a retry or a fork keeps of
the incarnation it replaces, and of each child it resets.

A state row ``history/<id hex>`` (`_protocol.history_key`) holds the `Kept`
record of each incarnation a retry or fork replaced at that address, the
latest `KEPT_INCARNATIONS`, written in the transaction that replaces it (on
condition that the row is at the version read), and removed by the cleanup
that removes the instance (`_protocol.cleanup_txn`). ``actors show ADDRESS
--incarnation N`` prints one.

A reset child (`reset`) leaves its address with its record kept here and
its incarnation as the address's floor, so the next start there (its
parent's new run calling it again) makes the next incarnation: no step key
of the removed one repeats.
"""

from __future__ import annotations

from typing import Any

import attrs

from storage import InstanceRecord, InstanceRow, Reader, Txn

from .._kernel import _protocol

__all__ = ["KEPT_INCARNATIONS", "Kept", "keep", "read_kept", "reset"]

#: How many replaced incarnations an address's history keeps (the latest).
KEPT_INCARNATIONS = 10


@attrs.frozen
class Kept:
    """The record of an incarnation a retry or fork replaced, as its
    address's history keeps it: its status then, and when it was replaced."""

    incarnation: int
    process: str
    status: str
    record: InstanceRecord
    replaced: float

    def to_stored(self) -> dict[str, Any]:
        """The map the history row holds for it."""
        return {
            "inc": self.incarnation,
            "process": self.process,
            "status": self.status,
            "at": self.replaced,
            "record": self.record.to_stored(),
        }

    @classmethod
    def from_stored(cls, value: Any) -> Kept | None:
        """The kept record a stored map holds; None if it is not one."""
        if not isinstance(value, dict):
            return None
        inc, process, status = value.get("inc"), value.get("process"), value.get("status")
        at = value.get("at")
        if not (
            isinstance(inc, int)
            and isinstance(process, str)
            and isinstance(status, str)
            and isinstance(at, (int, float))
            and not isinstance(at, bool)
        ):
            return None
        try:
            record = InstanceRecord.from_stored(value.get("record"))
        except ValueError:  # (RecordShapeError: not a record)
            return None
        return cls(inc, process, status, record, float(at))


def read_kept(r: Reader, iid: bytes) -> tuple[int, list[Kept]]:
    """The version of ``iid``'s history row (0: none) and the records it
    keeps, oldest first. An entry that does not read is left out (the next
    write of the row leaves it out)."""
    key = _protocol.history_key(iid)
    for row in r.states(key, 1):
        if row.key == key:
            value = row.value if isinstance(row.value, list) else []
            kept = [k for k in map(Kept.from_stored, value) if k is not None]
            return row.version, kept
    return 0, []


def keep(txn: Txn, row: InstanceRow, kept: tuple[int, list[Kept]], now: float) -> None:
    """Into ``txn``: add ``row``'s record to its history (the latest
    `KEPT_INCARNATIONS`), on condition that the row is at the version read."""
    version, entries = kept
    key = _protocol.history_key(row.iid)
    entries = [*entries, Kept(row.record.incarnation, row.process, row.status, row.record, now)]
    txn.expect_state(key, version)
    txn.put_state(key, [k.to_stored() for k in entries[-KEPT_INCARNATIONS:]])


def reset(txn: Txn, child: InstanceRow, kept: tuple[int, list[Kept]], now: float) -> None:
    """Into ``txn``: remove ``child`` (on condition that it is as read),
    keeping its record in its address's history, so that the next start
    there (its parent's call, run again) makes the next incarnation."""
    txn.require(child.iid, frozenset({child.status}), incarnation=child.record.incarnation)
    txn.delete_instance(child.iid)
    txn.put_state(_protocol.floor_key(child.iid), child.record.incarnation)
    keep(txn, child, kept, now)
