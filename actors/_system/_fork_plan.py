"""What a fork (or retry) reads before it writes: `ForkPlan`, made by
`read_for_fork` from the source instance, its last run's log split at the
fork point, the target address, the children to reset, the mail the new
incarnation gets and the stream values it keeps (see `actors._system._fork` for
what each means). Reading only: `actors._system._fork` refuses and writes.
"""

from __future__ import annotations

from typing import Any

import attrs

from storage import TERMINAL_STATUSES, InstanceRow, Reader, instance_id

from .._kernel import _transactions
from .._kernel._log import LogEntry, children_named
from ._kept import Kept, read_kept
from ._mail import read_dead

__all__ = ["ForkPlan", "after_step", "fork_point", "params_of", "read_for_fork"]

_STREAM_BATCH = 1000


@attrs.frozen
class ForkPlan:
    """What a fork read: the source, its last run's log split at the fork
    point, what is at the target address, the children of the discarded
    part to reset (children first), the mail to put in the new incarnation's
    mailbox, the stream values it keeps, and the source's dead letters (the
    ids dropped from its incarnation, and the version of their row)."""

    source: InstanceRow
    from_effect: int
    prefix: dict[int, LogEntry]
    suffix: dict[int, LogEntry]
    target_address: str
    target_iid: bytes
    target: InstanceRow | None
    floor: int
    kept: tuple[int, list[Kept]]
    resets: list[tuple[InstanceRow, tuple[int, list[Kept]]]]
    live_children: list[InstanceRow]
    mail: list[list[Any]]
    stream: list[Any]
    dead: frozenset[int]
    dead_version: int

    @property
    def last(self) -> int:
        """The last position of the source's log (0: empty)."""
        return max([*self.prefix, *self.suffix], default=0)


def after_step(entries: dict[int, LogEntry], name: str) -> int | None:
    """The fork point just after the first step named ``name`` that has an
    outcome in ``entries`` (its position: the step is kept, what follows
    runs again); None if the log has none."""
    for seq, entry in sorted(entries.items()):
        if entry.kind == "step" and entry.name == name and entry.is_outcome:
            return seq
    return None


def params_of(template: str, address: str) -> list[str] | None:
    """The path params that make ``address`` from ``template``; None if the
    template cannot make it."""
    parts, given = template.split("/"), address.split("/")
    if len(parts) != len(given):
        return None
    params = []
    for part, value in zip(parts, given, strict=True):
        if part.startswith(":"):
            if not value:
                return None
            params.append(value)
        elif part != value:
            return None
    return params


def read_for_fork(
    r: Reader, iid: bytes, from_effect: int, to: str | None, *, failed_children: bool = False
) -> tuple[ForkPlan | None, int]:
    """The plan of a fork of ``iid`` from ``from_effect`` (to ``to``, or the
    same address), or None if there is no instance (and then the last
    incarnation a cleanup removed there, 0 if none). Reads everything a
    refusal looks at; `refusal` says whether the fork may go ahead. With
    ``failed_children`` (a retry's), only the failed children of the
    discarded part are reset: a completed one gives its result again.

    Raises:
        JournalCorrupt: a record it reads does not decode.
    """
    row, floor = _transactions.read_for_start(r, iid)
    if row is None:
        return None, floor
    entries = r.entries(iid, row.record.run) if row.status != "corrupt" else {}
    prefix = {s: e for s, e in entries.items() if s <= from_effect}
    suffix = {s: e for s, e in entries.items() if s > from_effect}
    target: InstanceRow | None
    if to is None or to == row.address:
        target_address, target_iid, target, target_floor = row.address, iid, row, 0
    else:
        target_address, target_iid = to, instance_id(to)
        target, target_floor = _transactions.read_for_start(r, target_iid)
    kept = read_kept(r, target_iid) if target is not None else (0, [])
    resets: list[tuple[InstanceRow, tuple[int, list[Kept]]]] = []
    live: list[InstanceRow] = []
    named_before = children_named(prefix)
    seen = {iid, target_iid}
    for address in children_named(suffix):
        if address not in named_before:
            _descendants(r, address, row.address, resets, live, seen, failed_children)
    dead_version, letters = read_dead(r, iid)
    inc = row.record.incarnation
    dead = frozenset(d.message.id for d in letters if d.incarnation == inc)
    mail: list[list[Any]] = []
    if target_iid == iid:
        # Invariant: a message is handled by at most one instance. A fork to
        # another address copies none (the source keeps its own); one of the
        # same address moves them, the source's mailbox going with it. The
        # runtime's own messages (children's ends, replies to asks: names
        # that start with NUL) belong to the source's run, never to the fork's.
        unread = [_copied(m) for _, m in r.mailbox(iid) if not m[0].startswith("\x00")]
        mail = _put_back(suffix, dead) + unread
    return ForkPlan(
        row,
        from_effect,
        prefix,
        suffix,
        target_address,
        target_iid,
        target,
        target_floor,
        kept,
        resets,
        live,
        mail,
        _kept_stream(r, iid, entries, prefix),
        dead,
        dead_version,
    ), 0


def _descendants(
    r: Reader,
    address: str,
    parent: str,
    into: list[tuple[InstanceRow, tuple[int, list[Kept]]]],
    live: list[InstanceRow],
    seen: set[bytes],
    failed_only: bool,
) -> None:
    """Add the child at ``address`` (if it is ``parent``'s) to ``into``,
    after its own descendants; a live one to ``live`` instead. With
    ``failed_only``, only a failed one (and its failed descendants)."""
    iid = instance_id(address)
    if iid in seen:
        return
    seen.add(iid)
    child = r.instance(iid)
    if child is None or child.record.parent != parent:
        return
    if child.status not in TERMINAL_STATUSES:
        live.append(child)
        return
    if failed_only and child.status != "failed":
        return  # a completed one gives its result again; a cancelled one starts afresh
    if child.status != "corrupt":
        for grandchild in children_named(r.entries(iid, child.record.run)):
            _descendants(r, grandchild, address, into, live, seen, failed_only)
    into.append((child, read_kept(r, iid)))


def _put_back(suffix: dict[int, LogEntry], dead: frozenset[int]) -> list[list[Any]]:
    """The messages the discarded part took, in the order they arrived, as
    mailbox records (their sent time is not in the log: the fork's own
    stands in, see `fork_txn`). Children's end messages are left out: the
    children of the discarded part are reset."""
    taken = sorted(
        (entry.message, entry.signal or entry.name, entry.value)
        for entry in suffix.values()
        if entry.kind == "wait"
        and entry.message is not None
        and entry.is_outcome
        and entry.message not in dead
        and not (entry.signal or entry.name).startswith("\x00")
    )
    return [[name, value] for _, name, value in taken]


def _copied(message: Any) -> list[Any]:
    """An unread message as the new mailbox holds it: signal, payload, sent
    time and trace, its ask left out (the source answered it when it ended)."""
    return list(message[:4])


def _kept_stream(
    r: Reader, iid: bytes, entries: dict[int, LogEntry], prefix: dict[int, LogEntry]
) -> list[Any]:
    """The stream values emitted before the fork point. Only the last run
    emits, one value per emit entry, in order, so the run's values are the
    stream's last ``emits`` ones."""
    emits = sum(1 for e in entries.values() if e.kind == "emit")
    kept_emits = sum(1 for e in prefix.values() if e.kind == "emit")
    keep = max(0, r.stream_length(iid) - emits + kept_emits)
    values: list[Any] = []
    while len(values) < keep:
        batch = r.stream(iid, len(values), min(_STREAM_BATCH, keep - len(values)))
        if not batch:
            break
        values.extend(v for _, v in batch)
    return values


def fork_point(r: Reader, iid: bytes, name: str) -> int | None:
    """`after_step` in the last run's log of the instance at ``iid`` (0 when
    there is no instance or its record does not read: `read_for_fork` then
    says what is wrong)."""
    row = r.instance(iid)
    if row is None or row.status == "corrupt":
        return 0  # read_for_fork says what is wrong
    return after_step(r.entries(iid, row.record.run), name)
