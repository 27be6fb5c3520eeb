"""``fork``: run an ended instance again from a point in its log, one
address or every instance of a process with a status (see `actors._system._fork`).

    actors fork orders/o-17 --from 4 [--to orders/o-17-debug] [--input JSON]
    actors fork orders/o-17 --after-step charge_card
    actors fork --process orders/:order_id --status failed --after-step charge_card --dry-run

A fork checks that the kept part of the log replays on the current code,
so it needs the process's code: through the running system that holds the
journal (its control socket), which has it; or, with no system running,
from ``--import MODULE``, the module that defines the process (its
`ProcessDef` found among the module's names). The transaction is the one
`actors._system._fork.fork_txn` builds for the runtime too; the new incarnation
runs when a system that runs its process next opens the journal.

``--dry-run`` writes nothing: it lists, per instance, the fork point, the
steps kept (not run again) and the effects that run again, the children
reset, and any refusal, each with the reason. With no system running it
runs the replay check too (with ``--import``); beside a running system it
reads the journal only, and the replay check is the system's, at the fork.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from storage import InstanceRow, Journal, Reader, instance_id
from storage.errors import Conflict, EncodeError, JournalLocked

from ...errors import ActorError
from .._admin import (
    MAX_PAYLOAD,
    ForkPlan,
    fork_point,
    fork_refusal as refusal,
    fork_txn,
    not_replayed,
    read_for_fork,
    replay_problem,
)
from ._access import (
    PostgresAt,
    claim_for_start,
    journal_at,
    reading,
    writing_at,
    written_at,
)
from ._arguments import definitions, json_input
from ._errors import CORRUPT, NOT_FOUND, OK, REFUSED, USAGE, CLIError
from ._remote import owner, through_system
from ._render import emit

__all__ = ["add_fork_arguments", "fork"]


def add_fork_arguments(p: argparse.ArgumentParser) -> None:
    """The ``fork`` command's arguments."""
    p.add_argument(
        "address",
        nargs="?",
        help="the instance's address (its status is completed, failed or "
        "cancelled); or, without one, --process and --status choose them",
    )
    p.add_argument(
        "--from",
        dest="from_effect",
        type=int,
        metavar="N",
        help="keep log positions 1 to N ('actors show' numbers them); the rest runs again",
    )
    p.add_argument(
        "--after-step",
        dest="after_step",
        metavar="NAME",
        help="keep the log up to the first step NAME with an outcome",
    )
    p.add_argument(
        "--to",
        metavar="ADDRESS",
        help="make the new incarnation at ADDRESS (same process) and leave the source as it is",
    )
    p.add_argument(
        "--input",
        metavar="JSON",
        help="replace its keyword input with this JSON object ('-' reads stdin)",
    )
    p.add_argument(
        "--process",
        metavar="TEMPLATE",
        help="without an address: fork every instance of this process ...",
    )
    p.add_argument(
        "--status",
        choices=("completed", "failed", "cancelled"),
        help="... with this status (with --after-step)",
    )
    p.add_argument(
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="write nothing: list what it would do",
    )


def _choose(r: Reader, args: argparse.Namespace) -> list[InstanceRow]:
    if args.address is not None:
        return []
    rows = [row for row in r.instances(args.status, args.process) if not row.record.parent]
    return sorted(rows, key=lambda row: row.address)


def _check_usage(args: argparse.Namespace) -> None:
    if (args.from_effect is None) == (args.after_step is None):
        raise CLIError("fork takes one of --from N or --after-step NAME", USAGE)
    if args.address is None:
        if not (args.process and args.status and args.after_step):
            raise CLIError(
                "fork without an address takes --process TEMPLATE, --status STATUS and "
                "--after-step NAME (e.g. --process 'orders/:order_id' --status failed "
                "--after-step charge_card)",
                USAGE,
            )
        if args.to is not None:
            raise CLIError("--to forks one address; give the ADDRESS", USAGE)
    elif args.process or args.status:
        raise CLIError("--process and --status choose instances when no ADDRESS is given", USAGE)


def _plan(
    r: Reader, address: str, args: argparse.Namespace, path: Path | PostgresAt
) -> tuple[ForkPlan | None, str | None]:
    """The plan of one fork, or None and why it is refused."""
    iid = instance_id(address)
    point = args.from_effect
    if args.after_step is not None:
        point = fork_point(r, iid, args.after_step)
        if point is None:
            return None, (
                f"cannot fork {address!r} after step {args.after_step!r}: its last run has no "
                "outcome of a step of that name"
            )
    plan, floor = read_for_fork(r, iid, point, args.to)
    if plan is None:
        gone = f" (incarnation {floor} was cleaned up)" if floor else ""
        raise CLIError(f"no instance at {address!r} in {path}{gone}; check the address", NOT_FOUND)
    if plan.source.status == "corrupt":
        raise CLIError(f"cannot fork {address!r}: its records are corrupt", CORRUPT)
    return plan, refusal(address, plan, args.to)


def _describe(address: str, plan: ForkPlan | None, why: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"address": address}
    if plan is not None:
        kept = [
            f"{e.kind} {e.name}".strip() for _, e in sorted(plan.prefix.items()) if e.is_outcome
        ]
        doc.update(
            {
                "from_effect": plan.from_effect,
                "to": plan.target_address,
                "status": plan.source.status,
                "incarnation": plan.source.record.incarnation,
                "kept": kept,
                "runs_again": [
                    f"{e.kind} {e.name}".strip()
                    for _, e in sorted(plan.suffix.items())
                    if e.is_outcome
                ],
                "children_reset": [child.address for child, _ in plan.resets],
                "messages_put_back": len(plan.mail),
            }
        )
    doc["refused"] = why
    return doc


async def _direct(
    journal: Journal,
    plan: ForkPlan,
    address: str,
    new_input: dict[str, Any] | None,
    dry_run: bool,
    imports: list[str],
) -> tuple[str | None, int | None]:
    """Check (and unless ``dry_run`` commit) one fork on a journal no system
    holds: the refusal, or the new incarnation (None on a dry run)."""
    source = plan.source
    procs = definitions(imports).get(source.process, [])
    if not procs:
        raise CLIError(
            f"cannot fork {address!r} with no system running without its process's code: pass "
            f"--import MODULE for the module that defines {source.process!r} (a fork checks "
            "that the kept part of the log replays on it), or fork through the running system",
            USAGE,
        )
    if len(procs) > 1:
        names = ", ".join(p.fn.__qualname__ for p in procs)
        raise CLIError(
            f"the --import'ed modules define {source.process!r} {len(procs)} times ({names}); "
            "import only the module with the code the fork runs on",
            USAGE,
        )
    proc = procs[0]
    try:
        start = fork_txn(plan, input=new_input, now=time.time(), max_payload=MAX_PAYLOAD)
    except EncodeError as exc:
        return f"not forked: {exc}", None
    try:
        proc.check_input(tuple(start.record.params), dict(start.record.input or {}))
    except ActorError as exc:
        return str(exc), None
    problem = await replay_problem(journal, plan, proc, start.record)
    if problem is not None:
        return not_replayed(address, plan, problem), None
    if dry_run:
        return None, None
    await claim_for_start(journal, start.txn, plan.target_iid)
    try:
        await journal.commit(start.txn, durable=True)
    except Conflict as exc:  # (a shared journal: another fork or start came first)
        return (
            f"not forked: {plan.target_address} changed after it was read (another fork, "
            f"retry or start of it committed first: {exc}); 'actors show "
            f"{plan.target_address}' says what it is now"
        ), None
    return None, start.record.incarnation


async def fork(args: argparse.Namespace) -> int:
    """``actors fork``: run ended instances again from a point in their log."""
    _check_usage(args)
    path = journal_at(args)
    new_input = json_input(args.input)
    done: list[dict[str, Any]] = []
    held: JournalLocked | None = None
    try:
        async with writing_at(path) as journal:
            with journal.reader() as r:
                addresses = (
                    [args.address] if args.address else [row.address for row in _choose(r, args)]
                )
                plans = [(a, *_plan(r, a, args, path)) for a in addresses]
            for address, plan, why in plans:
                incarnation = None
                if why is None and plan is not None:
                    why, incarnation = await _direct(
                        journal, plan, address, new_input, args.dry_run, args.imports
                    )
                doc = _describe(address, plan, why)
                doc["incarnation_made"] = incarnation
                done.append(doc)
    except JournalLocked as exc:
        held = exc
        done = []
        assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
        async with reading(path) as journal:
            with journal.reader() as r:
                addresses = (
                    [args.address] if args.address else [row.address for row in _choose(r, args)]
                )
                plans = [(a, *_plan(r, a, args, path)) for a in addresses]
        for address, plan, why in plans:
            doc = _describe(address, plan, why)
            doc["incarnation_made"] = None
            if why is None and not args.dry_run:
                fields: dict[str, Any] = {"address": address}
                fields.update(
                    {"after_step": args.after_step}
                    if args.after_step is not None
                    else {"from_effect": args.from_effect}
                )
                if args.to is not None:
                    fields["to"] = args.to
                if new_input is not None:
                    fields["input"] = new_input
                try:
                    answer = await through_system(
                        path,
                        held,
                        "fork",
                        doing=f"fork {address!r}",
                        instead="system.fork(...)",
                        **fields,
                    )
                    doc["incarnation_made"] = answer["incarnation"]
                except CLIError as exc:
                    if args.address is not None:
                        raise
                    doc["refused"] = str(exc)
            done.append(doc)
    refused = [d for d in done if d["refused"]]
    if args.address is not None and refused:
        raise CLIError(refused[0]["refused"], USAGE)
    result = {"dry_run": args.dry_run, "through_system": held is not None, "forks": done}

    def render() -> str:
        lines = []
        if not done:
            lines.append(f"no {args.status} instance of {args.process!r} to fork")
        for d in done:
            if d["refused"]:
                lines.append(f"{d['address']}: refused: {d['refused']}")
                continue
            kept = ", ".join(d["kept"]) or "nothing"
            again = ", ".join(d["runs_again"]) or "nothing recorded"
            verb = "would fork" if args.dry_run else "forked"
            made = (
                "" if d["incarnation_made"] is None else f" as incarnation {d['incarnation_made']}"
            )
            where = "" if d["to"] == d["address"] else f" to {d['to']}"
            lines.append(
                f"{verb} {d['address']} ({d['status']}){where} from effect "
                f"{d['from_effect']}{made}: keeps {kept}; runs again {again}"
            )
            if d["children_reset"]:
                lines.append("  children started afresh: " + ", ".join(d["children_reset"]))
            if d["messages_put_back"]:
                lines.append(f"  messages in its mailbox: {d['messages_put_back']}")
        if held is not None and not args.dry_run:
            lines.append(f"(through {owner(held)})")
        elif not args.dry_run and any(d["incarnation_made"] for d in done):
            lines.append(f"({written_at(path)})")
        return "\n".join(lines)

    emit(args, result, render)
    return REFUSED if refused else OK
