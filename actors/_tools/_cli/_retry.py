"""``retry``: run a failed (or cancelled) instance again, as a new incarnation
of its address (or resume one a step's crash budget parked: `_resume`).

It writes, like ``send`` and ``cancel``: directly to a journal no
system holds, with the transaction `actors._system._retry.retry_txn` builds for the
runtime too (a fork's from effect 0: the new incarnation gets the failed
run's mail; it runs when a system that runs its process next opens the
journal), and otherwise through the running system's control socket, which
calls `ActorSystem.retry`. Either way the refusals are read here first, so
they have the exit codes of a direct write.

A replaced ``--input`` is checked against the process's signature as
`ActorSystem.retry` checks it (one that does not fit is refused, exit 2,
nothing written): through the running system, or with ``--import MODULE``
for the module that defines the process. With neither, a direct retry with
``--input`` is refused (exit 2), as a direct ``fork`` without its code is:
an input the process does not take would leave the new incarnation stuck.
(``show --incarnation N`` prints the record a retry kept: `_show`.)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from storage import Reader, instance_id
from storage.errors import Conflict, EncodeError, JournalLocked

from ...errors import ActorError
from .._admin import (
    MAX_PAYLOAD,
    RetryPlan,
    read_for_retry,
    retry_refusal as refusal,
    retry_txn,
)
from ._access import PostgresAt, claim_for_start, journal_at, reading, writing_at, written_at
from ._arguments import definitions, json_input
from ._errors import CORRUPT, NOT_FOUND, OK, USAGE, CLIError
from ._remote import owner, through_system
from ._render import counted, emit
from ._resume import resume_parked

__all__ = ["retry"]


def _check_input(
    plan: RetryPlan, address: str, new_input: dict[str, Any] | None, imports: list[str]
) -> None:
    """Check the new incarnation's input against the process's code, as
    `ActorSystem.retry` does; a `CLIError` (exit 2) if it does not fit, or
    if a new input cannot be checked (no ``--import``ed code)."""
    source = plan.source
    procs = definitions(imports).get(source.process, [])
    if len(procs) > 1:
        names = ", ".join(p.fn.__qualname__ for p in procs)
        raise CLIError(
            f"the --import'ed modules define {source.process!r} {len(procs)} times ({names}); "
            "import only the module with the code the retry runs on",
            USAGE,
        )
    if not procs:
        if new_input is None:
            return  # the stored input, which its process took when it started
        raise CLIError(
            f"cannot retry {address!r} with a new --input and no system running without its "
            f"process's code: pass --import MODULE for the module that defines "
            f"{source.process!r} (the input is checked against it, as system.retry checks "
            "it), retry through the running system, or leave out --input to keep the stored one",
            USAGE,
        )
    stored = dict(source.record.input or {})
    try:
        procs[0].check_input(
            tuple(source.record.params), stored if new_input is None else new_input
        )
    except ActorError as exc:
        raise CLIError(str(exc), USAGE) from None


def _plan(r: Reader, address: str, path: Path | PostgresAt) -> RetryPlan:
    """What a retry of ``address`` reads; a `CLIError` if it cannot be retried."""
    plan, floor = read_for_retry(r, instance_id(address))
    if plan is None:
        gone = f" (incarnation {floor} was cleaned up)" if floor else ""
        raise CLIError(
            f"no instance at {address!r} in {path}{gone}; check the address ('actors list' "
            "shows the addresses)",
            NOT_FOUND,
        )
    if plan.source.status == "corrupt":
        raise CLIError(
            f"cannot retry {address!r}: its records are corrupt ('actors show {address}' "
            "says which)",
            CORRUPT,
        )
    why = refusal(address, plan)
    if why is not None:
        raise CLIError(why)
    return plan


async def retry(args: argparse.Namespace) -> int:
    """``actors retry``: run a failed (or cancelled) instance again, as a new incarnation."""
    path = journal_at(args)
    new_input = json_input(args.input)
    resumed = await resume_parked(args, path, new_input)
    if resumed is not None:
        return resumed  # stuck on a crash budget: resumed, not replaced
    held: JournalLocked | None = None
    try:
        async with writing_at(path) as journal:
            with journal.reader() as r:
                plan = _plan(r, args.address, path)
            _check_input(plan, args.address, new_input, args.imports)
            try:
                start = retry_txn(plan, input=new_input, now=time.time(), max_payload=MAX_PAYLOAD)
            except EncodeError as exc:
                raise CLIError(
                    f"not retried: a record under {args.address!r} holds values of a class this "
                    "process has not imported; pass --import MODULE for the module that defines "
                    f"it ({exc})"
                ) from None
            await claim_for_start(journal, start.txn, plan.source.iid)
            try:
                await journal.commit(start.txn, durable=True)
            except Conflict as exc:  # another retry or start (on a shared journal) came first
                raise CLIError(
                    f"not retried: {args.address} changed after it was read (another retry, "
                    f"fork or start of it committed first: {exc}); 'actors show "
                    f"{args.address}' says what it is now"
                ) from None
        incarnation, status = start.record.incarnation, "running"
    except JournalLocked as exc:
        held = exc
        assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
        async with reading(path) as journal:
            with journal.reader() as r:
                plan = _plan(r, args.address, path)
        done = await through_system(
            path,
            held,
            "retry",
            doing=f"retry {args.address!r}",
            instead="system.retry(...)",
            address=args.address,
            **({} if new_input is None else {"input": new_input}),
        )
        incarnation, status = done["incarnation"], done["status"]
    row = plan.source
    reset = [child.address for child, _ in plan.resets]
    doc = {
        "retried": True,
        "address": args.address,
        "incarnation": incarnation,
        "status": status,
        "replaced": {"incarnation": row.record.incarnation, "status": row.status},
        "input_replaced": new_input is not None,
        "reset": reset,
        "messages": len(plan.mail),
        "through_system": held is not None,
    }

    def render() -> str:
        was = f"{row.status}, incarnation {row.record.incarnation}"
        if held is not None:
            text = (
                f"retried {args.address} ({was}) through {owner(held)} as incarnation "
                f"{incarnation}; it is {status}"
            )
        else:
            text = f"retried {args.address} ({was}) as incarnation {incarnation}; " + written_at(
                path
            )
        lines = [text]
        if plan.mail:
            lines.append(
                f"with {counted(len(plan.mail), 'message')} in its mailbox (those the run took, "
                "then its unread ones)"
            )
        if reset:
            lines.append(
                f"and reset its {counted(len(reset), 'failed descendant')}, which its "
                "new run starts afresh:"
            )
            lines += [f"  {a}" for a in reset]
        lines.append(
            f"('actors show {args.address} --incarnation {row.record.incarnation}' "
            "shows the record it replaced)"
        )
        return "\n".join(lines)

    emit(args, doc, render)
    return OK
