"""Reading commands: ``list``, ``show`` and ``stats``.

Each opens the journal read-only (no owner lock, nothing written), so it
works beside a system running on the journal in another process, and builds
one document that `_render` prints as JSON or as text.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storage import (
    LIVE_STATUSES,
    STATUSES,
    TERMINAL_STATUSES,
    UNFINISHED_STATUSES,
    CorruptRecord,
    InstanceRow,
    LMDBJournal,
    Reader,
    instance_id,
)
from storage.errors import JournalCorrupt

from .._admin import (
    LogEntry,
    StoredMessage,
    children_named,
    failed_at,
    handling,
    queue_place,
    read_dead,
    sent_keys,
    user_cursors,
)
from ._access import find_instance, journal_at, reading
from ._errors import CORRUPT, OK, CLIError
from ._render import (
    compact,
    emit,
    error_text,
    local_time,
    plural,
    relative,
    render_show,
    signal_label,
    size_text,
    table,
    zone_name,
)

__all__ = [
    "describe",
    "failed_at_of",
    "handling_of",
    "list_instances",
    "list_item",
    "list_items",
    "show",
    "stats",
    "under",
]

_FAR = 100 * 365 * 86400.0  # past every timer: `stats` counts them all


# -- list ---------------------------------------------------------------------------


def _detail(row: InstanceRow) -> str:
    record = row.record
    if record.held and row.status in LIVE_STATUSES:
        return f"stuck: {record.held}"  # what keeps it from running, in a few words
    if record.last_error:
        text = str(record.last_error)
    elif row.status == "failed":
        text = error_text(record.error)
    elif row.status == "cancelled" and record.reason:
        text = f"reason: {record.reason}"
    else:
        return ""
    # The row names the instance already; say the rest sooner.
    return text.replace(f"instance {row.address!r} ", "").replace(f" (of {row.address!r})", "")


def list_item(row: InstanceRow | CorruptRecord) -> dict[str, Any]:
    if isinstance(row, CorruptRecord):
        return {
            "address": row.address or f"? {row.iid.hex()}",
            "process": row.process,
            "status": row.status,
            "created": None,
            "updated": None,
            "last_error": None,
            "detail": str(row.error),
            "corrupt": True,
        }
    record = row.record
    return {
        "address": row.address,
        "process": row.process,
        "status": row.status,
        "created": record.created,
        "updated": record.updated,
        "last_error": record.last_error,
        "detail": _detail(row),
        "corrupt": False,
    }


def list_items(
    r: Reader, status: str | None, process: str | None, prefix: str | None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The instances matching the filters, most recently updated first, and
    the counts by status of all; for ``list`` and the web inspector."""
    # A record that does not decode is listed too, as its indexes say.
    broken: list[CorruptRecord] = []
    rows: list[InstanceRow | CorruptRecord] = list(r.instances(status, process, corrupt=broken))
    items = sorted(
        (list_item(row) for row in rows + broken if under(row.address, prefix)),
        key=lambda i: (-(i["updated"] or 0), i["address"]),
    )
    return items, r.count_by_status()


async def list_instances(args: argparse.Namespace) -> int:
    """``actors list``: instances, most recently updated first."""
    path = journal_at(args)
    async with reading(path) as journal:
        with journal.reader() as r:
            items, counts = list_items(r, args.status, args.process, args.prefix)
    shown = items if args.limit <= 0 else items[: args.limit]
    doc: dict[str, Any] = {
        "journal": str(path),
        "total": sum(counts.values()),
        "matching": len(items),
        "shown": len(shown),
        "counts": {s: counts[s] for s in STATUSES if s in counts},
        "instances": shown,
    }

    def render() -> str:
        headers = ["ADDRESS", "PROCESS", "STATUS", f"UPDATED ({zone_name()})", "DETAIL"]
        cells = [
            [i["address"], i["process"], i["status"], local_time(i["updated"]), i["detail"] or ""]
            for i in shown
        ]
        lines = table(headers, cells) if shown else ["no instances match"]
        filters = " ".join(
            f"--{name} {value}"
            for name, value in (
                ("status", args.status),
                ("process", args.process),
                ("prefix", args.prefix),
            )
            if value
        )
        matching = plural(len(items), "instance") + (f" matching {filters}" if filters else "")
        if len(shown) < len(items):
            lines.append(
                f"showing the {len(shown)} most recently updated of {matching} "
                "(--limit N for more, 0 for all)"
            )
        by_status = ", ".join(f"{n} {s}" for s, n in doc["counts"].items())
        lines.append(f"{plural(doc['total'], 'instance')} in {path}: {by_status or 'none'}")
        return "\n".join(lines)

    emit(args, doc, render)
    return OK


def under(address: str | None, prefix: str | None) -> bool:
    """Whether ``address`` is ``prefix`` or below it (``prefix/...``)."""
    if not prefix:
        return True
    if address is None:
        return False
    top = prefix.rstrip("/")
    return address == top or address.startswith(top + "/")


# -- show ---------------------------------------------------------------------------


def _log_item(seq: int, entry: dict[str, Any], ended: bool, armed: set[int]) -> dict[str, Any]:
    kind = entry.get("k")
    item: dict[str, Any] = {"seq": seq, "kind": kind, "name": entry.get("n") or ""}
    if kind == "wait":
        item["name"] = ",".join(signal_label(n) for n in str(item["name"]).split(","))
        # A receive's entry is stored as a wait (replay matches the kind)
        # holding the signal it took ("s"), which a wait's never holds: every
        # version has written it so (replay gives a receive its signal from
        # it), so the label is right for any journal and costs no write.
        if "s" in entry:
            item["kind"] = "receive"
    for field, key in (
        ("attempt", "a"),
        ("failures", "f"),
        ("key", "key"),
        ("due", "due"),
        ("message", "m"),
        ("child", "child"),
        ("signal", "s"),
    ):
        if key in entry:
            item[field] = entry[key]
    if "e" in entry:
        item["state"], item["error"] = "failed", entry["e"]
        item["outcome"] = f"failed: {error_text(entry['e'])}"
    elif "v" in entry:
        item["state"], item["value"] = "done", entry["v"]
        item["outcome"] = _done_outcome(kind, entry)
    elif ended:  # the instance finished first: nothing is pending any more
        item["state"] = "unfinished"
        item["outcome"] = {
            "step": f"attempt {entry.get('a', '?')} started, never finished",
            "sleep": "not fired (the instance ended first)",
            "call": "the instance ended first",
        }.get(kind or "", "never finished")
    elif kind == "sleep" and seq not in armed:
        # Invariant: a timer's row is deleted in the transaction that logs
        # its outcome, or the outcome of the race it lost; so a sleep with
        # neither an outcome nor a row lost a race, and waits for nothing.
        item["state"] = "lost"
        item["outcome"] = "not pending: it lost a race"
    else:
        item["state"] = "started"
        item["outcome"] = {
            "step": f"attempt {entry.get('a', '?')} started, no outcome yet",
            "sleep": "pending",
            "call": "waiting for the child",
        }.get(kind or "", "started")
    return item


def _waiting(doc: dict[str, Any]) -> dict[str, Any]:
    """What an unfinished instance waits for now, as far as its journal
    says: the armed timers and the unfinished children of effects without
    an outcome (not those of a race it decided already: their timers are
    gone, their children cancelled). A wait for a signal is logged only
    once one is taken, so the signals it waits for are not known; the
    unread mail is what it has not taken."""
    log = doc["log"]
    live = {n["address"] for n in doc["children"] if n["status"] in UNFINISHED_STATUSES}
    return {
        "timers": [
            {"seq": i["seq"], "due": i.get("due")}
            for i in log
            if i["kind"] == "sleep" and i["state"] == "started"
        ],
        "children": [
            {"seq": i["seq"], "address": i["name"]}
            for i in log
            if i["kind"] == "call" and i["state"] == "started" and i["name"] in live
        ],
        "unread_signals": sorted({m["signal"] for m in doc["mailbox"]}),
    }


def _done_outcome(kind: Any, entry: dict[str, Any]) -> str:
    named = {"sleep": "fired", "spawn": "spawned", "emit": "emitted", "publish": "published"}
    if kind in named:
        return named[kind]
    value = compact(entry["v"], 60)
    if kind == "call":
        return f"child completed: {value}"
    if "s" in entry:
        return f"got {signal_label(entry['s'])}: {value}"
    return f"got: {value}" if kind == "wait" else f"ok: {value}"


def _children(r: Reader, log: dict[int, LogEntry], seen: set[bytes]) -> list[dict[str, Any]]:
    """The children a run's log names (call/spawn), each with its own, recursively."""
    nodes = []
    for address, seq in children_named(log).items():
        node: dict[str, Any] = {
            "address": address,
            "how": log[seq].kind,
            "seq": seq,
            "status": "gone",
            "children": [],
        }
        iid = instance_id(address)
        if iid in seen:
            node["status"] = "(seen above)"
        else:
            seen.add(iid)
            try:
                row = r.instance(iid)
                if row is not None:
                    node["status"] = row.status
                    node["restart"] = row.record.restart
                    node["children"] = _children(r, r.entries(iid, row.record.run), seen)
            except JournalCorrupt:
                node["status"] = "corrupt"
        nodes.append(node)
    return nodes


def describe(r: Reader, row: InstanceRow, mail: tuple[int, int] | None = None) -> dict[str, Any]:
    """Everything recorded about the instance of ``row``; for ``show`` and the web
    inspector. ``mail`` (start, limit) keeps to that page of the unread mail
    (only its messages are decoded); ``mailbox_total`` counts them all.
    Raises `CLIError` (exit 5) when its log or mailbox does not decode."""
    iid, record = row.iid, row.record
    run = record.run
    try:
        log = r.log(iid, run)
        if mail is None:
            box = r.mailbox(iid)
            total = len(box)
        else:
            total, box = r.mailbox_page(iid, *mail)
    except JournalCorrupt as exc:
        raise CLIError(f"records of {row.address!r} are corrupt: {exc}", CORRUPT) from None
    length, cursors = r.stream_length(iid), r.cursors(iid)
    keys, cursors = sent_keys(cursors), user_cursors(cursors)
    ended = row.status in TERMINAL_STATUSES
    timers = r.timers(iid)
    armed = {t.seq for t in timers if t.run == run}
    return {
        "address": row.address,
        "process": row.process,
        "status": row.status,
        "id": iid.hex(),
        "run": run,
        "incarnation": record.incarnation,
        "owner": r.owner(iid),  # the node running it, on a journal nodes share
        **{key: getattr(record, key) for key in _SHOWN},
        "exports_version": record.exports_version or None,  # None: nothing published
        "params": record.params,
        "log": [_log_item(seq, entry, ended, armed) for seq, entry in sorted(log.items())],
        "older_runs_in_log": [x for x in r.log_runs(iid) if x != run],
        "mailbox": [_mail_item(seq, message) for seq, message in box],
        "mailbox_total": total,
        "messages_ever": r.last_message_seq(iid),
        "send_keys": keys,  # the idempotency keys this incarnation had (see send --key)
        "timers": [
            {"due": t.due, "run": t.run, "seq": t.seq, "stale": t.run != run} for t in timers
        ],
        "children": _children(r, r.entries(iid, run), {iid}),
        "stream": {
            "length": length,
            "consumers": {
                name: {"cursor": pos, "unread": max(0, length - pos)}
                for name, pos in sorted(cursors.items())
            },
        },
        "stuck": record.held if row.status in LIVE_STATUSES else None,
        "restarts": record.restarts,
        # The message a failed run was handling (its poison, if it crashed on
        # it past its restart limit), and the messages dropped from the address.
        "handling": handling_of(r, row),
        "failed_at": failed_at_of(r, row),
        "dead_letters": len(read_dead(r, iid)[1]),
        "compensations": _compensations(row),
        "compensations_fate": _compensations_fate(row),
        "compensation_failure": record.stuck,
    }


async def show(args: argparse.Namespace) -> int:
    """``actors show``: everything recorded about one instance."""
    path = journal_at(args)
    async with reading(path) as journal:
        with journal.reader() as r:
            row = find_instance(r, args.address, path)
            doc = describe(r, row)
            if row.status == "queued":  # which queue, since when
                doc["queued"] = queue_place(r, row.iid)
    if row.status in LIVE_STATUSES:
        doc["waiting"] = _waiting(doc)
    doc["log_entries"], doc["mailbox_messages"] = len(doc["log"]), len(doc["mailbox"])
    if args.limit:  # the latest effects, the oldest messages (taken first)
        doc["log"], doc["mailbox"] = doc["log"][-args.limit :], doc["mailbox"][: args.limit]
    emit(args, doc, lambda: "\n".join(render_show(doc, args.traceback)))
    return OK


# Record fields `show` passes through as they are.
_SHOWN = (
    "created",
    "updated",
    "parent",
    "awaited",
    "restart",
    "input",
    "result",
    "error",
    "last_error",
    "reason",
    "exports",
    "exports_version",
)


def handling_of(r: Reader, row: InstanceRow) -> dict[str, Any] | None:
    """The message a failed run of ``row``'s instance was handling (see `describe`)."""
    return _handling(r.entries(row.iid, row.record.run)) if row.status == "failed" else None


def failed_at_of(r: Reader, row: InstanceRow) -> dict[str, Any] | None:
    """The effect a failed run of ``row``'s instance stopped at, if one
    failed it (`actors._system._mail.failed_at`), for `describe`."""
    if row.status != "failed":
        return None
    found = failed_at(r.entries(row.iid, row.record.run))
    return None if found is None else found.as_dict()


def _handling(entries: dict[int, LogEntry]) -> dict[str, Any] | None:
    found = handling(entries)
    if found is None:
        return None
    effect, m = found
    return {"seq": m.id, "signal": m.signal, "payload": m.payload, "effect": effect}


def _mail_item(seq: int, stored: Any) -> dict[str, Any]:
    message = StoredMessage.from_stored(stored)
    return {
        "seq": seq,
        "signal": signal_label(message.signal),
        "payload": message.payload,
        "sent": message.sent_at,
    }


# What becomes of a compensation that has not run, by the instance's status:
# "registered" (live: it runs only if the instance fails, or on a cancel
# that compensates), "to run" (compensating now), "stuck" (the one that gave
# up) and "waiting" (those after it), "not run" (the instance ended without
# running it), "abandoned" (an operator ended the instance without it).
def _unrun_state(row: InstanceRow) -> str:
    record = row.record
    if row.status == "compensation_stuck":
        return "waiting"
    if row.status in TERMINAL_STATUSES:
        return "abandoned" if record.abandoned else "not run"
    return "to run" if record.failure is not None else "registered"


def _compensations(row: InstanceRow) -> list[dict[str, Any]]:
    record = row.record
    done = set(record.compensated)
    attempts: Mapping[Any, int] = record.comp_attempts  # looked up by ids that may be None
    unrun = _unrun_state(row)
    # Compensations run newest first: the one that gave up is the newest not done.
    stuck = (
        next((c.get("id") for c in reversed(record.compensations) if c.get("id") not in done), None)
        if row.status == "compensation_stuck"
        else None
    )
    return [
        {
            "step": c.get("name"),
            "function": c.get("fn"),
            "args": c.get("args"),
            "kwargs": c.get("kwargs"),
            "step_result": c.get("result"),
            "state": "done" if c.get("id") in done else "stuck" if c.get("id") == stuck else unrun,
            "attempts": attempts.get(c.get("id"), 0),
            "possibly_applied": c.get("possibly_applied"),
            "key": c.get("id"),
        }
        for c in record.compensations
    ]


def _compensations_fate(row: InstanceRow) -> str | None:
    """What has become, or will become, of the instance's compensations, in
    words (None without any): `show` and the web inspector print it."""
    record = row.record
    total = len(record.compensations)
    if not total:
        return None
    done = len(set(record.compensated) & {c.get("id") for c in record.compensations})
    left = total - done
    after = "the cancel" if record.failure_end == "cancelled" else "the failure"
    status = row.status
    if status == "compensation_stuck":
        return (
            f"stuck with {done} of {total} run, newest first, after {after}; "
            "resume-compensation retries it, abandon-compensation ends the instance "
            "failed without the rest"
        )
    if status in LIVE_STATUSES or status == "queued":
        if record.failure is not None:
            return f"running after {after}, newest first: {done} done, {left} to run"
        return "registered; run only if the instance fails (or is cancelled with --compensate)"
    if not left:
        ended = {"cancelled": "the cancel", "failed": "the failure"}.get(status, "the end")
        return f"all run, newest first, after {ended}"
    if record.abandoned:
        return f"abandoned by an operator: {left} of {total} never run"
    ended = {"completed": "completed", "cancelled": "was cancelled"}.get(status, status)
    ran = f"{done} run, {left} " if done else ""
    return f"{ran}not run: the instance {ended}" + (
        " (without --compensate)" if status == "cancelled" else ""
    )


# -- stats --------------------------------------------------------------------------


async def stats(args: argparse.Namespace) -> int:
    """``actors stats``: counts by status, size, mail, timers, and who holds the journal."""
    path = journal_at(args)
    now = time.time()
    async with reading(path) as journal:
        with journal.reader() as r:
            counts = r.count_by_status()
            with_mail = list(r.instances_with_mail())
            unread = 0
            for iid in with_mail:
                with contextlib.suppress(JournalCorrupt):
                    unread += len(r.mailbox(iid))
            due = len(r.due_timers(now, limit=1 << 62))
            timers = len(r.due_timers(now + _FAR, limit=1 << 62))
            next_due = r.next_due(now)
    size = disk = 0
    held: bool | None = None  # on PostgreSQL: nodes share it, none holds it
    pid = None
    if isinstance(path, Path):
        st = (path / "data.mdb").stat()
        size, disk = st.st_size, st.st_blocks * 512
        holder = LMDBJournal(path).holder()
        held, pid = holder.held, holder.pid
    doc: dict[str, Any] = {
        "journal": str(path),
        "size_bytes": size,
        "disk_bytes": disk,
        "held": held,
        "held_by_pid": pid,
        "instances": sum(counts.values()),
        "by_status": {s: counts[s] for s in STATUSES if s in counts},
        "with_mail": len(with_mail),
        "unread_messages": unread,
        "timers": timers,
        "due_timers": due,
        "next_due": next_due,
    }

    def render() -> str:
        owner = f", pid {pid}" if pid else ""
        names: dict[bool | None, str] = {
            True: f"a running system{owner}",
            False: "no running system",
        }
        lines = [f"journal       {path}"]
        if isinstance(path, Path):
            held_by = names.get(held, f"unknown (owner.lock names pid {pid})")
            size = f"{size_text(doc['size_bytes'])} ({size_text(doc['disk_bytes'])} on disk)"
            lines += [f"size          {size}", f"held by       {held_by}"]
        else:
            lines.append("held by       the nodes that share it ('actors list' names owners)")
        lines.append(f"instances     {doc['instances']}")
        lines += [f"  {s:<20}{n:>8}" for s, n in doc["by_status"].items()]
        lines.append(
            f"mail          {plural(unread, 'unread message')} in "
            f"{plural(len(with_mail), 'instance')}"
        )
        nxt = f"; next {local_time(next_due)} ({relative(next_due, now)})" if next_due else ""
        lines.append(f"timers        {timers}, {due} due now{nxt}")
        return "\n".join(lines)

    emit(args, doc, render)
    return OK
