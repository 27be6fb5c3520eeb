"""What a queue's round reads, in one read: its holders, its room, its first waiting rows.

A round of a queue's pump (`QueueService`) reads here and writes nothing: on
a remote journal this runs off the trio thread.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import attrs

from storage import LIVE_STATUSES, InstanceRow, Reader
from storage.errors import JournalCorrupt

from .._kernel._values import Queue
from ._queue_rows import Entry, iid_of, read_held, wait_prefix

__all__ = ["Look", "free_slots", "read_round"]

_WANT = 1000  # waiting rows read per round without a concurrency limit
_SPARE = 8  # waiting rows read past the free slots on a shared journal
_SCAN_MAX = 10_000  # waiting rows a round reads at most, passing over others' work


@attrs.frozen
class Look:
    """What a round read of its queue, in one read."""

    version: int  # of the queue's state row (0: none yet)
    state: dict[str, Any]  # its holders and recent starts
    statuses: dict[str, str | None]  # holders read (hex id -> status; None: gone)
    room: int  # how many more the limits let start, by what was read
    # The first waiting rows this system may start, in start order, each with
    # its record (None: gone, or it does not read).
    candidates: list[tuple[Entry, InstanceRow | None]]
    # Waiting rows met whose process this system does not register: id -> process.
    foreign: dict[bytes, str]


def read_round(
    r: Reader,
    queue: Queue,
    ended: set[bytes],
    now: float,
    *,
    node: str,
    shared: bool,
    procs: Container[str],
    holding: dict[bytes, str],
    seen_ending: dict[bytes, str],
    passed: dict[bytes, str],
) -> Look:
    """Read the queue's state, the statuses of the holders whose end is
    not known here, and its first waiting rows this system may start.

    ``node`` is this node; ``shared``, whether the journal is; ``procs``, the
    processes this system registers; ``holding``, the holders this node
    started and has not seen end; ``seen_ending``, the holders seen ending here
    with their final status; ``passed``, the waiting instances remembered as
    others' work."""
    name = queue.name
    version, state = read_held(r, name)
    held: dict[str, Any] = state["held"]
    # Which holders to read the status of: those seen ending here, and
    # those not known to run here (another node's, or started before
    # this system opened): a local end pokes, theirs cannot.
    check = [h for h in held if bytes.fromhex(h) in ended or bytes.fromhex(h) not in holding]
    statuses: dict[str, str | None] = {}
    for h in check:
        known = seen_ending.get(bytes.fromhex(h))
        if known is not None:
            statuses[h] = known
            continue
        try:
            found = r.instance(bytes.fromhex(h))
        except JournalCorrupt:  # it will never run again: its slot is free
            statuses[h] = "corrupt"
            continue
        statuses[h] = None if found is None else found.status
    room = free_slots(queue, state, statuses, now, node)
    # As many waiting rows as could start (at least one, to know whether
    # any waits; a few more on a shared journal, for the ones another
    # node may take first): a deep queue is not read whole at every
    # round. Rows of processes this system does not run are passed
    # over, reading further (up to _SCAN_MAX rows) for the ones it does.
    want = max(room, 1) + (_SPARE if shared else 0)
    foreign: dict[bytes, str] = {}
    records: dict[bytes, InstanceRow | None] = {}
    limit = want
    while True:
        candidates: list[tuple[Entry, InstanceRow | None]] = []
        rows = r.states(wait_prefix(name), limit)
        for row in rows:
            if len(candidates) >= want:
                break
            iid = iid_of(row.key)
            if iid in passed or iid in foreign:
                continue
            if iid not in records:
                try:
                    records[iid] = r.instance(iid)
                except JournalCorrupt:
                    records[iid] = None  # started the usual way, which marks it corrupt
            record = records[iid]
            if record is not None and record.process not in procs:
                foreign[iid] = record.process  # another node, which registers it, may
                continue
            candidates.append((Entry(row.key, iid), record))
        if len(candidates) >= want or len(rows) < limit or limit >= _SCAN_MAX:
            return Look(version, state, statuses, room, candidates, foreign)
        limit = min(4 * limit, _SCAN_MAX)


def free_slots(
    queue: Queue, state: dict[str, Any], statuses: dict[str, str | None], now: float, node: str
) -> int:
    """How many more of ``queue``'s instances the limits let start now,
    by the holders and starts in ``state`` less the holders ``statuses``
    shows ended."""
    live = [h for h in state["held"] if h not in statuses or statuses[h] in LIVE_STATUSES]
    room = _WANT
    if queue.concurrency is not None:
        room = min(room, queue.concurrency - len(live))
    if queue.per_node is not None:
        mine = sum(1 for h in live if state["held"][h][0] == node)
        room = min(room, queue.per_node - mine)
    if queue.rate is not None:
        recent = sum(1 for t in state["starts"] if t > now - queue.rate.per)
        room = min(room, queue.rate.count - recent)
    return max(room, 0)
