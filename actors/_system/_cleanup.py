"""What a cleanup removes, and in which groups: `ActorSystem.cleanup` and
the command line's ``cleanup`` both choose here, and both write what
`_protocol.cleanup_txn` builds.

A cleanup removes finished instances (one of the statuses asked for, last
updated before a cutoff) with every record they own. A child's end belongs
to its parent's history: a live parent's ``ctx.join`` reads it, and a
retry or a fork of the parent meets the child at its address and takes its
recorded result instead of running it again (a payment is not made twice).
So a finished child is not removed on its own age and status alone:

Invariant: cleanup never removes a child that any incarnation of a live
parent may need. A child (an instance whose record names a parent) is
removed only in the same transaction as its parent, or, where no instance
is at its parent's address (an earlier cleanup removed it), on condition
that none is there when the removal commits (`Txn.require_absent`). A
parent that is still there and not removed with it, in whatever status and
incarnation, keeps it (and so keeps the child's own children).

Each removal is a `Family`: a root (an instance without a parent, or whose
parent is gone) and the descendants removed with it, written in one
transaction, so a family goes whole or not at all: a parent retried
between the read and the commit fails the family's conditions and keeps
its children as well.

A family whose parent is gone and a parent removed without its children
(they are not finished, or newer than the cutoff, or of a status not asked
for) leave children whose parent is gone: a later cleanup that finds them
removes them as roots.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import attrs

from storage import InstanceRow, Journal, Reader, Txn, instance_id
from storage.errors import Conflict, JournalCorrupt

from .._kernel import _protocol

__all__ = ["BATCH", "Family", "families", "remove"]

BATCH = 500  # instances a cleanup removes per transaction (a family is never split)


@attrs.frozen
class Family:
    """Instances a cleanup removes together: ``members`` as ``(iid,
    incarnation)``, the root first, then its descendants; ``absent``, the
    root's parent's id where the root is a child whose parent is gone (it
    must still be gone when the family is removed), else None."""

    members: tuple[tuple[bytes, int], ...]
    absent: bytes | None = None


def families(r: Reader, statuses: Iterable[str], cutoff: float) -> list[Family]:
    """The families to remove: instances with one of ``statuses`` last
    updated at or before ``cutoff`` (epoch seconds), less the children
    whose parent stays (see the module docstring)."""
    found: dict[bytes, InstanceRow] = {
        row.iid: row
        for status in dict.fromkeys(statuses)
        for row in r.instances(status)
        if (row.record.updated or 0) <= cutoff
    }
    goes: dict[bytes, bool] = {}  # iid -> whether it is removed
    gone: dict[bytes, bool] = {}  # a parent's iid not in `found` -> whether no instance is there
    for iid in found:
        chain: list[bytes] = []  # from iid up to the first decided or root ancestor
        at: bytes | None = iid
        verdict = True
        while at is not None and at not in goes:
            chain.append(at)
            parent = found[at].record.parent
            if parent is None:
                at = None
                break
            up = instance_id(parent)
            if up in found:
                at = up
                continue
            if up not in gone:
                gone[up] = _absent(r, up)
            verdict = gone[up]
            at = None
        if at is not None:
            verdict = goes[at]
        for member in chain:  # each goes with its ancestors' verdict
            goes[member] = verdict
    children: dict[bytes, list[bytes]] = {}
    roots: list[tuple[bytes, bytes | None]] = []
    for iid, row in found.items():
        if not goes[iid]:
            continue
        parent = row.record.parent
        above = None if parent is None else instance_id(parent)
        if above is not None and above in found:
            children.setdefault(above, []).append(iid)
        else:
            roots.append((iid, above))
    out = []
    for root, absent in roots:
        members = list(_family(root, children))
        out.append(
            Family(
                tuple((iid, found[iid].record.incarnation) for iid in members),
                absent,
            )
        )
    return out


def _absent(r: Reader, iid: bytes) -> bool:
    """Whether no instance is at ``iid`` (a record that does not decode is one)."""
    try:
        return r.instance(iid) is None
    except JournalCorrupt:
        return False


def _family(root: bytes, children: dict[bytes, list[bytes]]) -> Iterator[bytes]:
    """``root`` and every descendant of it in ``children``, the root first."""
    todo = [root]
    while todo:
        iid = todo.pop()
        yield iid
        todo.extend(children.get(iid, ()))


def batches(found: Sequence[Family]) -> Iterator[list[Family]]:
    """``found`` in groups of about `BATCH` instances (a family whole)."""
    batch: list[Family] = []
    size = 0
    for family in found:
        if batch and size + len(family.members) > BATCH:
            yield batch
            batch, size = [], 0
        batch.append(family)
        size += len(family.members)
    if batch:
        yield batch


def family_txn(group: Iterable[Family], statuses: Iterable[str]) -> Txn:
    """One transaction that removes every family of ``group`` (see
    `_protocol.cleanup_txn`), on condition that each root whose parent was
    gone still has none."""
    group = list(group)
    return _protocol.cleanup_txn(  # (looked up at the call: the simulation plants bugs in it)
        [member for family in group for member in family.members],
        statuses,
        absent=[family.absent for family in group if family.absent is not None],
    )


async def remove(journal: Journal, found: Sequence[Family], statuses: Iterable[str]) -> int:
    """Remove the families ``found`` (`families`), durably, about `BATCH`
    instances a transaction; a batch that meets a change made since the
    read (`Conflict`) goes again family by family, and a family whose
    conditions no longer hold is kept whole. How many instances went."""
    wanted = tuple(statuses)
    removed = 0
    for batch in batches(found):
        try:
            await journal.commit(family_txn(batch, wanted), durable=True)
            removed += sum(len(family.members) for family in batch)
        except Conflict:  # one changed meanwhile: go family by family
            for family in batch:
                try:
                    await journal.commit(family_txn([family], wanted), durable=True)
                    removed += len(family.members)
                except Conflict:
                    pass
    return removed
