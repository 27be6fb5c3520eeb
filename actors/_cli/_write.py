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
from pathlib import Path
from typing import Any

import attrs

from storage import (
    LIVE_STATUSES,
    STATUS_WORDS,
    TERMINAL_STATUSES,
    UNFINISHED_STATUSES,
    InstanceRow,
    Reader,
    instance_id,
)
from storage.errors import Conflict, EncodeError, JournalCorrupt, JournalLocked

from .. import _admin
from .._admin import Signal
from ._access import find_instance, journal_dir, not_live, read_row, reading, writing
from ._errors import CORRUPT, OK, USAGE, CLIError
from ._remote import owner, through_system
from ._render import counted, emit, local_time

__all__ = ["DEFAULT_REASON", "cancel", "send"]

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
                    seen = _admin.key_seen(r, iid, key)
            seq = None
            if seen is None:  # (a key this incarnation had already: nothing is stored)
                txn = _admin.send_txn(iid, signal, payload, key)
                try:
                    (seq,) = await journal.commit(txn, durable=True)
                except Conflict as exc:
                    if exc.reason == _admin.KEY_SEEN:  # stored meanwhile, by a node
                        seen = 0
                    else:
                        with journal.reader() as r:
                            raise not_live(args.address, read_row(r, iid)) from None
        held = None
    except JournalLocked as exc:
        held, seq = exc, None
        async with reading(path) as journal:
            with journal.reader() as r:
                row = read_row(r, iid)
        await through_system(
            path,
            held,
            "send",
            doing=f"send to {args.address!r}",
            instead="send",
            address=args.address,
            signal=signal.name,
            payload=payload,
            **({"key": key} if key is not None else {}),
        )
    status = row.status if row is not None else "live"
    doc = {
        "sent": seen is None,
        "address": args.address,
        "signal": signal.name,
        "payload": payload,
        "message": seq,
        "status": status,
        "through_system": held is not None,
        "key": key,
    }

    def render() -> str:
        if seen is not None:
            return (
                f"{args.address} had key {key!r} already (this incarnation): the message "
                "was sent before, and nothing was stored"
            )
        if held is not None:
            return (
                f"sent {signal.name!r} to {args.address} through {owner(held)}; it was "
                f"{status}, and the system delivers it now"
            )
        return (
            f"sent {signal.name!r} to {args.address} as message #{seq}; it is {status}, "
            "and takes the message when a system that runs its process next opens this "
            "journal"
        )

    emit(args, doc, render)
    return OK


async def cancel(args: argparse.Namespace) -> int:
    """``actors cancel``: cancel a live instance and its live descendants;
    with ``--compensate``, the instance runs its pending saga compensations
    first (by default a cancel runs none)."""
    path = journal_dir(args)
    held: JournalLocked | None = None
    compensate: bool = args.compensate
    try:
        async with writing(path) as journal:
            with journal.reader() as r:
                root, plan = _cancel_plan(r, args, path)
            to_run = (
                _admin.pending_compensations(root.record)
                if compensate and root.status in LIVE_STATUSES
                else []
            )
            if to_run:  # it compensates when a system that runs its process opens the journal
                plan[-1] = attrs.evolve(plan[-1], compensate=True)
            pending = _admin.uncompensated(plan)
            if pending and not args.force:
                raise CLIError(_refusal(root, pending, compensate))
            try:  # one transaction for the whole subtree
                with journal.reader() as r:
                    txn = _admin.cancel_txn(r, plan)
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
        ran: list[tuple[str, str]] = []
        not_run = [(a, name) for a, names in pending for name in names]
    except JournalLocked as exc:
        held = exc  # the application runs the compensations
        async with reading(path) as journal:
            with journal.reader() as r:
                root, plan = _cancel_plan(r, args, path)
        done = await through_system(
            path,
            held,
            "cancel",
            doing=f"cancel {args.address!r}",
            instead="cancel",
            address=args.address,
            **({"compensate": True} if compensate else {}),
        )
        async with reading(path) as journal:
            with journal.reader() as r:
                after = {c.row.iid: read_row(r, c.row.iid) for c in plan}
        last = after[root.iid]
        if not done:
            if last is not None and last.status == "compensation_stuck":
                raise CLIError(
                    f"{args.address} was cancelled through {owner(held)}, but a compensation "
                    f"gave up: {last.record.last_error}; it is parked compensation_stuck: fix "
                    f"the cause and run 'actors resume-compensation {args.address}' to retry "
                    f"it, or 'actors abandon-compensation {args.address}' to end it failed "
                    "without the rest"
                ) from None
            raise CLIError(f"nothing to cancel at {args.address!r}: it ended meanwhile") from None
        reason = last.record.reason if last is not None else None
        if args.reason != DEFAULT_REASON:
            print(
                f"actors: --reason is not recorded through a running system: it records {reason!r}",
                file=sys.stderr,
            )
        ran, not_run = _admin.compensation_fates(plan, after)
        to_run, pending = [], []
    cancelled = [c.row.address for c in plan]
    descendants = cancelled[:-1]
    doc = {
        "cancelled": cancelled,
        "address": args.address,
        "reason": reason,
        "uncompensated": sorted({a for a, _ in not_run}),
        "compensations": {
            "ran": [{"address": a, "step": s} for a, s in ran],
            "not_run": [{"address": a, "step": s} for a, s in not_run],
            "to_run": [{"address": root.address, "step": name} for name in to_run],
        },
        "through_system": held is not None,
    }

    def render() -> str:
        via = f" through {owner(held)}" if held is not None else ""
        lines = [f"cancelled {args.address} ({root.status} before){via}: {reason}"]
        if descendants:
            lines.append(f"and its {counted(len(descendants), 'live descendant')}, children first:")
            lines += [f"  {a}" for a in descendants]
        if to_run:
            lines.append(
                f"its {counted(len(to_run), 'compensation')} ({', '.join(to_run)}) "
                f"run first, newest first, when a system that runs {root.process!r} next opens "
                "this journal; it is running until then, and ends cancelled after them"
            )
        if ran:
            lines.append(
                f"ran {counted(len(ran), 'compensation')} first, newest first: "
                + ", ".join(f"{a}: {s}" for a, s in ran)
            )
        if not_run:
            why = "--force" if pending else "a cancel runs them only with --compensate"
            lines.append(
                f"compensations not run ({why}): " + ", ".join(f"{a}: {s}" for a, s in not_run)
            )
        elif not ran and not to_run:
            lines.append("no compensations to run")
        return "\n".join(lines)

    emit(args, doc, render)
    return OK


def _refusal(root: InstanceRow, pending: list[tuple[str, list[str]]], compensate: bool) -> str:
    """Why an offline cancel that would drop pending compensations does not write."""
    which = ", ".join(f"{a} ({len(names)})" for a, names in pending)
    own = any(a == root.address for a, _ in pending)
    if own and root.status == "compensation_stuck":
        fix = (
            f"its compensation is stuck: 'resume-compensation {root.address}' retries it, "
            f"'abandon-compensation {root.address}' ends it failed without the rest; or pass "
            "--force to cancel without compensating"
        )
    elif own and not compensate:
        fix = (
            "pass --compensate to run them before it ends cancelled (when a system that "
            "runs its process next opens this journal), or --force to cancel without "
            "compensating"
        )
    else:
        fix = (
            "cancel each of those with --compensate first (a descendant's are not run by "
            "its ancestor's cancel), or pass --force to cancel without compensating them"
        )
    return (
        f"not cancelled: saga compensations are pending in {which}, and a cancel does not "
        f"run them by default; {fix}"
    )


def _cancel_plan(
    r: Reader, args: argparse.Namespace, path: Path
) -> tuple[InstanceRow, list[_admin.Cancel]]:
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
    try:
        return root, _admin.cancel_plan(r, root, args.reason)
    except JournalCorrupt as exc:
        raise CLIError(
            f"not cancelled: {exc}; start a system on the journal, which marks corrupt "
            "instances, and cancel from there",
            CORRUPT,
        ) from None
