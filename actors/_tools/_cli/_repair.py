"""Repair commands: ``resume-compensation``, ``abandon-compensation`` and
``cleanup``.

Like ``send`` and ``cancel``, each writes directly to a journal no system
holds (with the transactions of `actors._kernel._transactions`, as the runtime does)
and otherwise asks the running system through its control socket, which
calls the `ActorSystem` method of the same name.

On a PostgreSQL journal each writes as a brief node of its own
(`writing_at`). A stuck compensation is claimed first, as a resume of an
instance parked on a crash budget is: the node that parked it holds
nothing of it in memory (it left memory when it got stuck), so a resume
either runs under this command's claim (another node takes it over once
the command ends) or, when that node is live and still owns it, wakes
that node, which runs it; an abandon ends it either way. A cleanup claims
nothing: it removes only ended instances, each on condition that it is
as read (`actors._system._cleanup`), as a node's cleanup does.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from storage import STATUS_WORDS, TERMINAL_STATUSES, InstanceRow, Reader
from storage.errors import Conflict, JournalLocked

from .. import _admin
from ._access import (
    PostgresAt,
    claim,
    claim_for_start,
    find_instance,
    journal_at,
    reading,
    writing_at,
    written_at,
)
from ._errors import OK, CLIError
from ._remote import owner, through_system
from ._render import counted, emit, plural

__all__ = ["abandon_compensation", "cleanup", "duration", "resume_compensation"]


# -- stuck compensations ----------------------------------------------------------------


def _stuck(r: Reader, address: str, path: Path | PostgresAt, doing: str) -> InstanceRow:
    row = find_instance(r, address, path)
    if row.status != "compensation_stuck":
        words = STATUS_WORDS.get(row.status, f"it is {row.status}")
        raise CLIError(
            f"cannot {doing} of {address!r}: it is not stuck compensating ({words}); only an "
            "instance parked compensation_stuck has a compensation to resume or abandon"
        )
    return row


async def _unstick(
    args: argparse.Namespace, op: str, doing: str
) -> tuple[InstanceRow, JournalLocked | None]:
    """Write ``op`` for the stuck instance at ``args.address``; the row as it
    was, and who did it (None: this process, directly)."""
    path = journal_at(args)
    try:
        async with writing_at(path) as journal:
            with journal.reader() as r:
                row = _stuck(r, args.address, path, doing)
            txn = _admin.unstick_txn(op, row)
            if op == "resume_compensation":
                # Running again: its owner (this command until it ends, or the
                # live node that owns it, woken) runs it.
                await claim_for_start(journal, txn, row.iid)
            else:
                (await claim(journal, row.iid)).fence(txn, row.iid)
            try:  # (on condition that it is still stuck: `unstick_txn`)
                await journal.commit(txn, durable=True)
            except Conflict:  # (a shared journal: another command or node came first)
                raise CLIError(
                    f"cannot {doing} of {args.address!r}: it changed after it was read "
                    f"(another resume or abandon came first); 'actors show {args.address}' "
                    "says what it is now"
                ) from None
        return row, None
    except JournalLocked as exc:
        held = exc
    assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
    async with reading(path) as journal:
        with journal.reader() as r:
            row = _stuck(r, args.address, path, doing)
    done = await through_system(
        path,
        held,
        op,
        doing=f"{doing} of {args.address!r}",
        instead=f"system.{op}(...)",
        address=args.address,
    )
    if not done:
        raise CLIError(f"cannot {doing} of {args.address!r}: it is no longer stuck compensating")
    return row, held


async def resume_compensation(args: argparse.Namespace) -> int:
    """``actors resume-compensation``: retry a stuck compensation where it stopped."""
    row, held = await _unstick(args, "resume_compensation", "resume the compensation")
    where = journal_at(args)
    left = _admin.pending_compensations(row.record)
    doc = {
        "resumed": True,
        "address": args.address,
        "pending": left,
        "through_system": held is not None,
    }

    def render() -> str:
        which = f"{counted(len(left), 'compensation')} to run"
        if held is not None:
            return f"resumed {args.address} through {owner(held)}: it retries now, {which}"
        if isinstance(where, PostgresAt):
            return f"resumed {args.address}: it is running again, and retries {which}; " + (
                written_at(where)
            )
        return (
            f"resumed {args.address}: it is running again, and retries {which} when a "
            "system that runs its process next opens this journal"
        )

    emit(args, doc, render)
    return OK


async def abandon_compensation(args: argparse.Namespace) -> int:
    """``actors abandon-compensation``: end a stuck instance as failed."""
    row, held = await _unstick(args, "abandon_compensation", "abandon the compensation")
    left = _admin.pending_compensations(row.record)
    doc = {
        "abandoned": True,
        "address": args.address,
        "never_run": left,
        "through_system": held is not None,
    }

    def render() -> str:
        via = f" through {owner(held)}" if held is not None else ""
        text = f"abandoned the compensation of {args.address}{via}: it has failed"
        if left:
            text += f"; not compensated: {', '.join(str(n) for n in left)}"
        return text

    emit(args, doc, render)
    return OK


# -- cleanup --------------------------------------------------------------------------

_UNITS = {"s": 1, "min": 60, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> float:
    """Seconds in ``text``: "90", "90s", "15min", "12h", "7d", "2w"."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(s|min|m|h|d|w)?\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give seconds or a number with s, min, h, d or w (e.g. 7d)"
        )
    return float(match[1]) * _UNITS[match[2] or "s"]


def span_text(seconds: float) -> str:
    """A duration as given: "7 d", "90 s"."""
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


async def cleanup(args: argparse.Namespace) -> int:
    """``actors cleanup``: remove finished instances older than ``--older-than``."""
    path = journal_at(args)
    statuses = args.status or sorted(TERMINAL_STATUSES)
    held: JournalLocked | None = None
    try:
        async with writing_at(path) as journal:
            removed = await _admin.clean_up(journal, statuses, args.older_than)
    except JournalLocked as exc:
        held = exc
        assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
        removed = await through_system(
            path,
            held,
            "cleanup",
            doing="clean up",
            instead="system.cleanup(...)",
            older_than=args.older_than,
            statuses=statuses,
        )
    doc: dict[str, Any] = {
        "removed": removed,
        "older_than": args.older_than,
        "statuses": statuses,
        "through_system": held is not None,
    }

    def render() -> str:
        via = f" through {owner(held)}" if held is not None else ""
        return (
            f"removed {plural(removed, 'instance')}{via} ({', '.join(statuses)}, last "
            f"updated more than {span_text(args.older_than)} ago)"
        )

    emit(args, doc, render)
    return OK
