"""The admin API: how the tools outside an application read a journal and
act on its instances — the ``actors`` command line (`actors._tools._cli`), the web
inspector (`actors._tools._web`, which reads with the command line's functions and
acts by running it) and the control socket (`actors._system._control`).

One way in. Those tools import nothing else of the runtime (a test in
``tests/project/test_structure.py`` keeps it so): what they rely on is named here,
and the modules behind it change freely.

One set of operations, `Operations`, done one of three ways:

- by a running system itself: its public methods (`ActorSystem` is an
  `Operations`);
- by another process through that system's control socket: `request`,
  which `actors._system._control` serves by calling those methods;
- on a journal no system holds, with the runtime's own transactions, as
  the runtime writes them: the ``*_txn`` functions and `cancel_plan`,
  `key_seen`, `clean_up`, `replay_problem` below (a brief holder of the
  owner lock commits them).

Why not one implementation of each operation: a running system keeps its
live instances in memory, so no other process may write behind its back
(hence the socket); and with none running, the tools must not need the
application's code, except where a check runs it (a fork's replay).
"""

from __future__ import annotations

import random
import time
from typing import Any

import trio

from storage import (
    UNFINISHED_STATUSES,
    InstanceRecord,
    InstanceRow,
    Journal,
    Reader,
    Txn,
    instance_id,
)
from storage.errors import Conflict, JournalCorrupt

from .._features import _ask_forms, _saga, _supervision
from .._features._crashes import (
    Parked,
    read_parked,
    refuse_input as parked_input_refusal,
    resume_txn,
)
from .._features._queue_state import queue_place, wait_prefix, waiting_rows
from .._features._schedule_ticks import tick_text, ticks_after
from .._features._signal_plans import READ_AGAIN, Route, read_plan, routes_of, signal_txn
from .._kernel import _message_txns, _transactions
from .._kernel._effects import END_PREFIX
from .._kernel._failures import error_summary
from .._kernel._log import LogEntry, children_named
from .._kernel._mailbox import StoredMessage
from .._kernel._message_txns import KEY_SEEN
from .._kernel._process import ProcessDef
from .._kernel._transactions import Cancel
from .._kernel._values import Signal
from .._system import _cleanup, _fork
from .._system._control import ControlUnavailable, Operations, RemoteError, request
from .._system._drop import drop_refusal, drop_txn, read_for_drop
from .._system._facade import ActorSystem
from .._system._fork import (
    ForkPlan,
    fork_point,
    fork_txn,
    not_replayed,
    read_for_fork,
    refusal as fork_refusal,
)
from .._system._mail import DeadLetter, Message, failed_at, handling, read_dead, read_mail
from .._system._retry import (
    KEPT_INCARNATIONS,
    Kept,
    RetryPlan,
    read_for_retry,
    read_kept,
    refusal as retry_refusal,
    retry_txn,
)

# The history file's parts (`_history` gathers them, for `actors.testing`).
from ._history_document import History
from ._history_file import dumps, loads
from ._history_journal import import_history, read_history

__all__ = [  # noqa: RUF022 - grouped by use, a comment heading each group
    "Route",
    "signal_routes",
    "route_signal",
    "KEY_SEEN",
    # the operations, and asking a running system for them
    "Operations",
    "request",
    "ControlUnavailable",
    "RemoteError",
    # reading
    "LogEntry",
    "StoredMessage",
    "Message",
    "DeadLetter",
    "Signal",
    "END_PREFIX",
    "children_named",
    "failed_at",
    "handling",
    "read_mail",
    "read_dead",
    "queue_place",
    "wait_prefix",
    "tick_text",
    "ticks_after",
    "error_summary",
    "pending_compensations",
    "user_cursors",
    "sent_keys",
    # writing, on a journal no system holds
    "MAX_PAYLOAD",
    "key_seen",
    "send_txn",
    "Cancel",
    "cancel_plan",
    "uncompensated",
    "compensation_fates",
    "cancel_txn",
    "ask_cancel_txn",
    "unstick_txn",
    "clean_up",
    "RetryPlan",
    "Kept",
    "KEPT_INCARNATIONS",
    "read_for_retry",
    "read_kept",
    "retry_refusal",
    "retry_txn",
    "Parked",
    "read_parked",
    "parked_input_refusal",
    "resume_txn",
    "ForkPlan",
    "fork_point",
    "read_for_fork",
    "fork_refusal",
    "fork_txn",
    "not_replayed",
    "replay_problem",
    "ProcessDef",
    "read_for_drop",
    "drop_refusal",
    "drop_txn",
    # histories
    "History",
    "read_history",
    "import_history",
    "dumps",
    "loads",
]

MAX_PAYLOAD = 1 << 20  # open_system's default max_payload, for what the tools store


# -- reading ---------------------------------------------------------------------------


def pending_compensations(record: InstanceRecord) -> list[str]:
    """The names of the saga compensations ``record`` has registered and not
    run, newest first (the order they run in)."""
    return [comp["name"] for comp in _saga.pending(record)]


def user_cursors(cursors: dict[str, int]) -> dict[str, int]:
    """An instance's cursors (`Reader.cursors`) without the idempotency
    keys of its keyed sends, which are stored as cursors too."""
    return {
        name: pos for name, pos in cursors.items() if not name.startswith(_message_txns.KEY_PREFIX)
    }


def sent_keys(cursors: dict[str, int]) -> list[str]:
    """The idempotency keys of the keyed sends its incarnation took, sorted."""
    prefix = _message_txns.KEY_PREFIX
    return sorted(name[len(prefix) :] for name in cursors if name.startswith(prefix))


# -- writing on a journal no system holds ----------------------------------------------


def key_seen(r: Reader, iid: bytes, key: str) -> int | None:
    """Where a send with idempotency ``key`` to this incarnation of ``iid``
    was stored, or None if none was: a second one stores nothing."""
    return r.cursor(iid, _message_txns.KEY_PREFIX + key)


def send_txn(iid: bytes, signal: Signal, payload: Any, key: str | None) -> Txn:
    """The transaction that puts a message in the mailbox of ``iid``, as
    `ActorSystem.send` stores it (it requires the instance unfinished).

    Raises:
        EncodeError: a payload the codec cannot store, or over `MAX_PAYLOAD`.
    """
    txn, _ = _message_txns.send_txn(
        iid, signal.name, payload, time.time(), max_payload=MAX_PAYLOAD, key=key
    )
    return txn


def cancel_plan(r: Reader, root: InstanceRow, reason: str) -> list[Cancel]:
    """The cancel of ``root`` and its unfinished descendants, children first
    (depth first, as the runtime cancels a subtree).

    Raises:
        JournalCorrupt: records under an instance of the subtree do not
            decode; the message names that instance.
    """
    plan: list[Cancel] = []
    _plan_cancel(r, root, reason, plan, set())
    return plan


def _plan_cancel(
    r: Reader, row: InstanceRow, reason: str, plan: list[Cancel], seen: set[bytes]
) -> None:
    seen.add(row.iid)
    try:
        timers = r.timers(row.iid)
        children = children_named(r.entries(row.iid, row.record.run))
        for address in children:
            iid = instance_id(address)
            if iid in seen:
                continue
            child = r.instance(iid)
            if child is not None and child.status in UNFINISHED_STATUSES:
                _plan_cancel(r, child, f"parent {row.address} cancelled", plan, seen)
    except JournalCorrupt as exc:
        raise JournalCorrupt(
            f"records under {row.address!r} are corrupt ({exc})",
            database=exc.database,
            key=exc.key,
        ) from None
    plan.append(Cancel(row, timers, reason, states=waiting_rows(r, row.iid)))


def uncompensated(plan: list[Cancel]) -> list[tuple[str, list[str]]]:
    """(address, step names) of the saga compensations pending in ``plan``
    that its cancel would not run (of instances that do not compensate first)."""
    return [
        (c.row.address, names)
        for c in plan
        if not c.compensate and (names := pending_compensations(c.row.record))
    ]


def compensation_fates(
    plan: list[Cancel], after: dict[bytes, InstanceRow | None]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The compensations pending in ``plan`` before a cancel that a running
    system did, as (address, step): (those it ran, those it did not), by
    the rows of ``after`` it."""
    ran: list[tuple[str, str]] = []
    not_run: list[tuple[str, str]] = []
    for c in plan:
        row = after.get(c.row.iid)
        finished = set(row.record.compensated) if row is not None else set()
        for comp in _saga.pending(c.row.record):
            (ran if comp["id"] in finished else not_run).append((c.row.address, comp["name"]))
    return ran, not_run


def cancel_txn(r: Reader, plan: list[Cancel]) -> Txn:
    """The one transaction that cancels ``plan``'s instances, as the
    runtime records a cancel, telling each instance that asks one of them
    for a reply that it ended without one.

    Raises:
        EncodeError: a record holds values of a class not imported here.
    """
    owed = [
        ask
        for c in plan
        for ask in _ask_forms.unanswered_on_disk(
            r.entries(c.row.iid, c.row.record.run),
            # (one that compensates first answers its unread ones as it ends)
            () if c.compensate else r.mailbox(c.row.iid),
        )
    ]
    now = time.time()
    txn, _ = _transactions.cancel_txn(plan, now)
    _ask_forms.answer_offline(txn, owed, "cancelled", now)
    return txn


def ask_cancel_txn(iid: bytes, reason: str, *, compensate: bool = False) -> Txn:
    """The runtime message that asks whichever node runs ``iid`` to cancel
    it (and its live descendants, children first), as a node asks the
    owner of an instance another live node runs (`Lifecycle`); an instance
    no node runs now reads it when a node next loads it, and ends the
    same way. On a journal nodes share, its commit notifies the owner."""
    payload: dict[str, Any] = {"reason": reason}
    if compensate:
        payload["compensate"] = True
    txn, _ = _message_txns.system_send_txn(iid, _supervision.CANCEL.name, payload, time.time())
    return txn


def unstick_txn(op: str, row: InstanceRow) -> Txn:
    """``op`` (``"resume_compensation"`` or ``"abandon_compensation"``) of
    the compensation_stuck instance of ``row``, as the system writes it."""
    build = {
        "resume_compensation": _transactions.resume_compensation_txn,
        "abandon_compensation": _transactions.abandon_compensation_txn,
    }[op]
    return build(row, time.time())


async def clean_up(journal: Journal, statuses: list[str], older_than: float) -> int:
    """Remove the instances with one of ``statuses`` last updated more than
    ``older_than`` seconds ago, with what they keep, as
    `ActorSystem.cleanup` does; how many. Ages are measured on the
    journal's clock where nodes share it (PostgreSQL), as the nodes do."""
    now = await journal.clock()
    with journal.reader() as r:
        found = _cleanup.families(r, statuses, (time.time() if now is None else now) - older_than)
    return await _cleanup.remove(journal, found, statuses)


async def replay_problem(
    journal: Journal, plan: ForkPlan, proc: ProcessDef[..., Any], record: InstanceRecord
) -> str | None:
    """The first way the part of a log that ``plan`` keeps does not replay
    on ``proc``'s code (None if it replays), checked with no system running:
    a system that runs nothing, made for the check, replays it."""
    checker = ActorSystem._create(
        journal,
        [proc],
        random.Random(0),
        passivate_after=0,
        max_sync_steps=1,
        max_payload=1 << 30,
        now=time.time,
    )
    return await _fork.replay_problem(checker, plan, proc, record)


def signal_routes(procs: list[ProcessDef[..., Any]], name: str) -> tuple[Route, ...]:
    """Where the processes ``procs`` that listen to the signal ``name`` find
    its recipients (none: no process listens).

    Raises:
        InvalidArguments: two of them listen to it with different fields.
    """
    return routes_of(procs).get(name, ())


async def route_signal(
    journal: Journal,
    routes: tuple[Route, ...],
    name: str,
    identity: dict[str, str],
    payload: Any,
    key: str | None,
) -> int:
    """Write the signal ``name`` (``identity`` has exactly its fields) to its
    recipients along ``routes``, as `ActorSystem.signal` does: read them
    through the identity index, one conditional commit, read again if a
    start or an end raced it. How many it reached (0: nothing stored).

    Raises:
        Conflict: refused for another reason than a race.
    """
    values = tuple(identity[field] for field in routes[0].identity)
    careful = False
    while True:
        with journal.reader() as r:
            plan = read_plan(r, routes, values, key, careful)
        if not plan.recipients:
            return 0
        txn, _ = signal_txn(
            plan, name, payload, time.time(), max_payload=MAX_PAYLOAD, trace=None, key=key
        )
        try:
            await journal.commit(txn, durable=True)
        except Conflict as exc:
            if exc.reason not in READ_AGAIN:
                raise
            careful = careful or exc.reason != "state"
            await trio.lowlevel.checkpoint()
            continue
        return len(plan.recipients)
