"""Writing commands: ``send`` and ``cancel``.

To a journal no system holds they write directly, taking the owner lock for
the moment the write takes, with the transactions of `actors._kernel._transactions`, as
the runtime does. When a system holds it, they ask that system, through its
control socket, to do it with its public API (see the package docstring).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

import attrs
import trio

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
from ._access import (
    Claimed,
    PostgresAt,
    claim,
    find_instance,
    journal_at,
    not_live,
    read_row,
    reading,
    writing_at,
)
from ._arguments import json_payload
from ._errors import CORRUPT, OK, USAGE, CLIError
from ._remote import owner, through_system
from ._render import counted, emit, local_time

__all__ = ["DEFAULT_REASON", "cancel", "send"]

DEFAULT_REASON = "cancelled from the actors CLI"  # cancel's default --reason


async def send(args: argparse.Namespace) -> int:
    """``actors send``: put a message in a live instance's mailbox.

    On a PostgreSQL journal it is stored as any node stores a message for
    an instance it does not run (no claim: the mailbox takes messages from
    anyone), and the commit notifies the node that owns it."""
    path = journal_at(args)
    try:
        signal = Signal(args.signal)
    except TypeError:
        raise CLIError(
            f"{args.signal!r} is not a signal name: give a non-empty name", USAGE
        ) from None
    payload = json_payload(args.payload)
    key = args.key
    if key is not None and not key:
        raise CLIError("--key takes a non-empty key, e.g. a request id", USAGE)
    iid = instance_id(args.address)
    seen: int | None = None
    try:
        async with writing_at(path) as journal:
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
        assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
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
        if isinstance(path, PostgresAt):
            return (
                f"sent {signal.name!r} to {args.address} as message #{seq}; it is {status}, "
                "and the node that runs it takes the message (the commit told it; with no "
                "node running it, the next node to take it over does)"
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
    path = journal_at(args)
    held: JournalLocked | None = None
    asked: str | None = None  # the live node asked to cancel it (PostgreSQL)
    compensate: bool = args.compensate
    try:
        async with writing_at(path) as journal:
            with journal.reader() as r:
                root, plan = _cancel_plan(r, args, path)
            # Live instances are claimed (a node may hold them in memory);
            # the others are written only while they have the status read.
            claims = [
                await claim(journal, c.row.iid) if c.row.status in LIVE_STATUSES else Claimed(None)
                for c in plan
            ]
            read_as = {c.row.iid: c.row.status for c in plan}
            refused = next((c.owner for c in claims if c.owner is not None), None)
            if refused is None and journal.node is not None:
                # What the last owners wrote before these claims, read again.
                with journal.reader() as r:
                    root, again = _cancel_plan(r, args, path)
                if [c.row.iid for c in again] != [c.row.iid for c in plan]:
                    raise CLIError(
                        f"not cancelled: the instances under {args.address!r} changed while "
                        "the cancel was being prepared; run it again"
                    )
                plan = [attrs.evolve(c, epoch=k.epoch) for c, k in zip(again, claims, strict=True)]
            to_run = (
                _admin.pending_compensations(root.record)
                if compensate and root.status in LIVE_STATUSES
                else []
            )
            if to_run:  # it compensates when a system that runs its process opens the journal
                plan[-1] = attrs.evolve(plan[-1], compensate=True)
            pending = _admin.uncompensated(plan) if refused is None else []
            if pending and not args.force:
                raise CLIError(_refusal(root, pending, compensate))
            if refused is not None:
                # A live node runs it (or one of its descendants): it is asked,
                # as a node asks the owner (the CANCEL a node reads from its
                # mailbox, cascading children first); whichever node runs the
                # instance next acts on it, should that one die meanwhile.
                asked = refused
                await journal.commit(
                    _admin.ask_cancel_txn(root.iid, args.reason, compensate=compensate),
                    durable=True,
                )
            else:
                try:  # one transaction for the whole subtree
                    with journal.reader() as r:
                        txn = _admin.cancel_txn(r, plan)
                    if journal.node is not None:
                        for c in plan:
                            if c.epoch is None:
                                txn.require(c.row.iid, frozenset({read_as[c.row.iid]}))
                except EncodeError as exc:
                    raise CLIError(
                        f"not cancelled: a record under {args.address!r} holds values of a "
                        "class this process has not imported; pass --import MODULE for the "
                        f"module that defines it ({exc})"
                    ) from None
                try:
                    await journal.commit(txn, durable=True)
                except Conflict as exc:
                    raise CLIError(f"not cancelled: {exc}; try again") from None
        reason = args.reason
        ran: list[tuple[str, str]] = []
        not_run = [(a, name) for a, names in pending for name in names]
        if asked is not None:
            reason, ran, not_run = await _asked_to_cancel(args, path, root, plan, asked)
            to_run = []
    except JournalLocked as exc:
        held = exc  # the application runs the compensations
        assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
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
            _cancel_not_done(args, last, owner(held))
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
        "through_node": asked,
    }

    def render() -> str:
        via = f" through {owner(held)}" if held is not None else ""
        if asked is not None:
            via = f" by node {asked!r}, which runs it"
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


# How long a cancel that asked the node that runs the instance waits for it
# to end, as `ActorSystem.cancel` waits for a remote owner.
ASKED_WAIT = 10.0


async def _asked_to_cancel(
    args: argparse.Namespace,
    path: Path | PostgresAt,
    root: InstanceRow,
    plan: list[_admin.Cancel],
    node: str,
) -> tuple[str | None, list[tuple[str, str]], list[tuple[str, str]]]:
    """Wait (a while) for the live node asked to cancel ``root`` to end it:
    (the reason recorded, compensations run, compensations not run)."""
    async with reading(path) as journal:
        with trio.move_on_after(ASKED_WAIT):
            while True:
                last = await journal.read(lambda r: read_row(r, root.iid))
                if last is None or last.status not in LIVE_STATUSES:
                    break
                await trio.sleep(0.05)
        after = await journal.read(lambda r: {c.row.iid: read_row(r, c.row.iid) for c in plan})
    last = after[root.iid]
    if last is not None and last.status in LIVE_STATUSES:
        raise CLIError(
            f"asked node {node!r}, which runs {args.address}, to cancel it, and it is still "
            f"{last.status} {ASKED_WAIT:g} s later (in a long step, say): the request is "
            "stored and acted on when it next takes a message ('actors show "
            f"{args.address}' tells when it has ended)"
        )
    if last is None or last.status != "cancelled":
        _cancel_not_done(args, last, f"node {node!r}")
    return last.record.reason if last is not None else None, *_admin.compensation_fates(plan, after)


def _cancel_not_done(args: argparse.Namespace, last: InstanceRow | None, by: str) -> NoReturn:
    """A cancel asked of the system (or node) that runs the instance did
    not end it cancelled: why, as a `CLIError`."""
    if last is not None and last.status == "compensation_stuck":
        raise CLIError(
            f"{args.address} was cancelled through {by}, but a compensation "
            f"gave up: {last.record.last_error}; it is parked compensation_stuck: fix "
            f"the cause and run 'actors resume-compensation {args.address}' to retry "
            f"it, or 'actors abandon-compensation {args.address}' to end it failed "
            "without the rest"
        )
    raise CLIError(f"nothing to cancel at {args.address!r}: it ended meanwhile")


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
    r: Reader, args: argparse.Namespace, path: Path | PostgresAt
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
