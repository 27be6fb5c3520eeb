"""Where a queue keeps its state in the journal: the state rows of one queue.

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

from typing import Any

import attrs

from storage import Reader

from .._kernel._values import Queue, QueueInfo

__all__ = [
    "PRIORITY_BIAS",
    "Entry",
    "held_key",
    "iid_of",
    "index_key",
    "queue_info",
    "queue_place",
    "read_held",
    "wait_prefix",
    "waiting_rows",
]

PRIORITY_BIAS = 1 << 31  # priorities are 32-bit signed ints, stored biased to sort as text


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
