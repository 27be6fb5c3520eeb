"""A queue: its definition (`Queue`, `Rate`), its state in the journal, and
what is read of it (`QueueInfo` for an operator, `read_round` for a round
of its pump, which reads here and writes nothing: on a remote journal this
runs off the trio thread).

Everything a limit needs is in the journal, as state rows (`storage._states`):

- ``queue/<name>``: the holders (instances the queue started that may still
  be live, each with the node that started it) and the recent start times
  (for the rate limit). Every admission rewrites it with a compare-and-set on
  its version, in the same transaction that turns the instances from
  ``queued`` to ``running``; so two nodes (or two pumps) that read the same
  holders cannot both fill the last slot: one gets `Conflict` and reads again.
- ``queue-wait/<name>/<priority>/<order>/<id>``: one per waiting instance;
  the key sorts in start order (priority, then enqueue time and a counter).
- ``queue-of/<id>``: which waiting row an instance has (for a cancel).
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from storage import LIVE_STATUSES, InstanceRow, Reader, Txn
from storage.errors import Conflict, JournalCorrupt

from .._kernel import _transactions
from .._kernel._checks import check_name
from ..errors import InvalidArguments

if TYPE_CHECKING:
    from .._kernel._interfaces import SystemAPI

__all__ = [
    "PRIORITY_BIAS",
    "Entry",
    "Look",
    "Queue",
    "QueueInfo",
    "Rate",
    "cancel_queued",
    "check_priority",
    "drop_rows_txn",
    "find_queue",
    "free_slots",
    "held_key",
    "iid_of",
    "index_key",
    "put_waiting",
    "queue_info",
    "queue_place",
    "read_held",
    "read_round",
    "registered",
    "stale_entries",
    "wait_prefix",
    "waiting_rows",
]


# -- the definition -------------------------------------------------------------------


def _rate(value: Any) -> Rate | None:
    if value is None or isinstance(value, Rate):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return Rate(*value)
    raise InvalidArguments(
        f"Queue(rate=...) takes a (count, seconds) pair or an actors.Rate, not {value!r}; "
        "e.g. rate=(100, 60.0) for at most 100 starts in any 60 seconds"
    )


def _limit(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArguments(
            f"Queue({what}=...) takes a whole number, 1 or more, or None, not {value!r}"
        )
    return value


@attrs.frozen
class Rate:
    """At most ``count`` starts in any window of ``per`` seconds."""

    count: int
    per: float

    def __attrs_post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InvalidArguments(
                f"Rate(count=...) takes a whole number, 1 or more, not {self.count!r}"
            )
        if (
            isinstance(self.per, bool)
            or not isinstance(self.per, (int, float))
            or not 0 < self.per < math.inf
        ):
            raise InvalidArguments(f"Rate(per=...) takes positive seconds, not {self.per!r}")


@attrs.frozen
class Queue:
    """A named limit on how many instances run at once, and how fast they start.

    Args:
        name: the queue's name (its state in the journal is keyed by it).
        concurrency: at most this many of its instances live at once, over
            every node sharing the journal (None: no limit).
        per_node: at most this many at once started by each node (None: no limit).
        rate: at most ``count`` starts in any ``per`` seconds, as a
            ``(count, per)`` pair or a `Rate`, over every node (None: no limit).

    Raises:
        InvalidArguments: a name with ``/`` or a limit that is not a positive number.
    """

    name: str
    concurrency: int | None = attrs.field(default=None, kw_only=True)
    per_node: int | None = attrs.field(default=None, kw_only=True)
    rate: Rate | None = attrs.field(default=None, kw_only=True, converter=_rate)

    def __attrs_post_init__(self) -> None:
        check_name(self.name, "Queue's name")
        if "/" in self.name:
            raise InvalidArguments(f"a queue's name has no '/': {self.name!r}")
        _limit(self.concurrency, "concurrency")
        _limit(self.per_node, "per_node")


@attrs.frozen
class QueueInfo:
    """A queue's state as read from the journal: ``waiting`` instances (its
    depth), ``running`` (holding a slot), and how long the oldest waiting
    one has waited (``oldest_wait``, seconds, None with none waiting)."""

    name: str
    waiting: int
    running: int
    oldest_wait: float | None
    concurrency: int | None
    per_node: int | None
    rate: Rate | None


# -- the rows ----------------------------------------------------------------------------

PRIORITY_BIAS = 1 << 31  # priorities are 32-bit signed ints, stored biased to sort as text


def registered(queues: Iterable[Queue]) -> dict[str, Queue]:
    """The queues given to `open_system`, by name.

    Raises:
        InvalidArguments: one is no `Queue`, or two share a name.
    """
    found: dict[str, Queue] = {}
    for queue in queues:
        if not isinstance(queue, Queue):
            raise InvalidArguments(f"queues=[...] takes actors.Queue objects, got {queue!r}")
        if queue.name in found and found[queue.name] != queue:
            raise InvalidArguments(f"two queues share the name {queue.name!r}")
        found[queue.name] = queue
    return found


def find_queue(queues: Mapping[str, Queue], queue: object) -> Queue:
    """The queue of ``queues`` (the registered ones) that ``queue`` (a
    `Queue` or its name) names.

    Raises:
        InvalidArguments: it is not registered with this system.
    """
    name = queue.name if isinstance(queue, Queue) else queue
    found = queues.get(name) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(sorted(queues)) or "none"
        raise InvalidArguments(
            f"queue {name!r} is not registered with this system (registered: {known}); "
            "pass it in open_system(journal, queues=[...])"
        )
    return found


def held_key(name: str) -> str:
    return f"queue/{name}"


def wait_prefix(name: str) -> str:
    return f"queue-wait/{name}/"


def index_key(iid: bytes) -> str:
    return f"queue-of/{iid.hex()}"


def iid_of(key: str) -> bytes:
    """The instance id at the end of a waiting row's key."""
    return bytes.fromhex(key.rsplit("/", 1)[1])


def waiting_rows(r: Reader, iid: bytes) -> list[str]:
    """The state rows of a queued instance's place in its queue (empty if it
    has none): what a cancel of it deletes."""
    key = index_key(iid)
    for row in r.states(key):
        if row.key == key:
            return [row.value, key]
    return []


def queue_place(r: Reader, iid: bytes) -> dict[str, Any] | None:
    """Where a queued instance waits: its ``queue``, ``priority`` and the
    epoch time it was queued (``since``); None if it waits in no queue."""
    rows = waiting_rows(r, iid)
    if not rows:
        return None
    for row in r.states(rows[0]):
        if row.key == rows[0]:
            _, name, priority, _ = row.key.split("/", 3)
            return {
                "queue": name,
                "priority": int(priority) - PRIORITY_BIAS,
                "since": row.value["at"],
            }
    return None


def check_priority(priority: object, *, queued: bool) -> None:
    """Refuse a start's ``priority=`` that is no 32-bit whole number, or
    that is given (not 0) to a start without ``queue=``."""
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not (-PRIORITY_BIAS <= priority < PRIORITY_BIAS)
    ):
        raise InvalidArguments(
            f"priority= takes a whole number (lower starts first; default 0), not {priority!r}"
        )
    if priority and not queued:
        raise InvalidArguments(
            "priority= orders a queue; pass queue= too (a Queue registered with "
            "open_system(queues=[...]))"
        )


def put_waiting(
    txn: Txn, name: str, priority: int, order: str, iid: bytes, value: dict[str, Any]
) -> None:
    """Add an instance's waiting row (and its index) to ``txn``: in queue
    ``name``, at ``priority`` (checked), then ``order`` (enqueue time and a counter)."""
    key = f"{wait_prefix(name)}{priority + PRIORITY_BIAS:010d}/{order}/{iid.hex()}"
    txn.put_state(key, value)
    txn.put_state(index_key(iid), key)


def stale_entries(r: Reader, entries: list[Entry]) -> list[Entry]:
    """The waiting rows among ``entries`` of instances no longer queued
    (cancelled, cleaned up)."""
    stale = []
    for entry in entries:
        row = r.instance(entry.iid)
        if row is None or row.status != "queued":
            stale.append(entry)
    return stale


def drop_rows_txn(entries: list[Entry]) -> Txn:
    """Delete the waiting rows ``entries`` (and their index)."""
    txn = Txn()
    for entry in entries:
        txn.delete_state(entry.key)
        txn.delete_state(index_key(entry.iid))
    return txn


@attrs.frozen
class Entry:
    """A waiting row: its key (which sorts in start order) and its instance."""

    key: str
    iid: bytes


def read_held(r: Reader, name: str) -> tuple[int, dict[str, Any]]:
    """The version and value of queue ``name``'s state row (0, none held: no row yet)."""
    key = held_key(name)
    for row in r.states(key):
        if row.key == key:
            return row.version, row.value
    return 0, {"held": {}, "starts": []}


def queue_info(r: Reader, queue: Queue, now: float) -> QueueInfo:
    """The depth, holders and oldest wait of ``queue``, as of epoch time ``now``."""
    state = read_held(r, queue.name)[1]
    waiting = r.states(wait_prefix(queue.name))
    oldest = min((row.value["at"] for row in waiting), default=None)
    return QueueInfo(
        name=queue.name,
        waiting=len(waiting),
        running=len(state["held"]),
        oldest_wait=None if oldest is None else max(0.0, now - oldest),
        concurrency=queue.concurrency,
        per_node=queue.per_node,
        rate=queue.rate,
    )


# -- a round's read ------------------------------------------------------------------

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


async def cancel_queued(system: SystemAPI, row: InstanceRow, reason: str) -> bool:
    """Cancel the queued instance of ``row``: nothing runs it, so no node
    need own it; it leaves its queue in the same transaction. False if it
    is queued no more (a queue started it meanwhile: its owner cancels it)."""
    iid = row.iid
    states = await system.journal.read(lambda r: waiting_rows(r, iid))
    txn, notices = _transactions.cancel_txn(
        [_transactions.Cancel(row, (), reason, None, states)], system.epoch_now()
    )
    # Unclaimed, so only while it is still queued.
    txn.require(iid, frozenset({"queued"}))
    try:
        results = await system.journal.commit(txn)
    except Conflict:
        return False
    system.statuses.changed(iid)
    for notice in notices:
        system.router.route(notice, results)
    return True
