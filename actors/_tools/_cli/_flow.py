"""``actors schedules`` and ``actors queues``: the schedules and queues a
journal holds (state rows, see `storage._states`), read without a system."""

from __future__ import annotations

import argparse
import time
from typing import Any

from .._admin import tick_text, ticks_after, wait_prefix
from ._access import journal_at, reading
from ._errors import OK
from ._render import emit


async def schedules(args: argparse.Namespace) -> int:
    """``actors schedules``: each schedule, paused or not, its last and next tick."""
    async with reading(journal_at(args)) as journal:
        with journal.reader() as r:
            rows = r.states("schedule/")
    items: list[dict[str, Any]] = []
    for row in rows:
        value = row.value
        following = None if value["paused"] else tick_text(next(ticks_after(value, value["last"])))
        items.append(
            {
                "name": row.key[len("schedule/") :],
                "process": value["process"],
                "cron": value.get("cron"),
                "every": value.get("every"),
                "paused": value["paused"],
                "overlap": value["overlap"],
                "last_tick": value.get("last_tick"),
                "last_started": value.get("latest"),
                "next_tick": following,
            }
        )

    def render() -> str:
        if not items:
            return "no schedules"
        lines = []
        for i in items:
            when = i["cron"] or f"every {i['every']:g} s"
            state = "paused" if i["paused"] else f"next {i['next_tick']}"
            lines.append(
                f"{i['name']:<20} {i['process']:<28} {when:<16} {state}  "
                f"last {i['last_tick'] or '-'}"
            )
        return "\n".join(lines)

    emit(args, {"schedules": items}, render)
    return OK


async def queues(args: argparse.Namespace) -> int:
    """``actors queues``: each queue's depth, holders and oldest wait."""
    now = time.time()
    async with reading(journal_at(args)) as journal:
        with journal.reader() as r:
            held = {row.key[len("queue/") :]: row.value for row in r.states("queue/")}
            waiting = {name: r.states(wait_prefix(name)) for name in held}
            for row in r.states("queue-wait/"):
                name = row.key.split("/")[1]
                if name not in waiting:
                    waiting[name] = r.states(wait_prefix(name))
    items = []
    for name in sorted(waiting):
        rows = waiting[name]
        oldest = min((row.value["at"] for row in rows), default=None)
        items.append(
            {
                "name": name,
                "waiting": len(rows),
                "running": len(held.get(name, {}).get("held", {})),
                "oldest_wait": None if oldest is None else max(0.0, now - oldest),
            }
        )

    def render() -> str:
        if not items:
            return "no queues"
        return "\n".join(
            f"{i['name']:<20} waiting {i['waiting']:>6}  running {i['running']:>4}  "
            + ("" if i["oldest_wait"] is None else f"oldest waits {i['oldest_wait']:.1f} s")
            for i in items
        )

    emit(args, {"queues": items}, render)
    return OK
