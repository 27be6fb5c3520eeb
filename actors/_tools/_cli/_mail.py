"""``mail``: an instance's unread messages, its dead letters, and dropping
a message into them (see `actors._system._mail` and
`actors._system._drop`).

    actors mail orders/o-17              # unread messages, with their ids
    actors mail orders/o-17 --drop 7     # message #7 to the dead letters
    actors mail orders/o-17 --drop 7 --incarnation 2   # ... if it is still incarnation 2
    actors mail orders/o-17 --dropped    # the dead letters

Reading works beside a running system (read-only). ``--drop`` writes like
``send``: directly to a journal no system holds, with the transaction
`actors._system._drop.drop_txn` builds for the runtime too, and otherwise through
the running system's control socket (`ActorSystem.drop_message`). Message
ids are an incarnation's own (a retry or fork numbers the mail it carries
anew): the listing names the incarnation, and ``--incarnation N`` refuses
the drop if the address holds another one by then.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from storage import LIVE_STATUSES, instance_id
from storage.errors import Conflict, JournalLocked

from .._admin import (
    DeadLetter,
    Message,
    drop_refusal,
    drop_txn,
    failed_at,
    handling,
    read_dead,
    read_for_drop,
    read_mail,
)
from ._access import Claimed, claim, find_instance, journal_at, reading, writing_at
from ._errors import NOT_FOUND, OK, USAGE, CLIError
from ._remote import owner, through_system
from ._render import compact, emit, local_time

__all__ = ["add_mail_arguments", "mail"]


def add_mail_arguments(p: argparse.ArgumentParser) -> None:
    """The ``mail`` command's arguments."""
    p.add_argument("address", help="the instance's address, e.g. orders/o-17")
    p.add_argument(
        "--drop",
        type=int,
        metavar="ID",
        help="move unread message ID (or the message a failed run was handling) "
        "to the dead letters; the instance never takes it",
    )
    p.add_argument(
        "--incarnation",
        type=int,
        metavar="N",
        help="with --drop: drop only if the address still holds incarnation N (the one "
        "the listing showed; a retry or fork numbers its mail anew)",
    )
    p.add_argument(
        "--dropped", action="store_true", help="list the dead letters (kept until cleanup) instead"
    )


def _message(m: Message) -> dict[str, Any]:
    return {"id": m.id, "signal": m.signal, "payload": m.payload, "sent": m.sent}


def _letter(d: DeadLetter) -> dict[str, Any]:
    return {**_message(d.message), "incarnation": d.incarnation, "dropped": d.dropped}


def _line(m: dict[str, Any]) -> str:
    sent = f"  sent {local_time(m['sent'])}" if m.get("sent") else ""
    return f"  #{m['id']:<4} {m['signal']}{sent}  {compact(m['payload'], 80)}"


async def mail(args: argparse.Namespace) -> int:
    """``actors mail``: list unread messages or dead letters, or drop one."""
    address = args.address
    iid = instance_id(address)
    if args.drop is not None:
        if args.dropped:
            raise CLIError("--drop and --dropped do not go together", USAGE)
        return await _drop(args, journal_at(args), address, iid)
    path = journal_at(args)  # a listing reads PostgreSQL too
    if args.incarnation is not None:
        raise CLIError("--incarnation goes with --drop", USAGE)
    async with reading(path) as journal:
        with journal.reader() as r:
            row = find_instance(r, address, path)
            if args.dropped:
                letters = read_dead(r, iid)[1]
                doc: dict[str, Any] = {"address": address, "dropped": [_letter(d) for d in letters]}
            else:
                entries = r.entries(iid, row.record.run) if row.status == "failed" else {}
                found, end = handling(entries), failed_at(entries)
                doc = {
                    "address": address,
                    "status": row.status,
                    "incarnation": row.record.incarnation,
                    "unread": [_message(m) for m in read_mail(r, iid)],
                    "handling": None if found is None else _message(found[1]),
                    "failed_at": None if end is None else end.as_dict(),
                }

    def render() -> str:
        if args.dropped:
            lines = [f"{address}: {len(doc['dropped'])} dropped message(s)"]
            for d in doc["dropped"]:
                lines.append(
                    _line(d) + f"  (dropped {local_time(d['dropped'])}, "
                    f"incarnation {d['incarnation']})"
                )
            return "\n".join(lines)
        lines = [
            f"{address} ({doc['status']}, incarnation {doc['incarnation']}): "
            f"{len(doc['unread'])} unread message(s)"
        ]
        lines += [_line(m) for m in doc["unread"]]
        if doc["failed_at"] is not None:
            lines.append(f"it failed at {doc['failed_at']['label']}")
        if doc["handling"] is not None:
            lines.append("it failed while handling:")
            lines.append(_line(doc["handling"]))
            lines.append(
                f"  ('actors mail {address} --drop {doc['handling']['id']}' keeps a fork "
                "from giving it to the process again)"
            )
        return "\n".join(lines)

    emit(args, doc, render)
    return OK


async def _drop(args: argparse.Namespace, path: Any, address: str, iid: bytes) -> int:
    held: JournalLocked | None = None
    try:
        async with writing_at(path) as journal:
            with journal.reader() as r:
                plan = read_for_drop(r, iid, args.drop)
            got = Claimed(None)
            if plan is not None and plan.row.status in LIVE_STATUSES:
                # Invariant (as `ActorSystem.drop_message`'s): a drop of a live
                # instance is written only under this command's claim, for a
                # node that runs it holds its mail in memory and would take
                # the message; a claim refused (another live node runs it)
                # refuses the drop. What an earlier owner wrote: read again.
                got = await claim(journal, iid)
                if got.owner is not None:
                    raise CLIError(
                        f"cannot drop message #{args.drop} of {address!r} from the command "
                        f"line: node {got.owner!r} runs it (it owns the instance and its lease "
                        "is held), and could take the message meanwhile; drop it through that "
                        f"node (system.drop_message({address!r}, {args.drop}) there)"
                    )
                with journal.reader() as r:
                    plan = read_for_drop(r, iid, args.drop)
            if plan is None:
                raise CLIError(
                    f"no instance at {address!r} in {path}; check the address", NOT_FOUND
                )
            now = plan.row.record.incarnation
            if args.incarnation is not None and args.incarnation != now:
                raise CLIError(
                    f"cannot drop message #{args.drop} of incarnation {args.incarnation} of "
                    f"{address!r}: it is incarnation {now} now (a retry or fork numbered its "
                    f"mail anew); list it again ('actors mail {address}') and drop by the new id"
                )
            why = drop_refusal(address, plan, args.drop)
            if why is not None:
                raise CLIError(why, NOT_FOUND)
            txn = drop_txn(plan, args.drop, time.time())
            got.fence(txn, iid)
            try:
                await journal.commit(txn, durable=True)
            except Conflict as exc:  # (a shared journal: it was taken, or taken over)
                raise CLIError(f"not dropped: {exc}; try again") from None
            message = plan.unread or plan.handled
            assert message is not None
            dropped = _message(message)
    except JournalLocked as exc:
        held = exc
        assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
        dropped = await through_system(
            path,
            held,
            "drop_message",
            doing=f"drop a message of {address!r}",
            instead="system.drop_message(...)",
            address=address,
            message_id=args.drop,
            **({} if args.incarnation is None else {"incarnation": args.incarnation}),
        )
    doc = {"address": address, "dropped": dropped, "through_system": held is not None}

    def render() -> str:
        via = f" through {owner(held)}" if held is not None else ""
        return (
            f"dropped message #{dropped['id']} ({dropped['signal']}) of {address}{via}; "
            f"'actors mail {address} --dropped' lists it"
        )

    emit(args, doc, render)
    return OK
