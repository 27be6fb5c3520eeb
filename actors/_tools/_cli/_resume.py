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
from ._access import PostgresAt, claim, reading, writing_at, written_at
from ._errors import OK, CLIError
from ._remote import owner, through_system
from ._render import emit

__all__ = ["resume_parked"]


async def resume_parked(
    args: argparse.Namespace, path: Path | PostgresAt, new_input: dict[str, Any] | None
) -> int | None:
    """Resume the instance at ``args.address`` if a step's crash budget
    parked it, and say so; its exit code, or None if it is not parked so
    (then ``retry`` goes on as for any instance)."""
    iid = instance_id(args.address)
    locked: JournalLocked | None = None
    try:
        async with writing_at(path) as journal:
            with journal.reader() as r:
                parked = read_parked(r, iid)
            if parked is None:
                return None
            _refuse_input(args.address, new_input)
            txn = resume_txn(parked, time.time())
            # Live (parked), so perhaps held in the memory of the node that
            # runs it: written only under this command's claim.
            got = await claim(journal, iid)
            if got.owner is not None:
                raise CLIError(
                    f"not resumed: node {got.owner!r} runs {args.address} (it owns the "
                    "instance and its lease is held) and holds it parked in memory; retry "
                    "it on that node (system.retry there)"
                )
            got.fence(txn, iid)
            try:
                await journal.commit(txn, durable=True)
            except Conflict as exc:  # (a shared journal: another resume came first)
                raise CLIError(
                    f"not resumed: {args.address} changed after it was read ({exc}); "
                    f"'actors show {args.address}' says what it is now"
                ) from None
    except JournalLocked as exc:
        locked = exc
        assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
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
        return f"{text}; " + written_at(path)

    emit(args, doc, render)
    return OK


def _refuse_input(address: str, new_input: dict[str, Any] | None) -> None:
    if new_input is not None:
        raise CLIError(parked_input_refusal(address))
