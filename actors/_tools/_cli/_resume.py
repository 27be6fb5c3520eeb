"""``retry`` of an instance parked by a step's crash budget: resumed as the
same incarnation, its crashes forgiven (see `actors._features._crashes`), rather than
run again as a new one.

Like every write of the command line: directly to a journal no system
holds, with the transaction `actors._features._crashes.resume_txn` builds for the
runtime too (the instance runs on when a system next opens the journal), and
otherwise through the running system's control socket, whose
`ActorSystem.retry` resumes it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from storage import instance_id
from storage.errors import Conflict, JournalLocked

from .._admin import Parked, parked_input_refusal, read_parked, resume_txn
from ._access import reading, writing
from ._errors import OK, CLIError
from ._remote import owner, through_system
from ._render import emit

__all__ = ["resume_parked"]


async def resume_parked(
    args: argparse.Namespace, path: Path, new_input: dict[str, Any] | None
) -> int | None:
    """Resume the instance at ``args.address`` if a step's crash budget
    parked it, and say so; its exit code, or None if it is not parked so
    (then ``retry`` goes on as for any instance)."""
    iid = instance_id(args.address)
    locked: JournalLocked | None = None
    try:
        async with writing(path) as journal:
            with journal.reader() as r:
                parked = read_parked(r, iid)
            if parked is None:
                return None
            _refuse_input(args.address, new_input)
            try:
                await journal.commit(resume_txn(parked, time.time()), durable=True)
            except Conflict as exc:  # pragma: no cover - we hold the journal
                raise CLIError(f"not resumed: {exc}; try again") from None
    except JournalLocked as exc:
        locked = exc
        async with reading(path) as journal:
            with journal.reader() as r:
                found: Parked | None = read_parked(r, iid)
        if found is None:
            return None
        parked = found
        _refuse_input(args.address, new_input)
        await through_system(
            path,
            locked,
            "retry",
            doing=f"retry {args.address!r}",
            instead="system.retry(...)",
            address=args.address,
        )
    row = parked[0]
    doc = {
        "resumed": True,
        "address": args.address,
        "incarnation": row.record.incarnation,
        "status": "running",
        "was": row.record.held,
        "through_system": locked is not None,
    }

    def render() -> str:
        text = (
            f"resumed {args.address} (stuck: {row.record.held}), incarnation "
            f"{row.record.incarnation}, its crashes forgiven"
        )
        if locked is not None:
            return f"{text}, through {owner(locked)}"
        return f"{text}; it runs on when a system that runs its process next opens this journal"

    emit(args, doc, render)
    return OK


def _refuse_input(address: str, new_input: dict[str, Any] | None) -> None:
    if new_input is not None:
        raise CLIError(parked_input_refusal(address))
