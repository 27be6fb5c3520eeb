"""Writing commands: ``send`` and ``cancel``.

To a journal no system holds they write directly, taking the owner lock for
the moment the write takes, with the transactions of `actors._protocol`, as
the runtime does. When a system holds it, they ask that system, through its
control socket, to do it with its public API (see the package docstring).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from storage import (
    STATUS_WORDS,
    TERMINAL_STATUSES,
    UNFINISHED_STATUSES,
    InstanceRow,
    Reader,
    instance_id,
)
from storage.errors import Conflict, EncodeError, JournalCorrupt, JournalLocked

from .. import _asks, _protocol, _saga
from .._log import children_named
from .._queues import waiting_rows
from .._records import Signal
from ._access import find_instance, journal_dir, not_live, read_row, reading, writing
from ._errors import CORRUPT, OK, USAGE, CLIError
from ._remote import owner, through_system
from ._render import counted, emit, local_time

__all__ = ["send", "cancel", "DEFAULT_REASON"]

_MAX_PAYLOAD = 1 << 20  # open_system's default max_payload
DEFAULT_REASON = "cancelled from the actors CLI"  # cancel's default --reason


def _payload(text: str | None) -> Any:
    if text is None:
        return None
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(
            f'the payload is not JSON ({exc}); quote it for the shell, e.g. \'{{"by": "ann"}}\'',
            USAGE,
        ) from None


async def send(args: argparse.Namespace) -> int:
    """``actors send``: put a message in a live instance's mailbox."""
    path = journal_dir(args)
    try:
        signal = Signal(args.signal)
    except TypeError:
        raise CLIError(
            f"{args.signal!r} is not a signal name: give a non-empty name", USAGE
        ) from None
    payload = _payload(args.payload)
    key = args.key
    if key is not None and not key:
        raise CLIError("--key takes a non-empty key, e.g. a request id", USAGE)
    iid = instance_id(args.address)
    seen: int | None = None
    try:
        async with writing(path) as journal:
            with journal.reader() as r:
                row = read_row(r, iid)
                if key is not None:
                    seen = r.cursor(iid, _protocol.KEY_PREFIX + key)
            seq = None
            if seen is None:  # (a key this incarnation had already: nothing is stored)
                txn, _ = _protocol.send_txn(
                    iid, signal.name, payload, time.time(), max_payload=_MAX_PAYLOAD, key=key
                )
                try:
                    (seq,) = await journal.commit(txn, durable=True)
                except Conflict:
                    with journal.reader() as r:
                        raise not_live(args.address, read_row(r, iid)) from None
        held = None
    except JournalLocked as exc:
        held, seq = exc, None
        async with reading(path) as journal:
            with journal.reader() as r:
                row = read_row(r, iid)
        await through_system(
            path, held, "send", doing=f"send to {args.address!r}", instead="send",
            address=args.address, signal=signal.name, payload=payload,
            **({"key": key} if key is not None else {}),
        )  # fmt: skip
    status = row.status if row is not None else "live"
    doc = {"sent": seen is None, "address": args.address, "signal": signal.name,
           "payload": payload, "message": seq, "status": status,
           "through_system": held is not None, "key": key}  # fmt: skip

    def render() -> str:
        if seen is not None:
            return (f"{args.address} had key {key!r} already (this incarnation): the message "
                    "was sent before, and nothing was stored")  # fmt: skip
        if held is not None:
            return (f"sent {signal.name!r} to {args.address} through {owner(held)}; it was "
                    f"{status}, and the system delivers it now")  # fmt: skip
        return (f"sent {signal.name!r} to {args.address} as message #{seq}; it is {status}, "
                "and takes the message when a system that runs its process next opens this "
                "journal")  # fmt: skip

    emit(args, doc, render)
    return OK


async def cancel(args: argparse.Namespace) -> int:
    """``actors cancel``: cancel a live instance and its live descendants."""
    path = journal_dir(args)
    held: JournalLocked | None = None
    try:
        async with writing(path) as journal:
            with journal.reader() as r:
                root, plan = _cancel_plan(r, args, path)
            pending = _pending(plan)
            if pending and not args.force:
                which = ", ".join(f"{a} ({n})" for a, n in pending)
                raise CLIError(
                    f"not cancelled: saga compensations are pending in {which}, and only "
                    "the application can run them; cancel through the application "
                    "(system.cancel), or pass --force to cancel without compensating"
                )
            with journal.reader() as r:  # the asks they owe an answer (see actors._asks)
                owed = [
                    ask
                    for c in plan
                    for ask in _asks.unanswered_on_disk(
                        r.entries(c.row.iid, c.row.record.run), r.mailbox(c.row.iid)
                    )
                ]
            try:  # one transaction for the whole subtree
                txn, _ = _protocol.cancel_txn(plan, time.time())
                _asks.answer_offline(txn, owed, "cancelled", time.time())
            except EncodeError as exc:
                raise CLIError(
                    f"not cancelled: a record under {args.address!r} holds values of a class "
                    "this process has not imported; pass --import MODULE for the module that "
                    f"defines it ({exc})"
                ) from None
            try:
                await journal.commit(txn, durable=True)
            except Conflict as exc:  # pragma: no cover - we hold the journal
                raise CLIError(f"not cancelled: {exc}; try again") from None
        reason = args.reason
    except JournalLocked as exc:
        held, pending = exc, []  # the application runs the compensations
        async with reading(path) as journal:
            with journal.reader() as r:
                root, plan = _cancel_plan(r, args, path)
        done = await through_system(
            path, held, "cancel", doing=f"cancel {args.address!r}", instead="cancel",
            address=args.address,
        )  # fmt: skip
        if not done:
            raise CLIError(f"nothing to cancel at {args.address!r}: it ended meanwhile")
        async with reading(path) as journal:
            with journal.reader() as r:
                after = read_row(r, root.iid)
        reason = after.record.reason if after is not None else None
        if args.reason != DEFAULT_REASON:
            print(f"actors: --reason is not recorded through a running system: it records "
                  f"{reason!r}", file=sys.stderr)  # fmt: skip
    cancelled = [c.row.address for c in plan]
    descendants = cancelled[:-1]
    doc = {"cancelled": cancelled, "address": args.address, "reason": reason,
           "uncompensated": [a for a, _ in pending],
           "through_system": held is not None}  # fmt: skip

    def render() -> str:
        via = f" through {owner(held)}" if held is not None else ""
        lines = [f"cancelled {args.address} ({root.status} before){via}: {reason}"]
        if descendants:
            lines.append(f"and its {counted(len(descendants), 'live descendant')}, children first:")
            lines += [f"  {a}" for a in descendants]
        if pending:
            lines.append("compensations not run (--force): " + ", ".join(a for a, _ in pending))
        return "\n".join(lines)

    emit(args, doc, render)
    return OK


def _cancel_plan(
    r: Reader, args: argparse.Namespace, path: Path
) -> tuple[InstanceRow, list[_protocol.Cancel]]:
    """The instance to cancel and its live subtree, children first; a
    `CLIError` if there is none or it is not unfinished."""
    root = find_instance(r, args.address, path)
    if root.status not in UNFINISHED_STATUSES:
        words = STATUS_WORDS.get(root.status, f"it is {root.status}")
        at = root.record.updated
        ended = at and root.status in TERMINAL_STATUSES
        raise CLIError(
            f"nothing to cancel at {args.address!r}: {words}"
            + (f" at {local_time(at)}" if ended else "")
        )
    plan: list[_protocol.Cancel] = []
    _plan_cancel(r, root, args.reason, plan, set())
    return root, plan


def _pending(plan: list[_protocol.Cancel]) -> list[tuple[str, int]]:
    """(address, how many) of the saga compensations pending in ``plan``."""
    return [(c.row.address, len(_saga.pending(c.row.record))) for c in plan
            if _saga.pending(c.row.record)]  # fmt: skip


def _plan_cancel(
    r: Reader, row: InstanceRow, reason: str, plan: list[_protocol.Cancel], seen: set[bytes]
) -> None:
    """Add ``row`` to ``plan`` after its live descendants (depth first, as the runtime)."""
    seen.add(row.iid)
    try:
        log = r.entries(row.iid, row.record.run)
        timers = r.timers(row.iid)
        children = children_named(log)
        for address in children:
            iid = instance_id(address)
            if iid in seen:
                continue
            child = r.instance(iid)
            if child is not None and child.status in UNFINISHED_STATUSES:
                _plan_cancel(r, child, f"parent {row.address} cancelled", plan, seen)
    except JournalCorrupt as exc:
        raise CLIError(
            f"not cancelled: records under {row.address!r} are corrupt ({exc}); start a "
            "system on the journal, which marks corrupt instances, and cancel from there",
            CORRUPT,
        ) from None
    plan.append(_protocol.Cancel(row, timers, reason, states=waiting_rows(r, row.iid)))
