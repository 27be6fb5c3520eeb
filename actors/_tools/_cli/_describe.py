"""One instance as one document (`describe`): everything recorded about
it, which ``actors show`` prints (`_show`) and the web inspector's instance
page shows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storage import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    InstanceRow,
    Reader,
    instance_id,
)
from storage.errors import JournalCorrupt

from .._admin import (
    LogEntry,
    StoredMessage,
    children_named,
    read_dead,
    sent_keys,
    user_cursors,
)
from ._errors import CORRUPT, CLIError
from ._records import error_text, failed_at_of, handling_of, signal_label
from ._render import compact

__all__ = ["describe"]


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
