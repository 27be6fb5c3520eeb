"""The status vocabulary of instances: names, the codes journals store, and
the sets the runtime reasons with. Defined once, here; `storage` exports it."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "LIVE_STATUSES",
    "MAIL_STATUSES",
    "STATUSES",
    "STATUS_CODE",
    "STATUS_NAME",
    "STATUS_WORDS",
    "TERMINAL_STATUSES",
    "UNFINISHED_STATUSES",
    "Status",
]

# Invariant: a status's code never changes (codes are stored in journals):
# the code is the position here, from 1. Add a status only at the end.
Status = Literal[
    "running",
    "suspended",
    "completed",
    "failed",
    "cancelled",
    "compensation_stuck",
    "corrupt",
    "queued",  # waiting in a queue for a slot (see actors._features._queues); not yet run
]
"""An instance's status, as a type: one of `STATUSES`."""

STATUSES: tuple[Status, ...] = get_args(Status)
"""Every status an instance can have, in the order of their stored codes."""

STATUS_CODE: dict[str, int] = {name: i + 1 for i, name in enumerate(STATUSES)}
STATUS_NAME: dict[int, str] = {i + 1: name for i, name in enumerate(STATUSES)}

LIVE_STATUSES: frozenset[str] = frozenset({"running", "suspended"})
"""Live: the instance runs (or waits) and takes messages."""

TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
"""Terminal: the instance ended and never runs again (a cancelled address may
be started afresh, as a new incarnation)."""

UNFINISHED_STATUSES: frozenset[str] = LIVE_STATUSES | {"compensation_stuck", "queued"}
"""Unfinished: live, queued, or parked until compensation is resumed or
abandoned; what a cancel can still end. (Queued is not live: it has not
run yet.)"""

MAIL_STATUSES: frozenset[str] = LIVE_STATUSES | {"queued"}
"""Taking mail: live, or queued (it exists; its mail waits in its mailbox and
is read once it runs, as an early message to any instance is)."""

STATUS_WORDS: dict[str, str] = {
    "completed": "it completed",
    "failed": "it failed",
    "cancelled": "it was cancelled",
    "compensation_stuck": "it is parked in compensation_stuck",
    "corrupt": "its records are corrupt",
    "queued": "it is queued and takes messages once it starts",
}
"""How messages say why an instance takes no more messages ("no live instance
at 'orders/o-17' (it completed)")."""
