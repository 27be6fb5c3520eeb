"""Reading commands: ``list`` and ``stats`` (``show`` is `_show`'s).

Each opens the journal read-only (no owner lock, nothing written), so it
works beside a system running on the journal in another process, and builds
one document that `_render` prints as JSON or as text.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

from storage import (
    LIVE_STATUSES,
    STATUSES,
    CorruptRecord,
    InstanceRow,
    LMDBJournal,
    Reader,
)
from storage.errors import JournalCorrupt

from ._access import journal_at, reading, under
from ._errors import OK
from ._records import error_text
from ._render import emit, local_time, plural, relative, size_text, table, zone_name

__all__ = ["list_instances", "list_item", "list_items", "stats"]

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
