"""What each of the inspector's actions says will happen, in sentences,
on its confirmation page (from the instance's `describe` document and the
form's fields); `_actions` is the table of actions."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from storage import UNFINISHED_STATUSES

from .._cli._render import compact, counted

__all__ = [
    "Fields",
    "abandon_says",
    "cancel_says",
    "compensate_says",
    "drop_says",
    "fork_says",
    "resume_says",
    "retry_says",
    "send_says",
]

Fields = Mapping[str, str]


def _descendants(doc: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(nodes: list[dict[str, Any]]) -> None:
        for node in nodes:
            if node["status"] in UNFINISHED_STATUSES:
                walk(node["children"])
                found.append(node["address"])

    walk(doc["children"])
    return found


def _pending(doc: dict[str, Any]) -> list[str]:
    return [str(c["step"]) for c in doc["compensations"] if c["state"] != "done"]


def _live_part(doc: dict[str, Any]) -> list[str]:
    kids = _descendants(doc)
    if not kids:
        return []
    return [
        f"Its {counted(len(kids), 'live descendant')} end cancelled too, children "
        f"first: {', '.join(kids)}."
    ]


def cancel_says(doc: dict[str, Any], f: Fields) -> list[str]:
    out = [
        f"Cancels {doc['address']} (now {doc['status']}): it ends cancelled and never "
        "runs again (a retry or a new start makes a new incarnation)."
    ]
    out += _live_part(doc)
    pending = _pending(doc)
    if pending:
        out.append(
            f"Its {counted(len(pending), 'saga compensation')} ({', '.join(pending)}) "
            "do NOT run: what its steps did stays done. Cancel with compensation to "
            "undo them first."
        )
    else:
        out.append("It has no saga compensations pending.")
    return out


def compensate_says(doc: dict[str, Any], f: Fields) -> list[str]:
    pending = _pending(doc)
    out = [f"Cancels {doc['address']} (now {doc['status']}) after running its saga compensations."]
    if pending:
        out.append(
            f"Its {counted(len(pending), 'compensation')} run first, newest first: "
            f"{', '.join(reversed(pending))}; then it ends cancelled. With no system "
            "running, they run when a system that runs its process next opens the "
            "journal."
        )
    else:
        out.append("It has no compensations pending, so this is a plain cancel.")
    out += _live_part(doc)
    if _descendants(doc):
        out.append(
            "A descendant's own compensations are not run by this cancel: the "
            "command refuses while any are pending."
        )
    return out


def retry_says(doc: dict[str, Any], f: Fields) -> list[str]:
    n = doc["incarnation"]
    given = f.get("input", "")
    with_input = (
        f"this input instead of the one it had: {compact(json.loads(given), 300)}"
        if given
        else "the input it had"
    )
    return [
        f"Runs {doc['address']} (now {doc['status']}, incarnation {n}) again from the top, "
        f"as incarnation {n + 1}, with the same params and {with_input}.",
        f"The record of incarnation {n} is kept ('actors show {doc['address']} "
        f"--incarnation {n}'); failed descendants are reset and start afresh.",
    ]


def fork_says(doc: dict[str, Any], f: Fields) -> list[str]:
    # As `actors._system._fork` numbers it: the fork keeps positions 1 to ``from``.
    at = int(f["from"])
    kept = [i for i in doc["log"] if i["seq"] <= at]
    dropped = [i for i in doc["log"] if i["seq"] > at]
    target = f.get("to") or doc["address"]
    names = ", ".join(f"#{i['seq']} {i['kind']} {i['name']}".rstrip() for i in kept[:12])
    more = f" and {len(kept) - 12} more" if len(kept) > 12 else ""
    source = (
        f"its run {doc['run']}"
        if target == doc["address"]
        else f"run {doc['run']} of {doc['address']}"
    )
    return [
        f"Makes a new incarnation of {target} from {source} (now {doc['status']}): it "
        f"keeps {counted(len(kept), 'log entry', 'log entries')}"
        + (f" ({names}{more})" if kept else "")
        + ", whose recorded outcomes are not repeated (a step among them does not run "
        f"again), and runs on after entry #{at} with the current code.",
        f"{counted(len(dropped), 'later entry', 'later entries')} "
        f"{'is' if len(dropped) == 1 else 'are'} discarded and run again: messages they "
        "took are put back in its mail, children they made start afresh; compensations "
        "of kept steps are kept.",
        "Refused if the kept entries do not replay on the current code, or if a kept "
        "step's compensation already ran (fork from before it).",
    ]


def send_says(doc: dict[str, Any], f: Fields) -> list[str]:
    payload = json.loads(f["payload"]) if f.get("payload") else None
    key = f.get("key")
    out = [
        f"Puts the message {f['signal']!r} with payload {compact(payload, 300)} in the "
        f"mailbox of {doc['address']} (now {doc['status']}), durably; it takes it when it "
        "next waits for that signal."
    ]
    if key:
        out.append(
            f"With key {key!r}: if this incarnation had that key already, nothing is stored."
        )
    return out


def drop_says(doc: dict[str, Any], f: Fields) -> list[str]:
    seq = int(f["message"])
    poison = doc.get("handling") or {}
    found = next((m for m in doc["mailbox"] if m["seq"] == seq), None)
    if found is None and poison.get("seq") == seq:
        found, where = poison, "the message its failed run was handling"
    else:
        where = f"the unread mail of {doc['address']}"
    what = (
        f"{found['signal']!r}, payload {compact(found['payload'], 300)}"
        if found
        else "not among its unread messages now"
    )
    return [
        f"Removes message #{seq} ({what}) from {where} (now {doc['status']}): the "
        "instance never takes it, and a fork does not put it back.",
        "It is kept in the instance's dead-letter list ('actors mail "
        f"{doc['address']} --dropped') until a cleanup removes the instance.",
    ]


def resume_says(doc: dict[str, Any], f: Fields) -> list[str]:
    pending = _pending(doc)
    return [
        f"Retries the stuck compensation of {doc['address']} where it stopped; "
        f"{counted(len(pending), 'compensation')} left to run, newest first: "
        f"{', '.join(reversed(pending)) or 'none'}.",
        "It is running again (with no system running, once one that runs its process "
        "opens the journal); if the cause is not fixed it parks again.",
    ]


def abandon_says(doc: dict[str, Any], f: Fields) -> list[str]:
    pending = _pending(doc)
    return [
        f"Ends {doc['address']} failed, now, without running the rest of its "
        f"compensations: {', '.join(pending) or 'none'} never run.",
        "What those steps did stays done; undo it by hand if it must be undone.",
    ]
