"""The ``show`` command: everything recorded about one instance (the
document `_describe.describe` builds) as JSON or as text, and with
``--incarnation N`` the record a retry kept of an incarnation it replaced
(see `actors._system._retry`), or the instance as plain ``show`` prints it
when N is the current incarnation."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

from storage import LIVE_STATUSES, UNFINISHED_STATUSES, InstanceRow, instance_id

from .._admin import KEPT_INCARNATIONS, Kept, queue_place, read_kept
from ._access import find_instance, journal_at, reading
from ._describe import describe
from ._errors import NOT_FOUND, OK, CLIError
from ._records import error_text
from ._render import compact, counted, cut, emit, local_time, plural, relative, table, zone_name

__all__ = ["render_show", "show", "show_any"]


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


async def show_any(args: argparse.Namespace) -> int:
    """``actors show``: the instance, or with ``--incarnation N`` an earlier
    incarnation's kept record."""
    if args.incarnation is None:
        return await show(args)
    path = journal_at(args)
    iid = instance_id(args.address)
    async with reading(path) as journal:
        with journal.reader() as r:
            row: InstanceRow | None = r.instance(iid)
            _, kept = read_kept(r, iid)
    if row is not None and row.record.incarnation == args.incarnation:
        return await show(args)
    found = next((k for k in kept if k.incarnation == args.incarnation), None)
    if found is None:
        current = (
            f"the current one is {row.record.incarnation}"
            if row is not None
            else "no instance is there now"
        )
        have = ", ".join(str(k.incarnation) for k in kept) or "none"
        raise CLIError(
            f"incarnation {args.incarnation} of {args.address!r} is not kept ({current}; kept: "
            f"{have}); a retry keeps the record of the incarnation it replaces (the latest "
            f"{KEPT_INCARNATIONS} of an address) until a cleanup removes the address",
            NOT_FOUND,
        )
    doc = _kept_doc(args.address, found, row)
    emit(args, doc, lambda: "\n".join(_render_kept(doc, args.traceback)))
    return OK


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


def render_show(doc: dict[str, Any], traceback: bool) -> list[str]:
    """The lines of ``actors show`` for the document `show` built."""
    now = time.time()
    out = [f"{doc['address']}  ·  {doc['status']}"]

    def field(name: str, value: str) -> None:
        out.append(f"  {name:<14}{value}")

    field("process", doc["process"])
    field("params", compact(doc["params"], 200))
    field("input", compact(doc["input"], 200))
    if doc["status"] == "completed":
        field("result", compact(doc["result"], 400))
    if doc["error"]:
        field("error", error_text(doc["error"]))
        if doc["error"].get("summary") and "type" in doc["error"]:
            field("", str(doc["error"]["summary"]))
        trace = doc["error"].get("traceback")
        if trace and traceback:
            out.extend("    " + line for line in trace.rstrip().splitlines())
        elif trace:
            field("", "(--traceback shows where it was raised)")
    if doc.get("failed_at"):
        field("failed at", doc["failed_at"]["label"])
    if doc.get("queued"):
        place = doc["queued"]
        since = place["since"]
        field(
            "queued in",
            f"{place['queue']} (priority {place['priority']}) since "
            f"{local_time(since)} ({relative(since, now)})",
        )
    if doc["stuck"]:
        field("stuck", f"{doc['stuck']} (it runs again once fixed; last error says how)")
    if doc["last_error"]:
        field("last error", str(doc["last_error"]))
    if doc["reason"]:
        field("reason", str(doc["reason"]))
    field("run", f"{doc['run']} (incarnation {doc['incarnation']})")
    if doc.get("owner"):
        field("owner node", str(doc["owner"]))
    zone = zone_name(doc["created"])
    field("created", f"{local_time(doc['created'])} {zone} ({relative(doc['created'], now)})")
    field("updated", f"{local_time(doc['updated'])} {zone} ({relative(doc['updated'], now)})")
    if doc["parent"]:
        how = "awaited by" if doc["awaited"] else "child of"
        field("parent", f"{how} {doc['parent']} (restart: {doc['restart'] or 'temporary'})")
    field("id", doc["id"])

    log = doc["log"]
    out.append("")
    shown = _shown(len(log), doc["log_entries"], "last")
    out.append(
        f"Effect log, run {doc['run']}: {counted(doc['log_entries'], 'entry', 'entries')}{shown}"
    )
    if log:
        rows = [
            [
                str(i["seq"]),
                str(i["kind"]),
                cut(str(i["name"]), 40),
                str(i.get("attempt", "")),
                i["outcome"],
                _log_detail(i, now),
            ]
            for i in log
        ]
        cells = [[r[0], r[1], r[2], r[3], cut(r[4], 70), r[5]] for r in rows]
        out.extend(table(["SEQ", "KIND", "NAME", "ATT", "OUTCOME", "DETAIL"], cells, "  "))
    if doc["older_runs_in_log"]:
        out.append(f"  (entries of older runs remain: {doc['older_runs_in_log']})")

    if "waiting" in doc:
        out.extend(_waiting_lines(doc["waiting"], now))

    out.append("")
    mail = doc["mailbox"]
    ever = f" ({doc['messages_ever']} received in all)" if doc["messages_ever"] else ""
    shown = _shown(len(mail), doc["mailbox_messages"], "first")
    out.append(f"Mailbox: {counted(doc['mailbox_messages'], 'unread message')}{ever}{shown}")
    for m in mail:
        out.append(
            f"  #{m['seq']:<4} {m['signal']}  sent {local_time(m['sent'])}  {compact(m['payload'], 80)}"
        )

    poison = doc.get("handling")
    if poison is not None:
        crashes = f", after {counted(len(doc['restarts']), 'restart')}" if doc["restarts"] else ""
        out.append(
            f"  failed while handling #{poison['seq']} {poison['signal']} (taken at effect "
            f"#{poison['effect']}{crashes})  {compact(poison['payload'], 80)}"
        )
    if doc.get("dead_letters"):
        out.append(
            f"  dropped: {counted(doc['dead_letters'], 'message')} ('actors mail "
            f"{doc['address']} --dropped')"
        )
    out.append(f"Timers: {counted(len(doc['timers']), 'timer')}")
    for t in doc["timers"]:
        stale = f"  (left by run {t['run']})" if t["stale"] else ""
        out.append(
            f"  due {local_time(t['due'])} ({relative(t['due'], now)})  effect #{t['seq']}{stale}"
        )

    out.append(f"Children: {counted(len(doc['children']), 'child', 'children')}")
    out.extend(_tree(doc["children"]))

    stream = doc["stream"]
    consumers = len(stream["consumers"])
    if stream["length"] or consumers:
        out.append(
            f"Stream: {plural(stream['length'], 'value')}, "
            f"{consumers or 'no'} consumer{'' if consumers == 1 else 's'}"
        )
    else:
        out.append("Stream: none")
    for name, c in stream["consumers"].items():
        out.append(f"  {name}: cursor {c['cursor']} ({c['unread']} unread)")

    out.append(f"Restarts: {counted(len(doc['restarts']), 'restart')}")
    for r in doc["restarts"]:
        out.append(f"  {local_time(r.get('at'))}  {r.get('reason')}")
    if doc["exports_version"] is not None:
        out.append(f"Exports (version {doc['exports_version']}): {compact(doc['exports'], 200)}")
    comps = doc["compensations"]
    if comps:
        out.append(f"Compensations: {len(comps)} — {doc['compensations_fate']}")
        for c in comps:
            maybe = ", step may have applied" if c["possibly_applied"] else ""
            out.append(
                f"  {c['state']:<10} {c['step']} -> {c['function']}  "
                f"attempts {c['attempts']}{maybe}"
            )
        if doc["compensation_failure"]:
            out.append(f"  stuck on: {error_text(doc['compensation_failure'])}")
    return out


def _log_detail(item: dict[str, Any], now: float) -> str:
    parts = []
    if item.get("failures"):
        parts.append(plural(item["failures"], "failed attempt"))
    if "due" in item:
        parts.append(f"due {local_time(item['due'])} ({relative(item['due'], now)})")
    if "message" in item:
        parts.append(f"message #{item['message']}")
    if "key" in item:
        parts.append(f"key {item['key']}")
    return ", ".join(parts)


def _tree(nodes: list[dict[str, Any]], prefix: str = "  ") -> Iterator[str]:
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        yield f"{prefix}{'└─' if last else '├─'} {node['address']}  {node['status']}  " + (
            f"({node['how']} #{node['seq']})"
        )
        yield from _tree(node["children"], prefix + ("   " if last else "│  "))


def _shown(shown: int, total: int, which: str) -> str:
    return f" (the {which} {shown} shown; --limit 0 for all)" if shown < total else ""


def _waiting_lines(waiting: dict[str, Any], now: float) -> list[str]:
    """What a live instance waits for, as far as the journal knows."""
    lines = [
        f"  timer #{t['seq']}, due {local_time(t['due'])} ({relative(t['due'], now)})"
        for t in waiting["timers"]
    ]
    lines += [f"  child {c['address']} to end (call #{c['seq']})" for c in waiting["children"]]
    # A wait for a signal is logged when a message is taken, not before.
    unread = waiting["unread_signals"]
    tail = f" (unread mail: {', '.join(unread)})" if unread else ""
    lines.append(f"  a signal, perhaps: the journal names one only once it is taken{tail}")
    return ["", "Waiting for (as far as the journal records):", *lines]


def _kept_doc(address: str, kept: Kept, row: InstanceRow | None) -> dict[str, Any]:
    record = kept.record
    return {
        "address": address,
        "process": kept.process,
        "status": kept.status,
        "incarnation": kept.incarnation,
        "kept": True,
        "replaced": kept.replaced,
        "current_incarnation": row.record.incarnation if row is not None else None,
        "run": record.run,
        "created": record.created,
        "updated": record.updated,
        "parent": record.parent,
        "params": record.params,
        "input": record.input,
        "result": record.result,
        "error": record.error,
        "reason": record.reason,
        "last_error": record.last_error,
        "restarts": record.restarts,
        "compensations": [
            {
                "step": c.get("name"),
                "state": "done" if c.get("id") in record.compensated else "pending",
            }
            for c in record.compensations
        ],
    }


def _render_kept(doc: dict[str, Any], traceback: bool) -> list[str]:
    now = time.time()
    out = [
        f"{doc['address']}  ·  incarnation {doc['incarnation']}  ·  {doc['status']}  "
        "(kept: a retry replaced it)"
    ]

    def field(name: str, value: str) -> None:
        out.append(f"  {name:<14}{value}")

    field("process", doc["process"])
    field("params", compact(doc["params"], 200))
    field("input", compact(doc["input"], 200))
    if doc["error"]:
        field("error", error_text(doc["error"]))
        trace = doc["error"].get("traceback")
        if trace and traceback:
            out.extend("    " + line for line in trace.rstrip().splitlines())
        elif trace:
            field("", "(--traceback shows where it was raised)")
    for name in ("reason", "last_error"):
        if doc[name]:
            field(name.replace("_", " "), str(doc[name]))
    field("run", str(doc["run"]))
    zone = zone_name(doc["created"])
    for name in ("created", "updated", "replaced"):
        field(name, f"{local_time(doc[name])} {zone} ({relative(doc[name], now)})")
    current = doc["current_incarnation"]
    field("current", f"incarnation {current}" if current is not None else "no instance")
    out.append(f"Restarts: {counted(len(doc['restarts']), 'restart')}")
    for r in doc["restarts"]:
        out.append(f"  {local_time(r.get('at'))}  {r.get('reason')}")
    if doc["compensations"]:
        out.append(
            "Compensations: "
            + ", ".join(f"{c['step']} ({c['state']})" for c in doc["compensations"])
        )
    return out
