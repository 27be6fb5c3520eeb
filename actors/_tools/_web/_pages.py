"""The inspector's HTML: an instance's page and problem pages (the list is
`_list_page`'s; the building blocks, the layout included, `_html`'s).

Every value that comes from the journal (addresses, payloads, errors, names)
is user data and goes through `esc` or `value_block`; nothing else builds
markup from it. Each page is a layout around a ``<main id="live">`` whose
content is also served alone (``partial=1``) for the polling script.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Collection
from typing import Any

from storage import TERMINAL_STATUSES

from .._cli._records import error_text
from .._cli._render import counted, jsonable, relative, zone_name
from ._html import (
    badge,
    confirm_href as confirm_href,
    esc as esc,
    layout as layout,
    value_block as value_block,
    value_body as value_body,
    when,
)
from ._query import (
    MAIL_PER_PAGE,
    InstanceQuery,
    instance_href,
    value_href,
)

__all__ = [
    "confirm_href",
    "esc",
    "instance_fragment",
    "layout",
    "problem_page",
    "value_block",
    "value_body",
]


# -- an instance --------------------------------------------------------------------


def _facts(pairs: list[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def _table(id_: str, headers: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted" id="{id_}">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{id_}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _link(address: str) -> str:
    return f'<a class="mono" href="{esc(instance_href(address))}">{esc(address)}</a>'


def _tree(nodes: list[dict[str, Any]]) -> str:
    if not nodes:
        return ""
    items = []
    for node in nodes:
        restart = (
            f' <span class="muted">restart: {esc(node["restart"])}</span>'
            if node.get("restart")
            else ""
        )
        items.append(
            f"<li>{_link(node['address'])} {badge(node['status'])} "
            f'<span class="muted">({esc(node["how"])} #{esc(node["seq"])})</span>{restart}'
            f"{_tree(node['children'])}</li>"
        )
    return f'<ul class="tree">{"".join(items)}</ul>'


def _error(error: Any, name: str) -> str:
    if not error:
        return ""
    out = f'<p class="error">{esc(error_text(error))}</p>'
    if isinstance(error, dict):
        if error.get("summary") and "type" in error:
            out += f"<p>{esc(error['summary'])}</p>"
        if error.get("traceback"):
            out += (
                f'<details id="{name}-trace" open><summary>traceback</summary>'
                f'<pre class="trace">{esc(error["traceback"])}</pre></details>'
            )
    return out


def _whole(item: dict[str, Any], address: str) -> str:
    """The entry's whole value, or its error with its summary and traceback,
    folded under its outcome line (which cuts a value at 60 characters)."""
    fold = ""
    if "value" in item and len(json.dumps(jsonable(item["value"]), ensure_ascii=False)) > 50:
        fold = value_block(item["value"], value_href(address, "log", seq=item["seq"]))
    error = item.get("error")
    if isinstance(error, dict):
        if len(error_text(error)) > 60 or error.get("traceback") or error.get("summary"):
            words = "\n".join(w for w in (error_text(error), error.get("summary")) if w)
            fold = f'<pre class="value">{esc(words)}</pre>'
        if error.get("traceback"):
            fold += f'<pre class="trace">{esc(error["traceback"])}</pre>'
    if not fold:
        return ""
    return f'<details id="entry-{esc(item["seq"])}"><summary>whole</summary>{fold}</details>'


def _log(doc: dict[str, Any], query: InstanceQuery, now: float, fork: bool) -> str:
    log = doc["log"]
    pages = max(1, math.ceil(len(log) / query.per))
    shown = log[(query.logpage - 1) * query.per : query.logpage * query.per]
    rows = []
    for item in shown:
        detail = []
        if item.get("failures"):
            detail.append(f"{esc(item['failures'])} failed attempt(s)")
        if "due" in item:
            detail.append(f"due {when(item['due'], now)} ({esc(relative(item['due'], now))})")
        if "message" in item:
            detail.append(f"message #{esc(item['message'])}")
        if "child" in item:
            detail.append(f"child {_link(str(item['child']))}")
        if "key" in item:
            detail.append(f'key <span class="mono">{esc(item["key"])}</span>')
        cls = ' class="error"' if item["state"] == "failed" else ""
        row = [
            esc(item["seq"]),
            esc(item["kind"]),
            f'<span class="mono">{esc(item["name"])}</span>',
            esc(item.get("attempt", "")),
            f"<span{cls}>{esc(item['outcome'])}</span>{_whole(item, doc['address'])}",
            ", ".join(detail),
        ]
        if fork:
            there = confirm_href("fork", doc["address"], **{"from": item["seq"]})
            row.append(f'<a class="fork" href="{esc(there)}">fork after this…</a>')
        rows.append(row)
    headers = ["seq", "kind", "name", "attempt", "outcome", "detail"] + (["action"] if fork else [])
    out = _table("log", headers, rows, "no entries on this page" if log else "no entries yet")
    pager = []
    if log:
        entries = counted(len(log), "entry", "entries")
        pager.append(f"<span>{entries} · page {query.logpage} of {pages}</span>")

    def to(page: int) -> str:
        return esc(instance_href(doc["address"], page, query.per, query.mailpage))

    if query.logpage > 1:
        pager.append(f'<a href="{to(query.logpage - 1)}">← earlier</a>')
    if query.logpage < pages:
        pager.append(f'<a href="{to(query.logpage + 1)}">later →</a>')
    if doc["older_runs_in_log"]:
        pager.append(f"<span>entries of older runs remain: {esc(doc['older_runs_in_log'])}</span>")
    return out + f'<div class="pager">{"".join(pager)}</div>'


def instance_fragment(
    doc: dict[str, Any], query: InstanceQuery, actions: Collection[str] = ()
) -> str:
    """Everything `actors._tools._cli.describe` found about one instance, as
    sections; with ``actions`` (the names of the allowed ones), links to
    confirm a fork from a log entry and a drop of a message."""
    now = time.time()
    zone = zone_name(doc["created"])
    facts = [
        ("status", badge(doc["status"])),
        ("process", f'<span class="mono">{esc(doc["process"])}</span>'),
        ("run", f"{esc(doc['run'])} (incarnation {esc(doc['incarnation'])})"),
        (
            "created",
            f"{when(doc['created'], now)} {esc(zone)} ({esc(relative(doc['created'], now))})",
        ),
        (
            "updated",
            f"{when(doc['updated'], now)} {esc(zone)} ({esc(relative(doc['updated'], now))})",
        ),
        ("id", f'<span class="mono">{esc(doc["id"])}</span>'),
    ]
    if doc.get("owner"):  # a journal that nodes share: the node running it
        facts.append(("owner node", f'<span id="owner">{esc(doc["owner"])}</span>'))
    if doc["reason"]:
        facts.append(("reason", esc(doc["reason"])))
    if doc["stuck"]:
        facts.append(
            (
                "stuck",
                f'<span class="error" id="stuck">{esc(doc["stuck"])}</span> '
                "(it runs again once fixed; last error says how)",
            )
        )
    if doc["last_error"]:
        facts.append(("last error", f'<span class="error">{esc(doc["last_error"])}</span>'))
    out = [f'<h1 id="address">{esc(doc["address"])}</h1>', _facts(facts)]

    out.append('<div class="grid"><section><h2>Input</h2>')
    address = doc["address"]
    inputs = {"params": doc["params"], "input": doc["input"]}
    out.append(value_block(inputs, value_href(address, "input")))
    out.append("</section><section>")
    if doc["status"] == "completed":
        result = value_block(doc["result"], value_href(address, "result"))
        out.append(f'<h2>Result</h2><div id="result">{result}</div>')
    elif doc["error"]:
        out.append(f'<h2>Error</h2><div id="error">{_error(doc["error"], "error")}</div>')
        if doc.get(
            "failed_at"
        ):  # the effect that failed the run (see actors._system._mail.failed_at)
            out.append(
                f'<p class="error" id="failed-at">failed at {esc(doc["failed_at"]["label"])}</p>'
            )
    else:
        out.append('<h2>Result</h2><p class="muted">not finished</p>')
    out.append("</section></div>")

    out.append("<h2>Supervision</h2>")
    sup = []
    if doc["parent"]:
        how = "awaited by" if doc["awaited"] else "child of"
        sup.append(
            (
                "parent",
                f"{how} {_link(doc['parent'])} (restart: {esc(doc['restart'] or 'temporary')})",
            )
        )
    else:
        sup.append(("parent", '<span class="muted">none (top level)</span>'))
    kids = doc["children"]
    sup.append(("children", _tree(kids) if kids else '<span class="muted">none</span>'))
    out.append(_facts(sup))
    restarts = [[when(r.get("at"), now), esc(r.get("reason"))] for r in doc["restarts"]]
    out.append("<h2>Restart history</h2>")
    out.append(_table("restarts", ["at", "reason"], restarts, "no restarts"))

    out.append(f"<h2>Effect log, run {esc(doc['run'])}</h2>")
    out.append(_log(doc, query, now, "fork" in actions and doc["status"] in TERMINAL_STATUSES))

    ever = f" ({doc['messages_ever']} received in all)" if doc["messages_ever"] else ""
    unread = counted(doc["mailbox_total"], "unread message")
    out.append(f"<h2>Mailbox: {esc(unread)}{esc(ever)}</h2>")
    drop = "drop" in actions
    first = (query.mailpage - 1) * MAIL_PER_PAGE  # the position of the page's first message
    mail = [
        [
            esc(m["seq"]),
            f'<span class="mono">{esc(m["signal"])}</span>',
            when(m["sent"], now),
            value_block(m["payload"], value_href(address, "mail", seq=m["seq"], at=first + i)),
        ]
        + (
            [
                f'<a class="drop" href="{esc(confirm_href("drop", doc["address"], message=m["seq"]))}">'
                "drop…</a>"
            ]
            if drop
            else []
        )
        for i, m in enumerate(doc["mailbox"])
    ]
    headers = ["#", "signal", "sent", "payload"] + (["action"] if drop else [])
    empty = "no messages on this page" if doc["mailbox_total"] else "no unread messages"
    out.append(_table("mailbox", headers, mail, empty))
    out.append(_mail_pager(doc, query))
    poison = doc.get("handling")  # the message a failed run was handling
    if poison:
        after = f", after {counted(len(doc['restarts']), 'restart')}" if doc["restarts"] else ""
        out.append(
            f'<p class="error" id="handling">failed while handling message '
            f"#{esc(poison['seq'])} {esc(poison['signal'])} (taken at effect "
            f"#{esc(poison['effect'])}{esc(after)})</p>"
            f"{value_block(poison['payload'], value_href(address, 'handling'))}"
        )
        if drop:
            there = confirm_href("drop", doc["address"], message=poison["seq"])
            out.append(
                f'<p><a class="drop" id="drop-handling" href="{esc(there)}">drop it…</a></p>'
            )
    if doc.get("dead_letters"):
        out.append(
            f'<p class="muted" id="dropped">dropped: '
            f"{esc(counted(doc['dead_letters'], 'message'))} (actors mail "
            f"{esc(doc['address'])} --dropped)</p>"
        )

    out.append(f"<h2>Timers: {esc(counted(len(doc['timers']), 'timer'))}</h2>")
    timers = [
        [
            when(t["due"], now),
            esc(relative(t["due"], now)),
            f"#{esc(t['seq'])}",
            f"left by run {esc(t['run'])}" if t["stale"] else "",
        ]
        for t in doc["timers"]
    ]
    out.append(_table("timers", ["due", "when", "effect", ""], timers, "no timers"))

    stream = doc["stream"]
    out.append(f"<h2>Stream: {esc(counted(stream['length'], 'value'))}</h2>")
    cursors = [
        [f'<span class="mono">{esc(name)}</span>', esc(c["cursor"]), esc(c["unread"])]
        for name, c in stream["consumers"].items()
    ]
    out.append(_table("consumers", ["consumer", "cursor", "unread"], cursors, "no consumers"))

    out.append("<h2>Exports</h2>")
    if doc["exports_version"] is not None:
        exports = value_block(doc["exports"], value_href(address, "exports"))
        out.append(f"<p>version {esc(doc['exports_version'])}</p>{exports}")
    else:
        out.append('<p class="muted">nothing published</p>')

    comps = doc["compensations"]
    out.append(f"<h2>Compensations: {len(comps)}</h2>" if comps else "<h2>Compensations</h2>")
    if comps:
        out.append(f'<p id="compensations-fate">{esc(doc["compensations_fate"])}</p>')
    rows = [
        [
            esc(c["state"]),
            f'<span class="mono">{esc(c["step"])}</span>',
            f'<span class="mono">{esc(c["function"])}</span>',
            esc(c["attempts"]),
            "step may have applied" if c["possibly_applied"] else "",
            value_block(
                {"args": c["args"], "kwargs": c["kwargs"]},
                value_href(address, "compensation", at=i),
            ),
        ]
        for i, c in enumerate(comps)
    ]
    out.append(
        _table(
            "compensations",
            ["state", "step", "function", "attempts", "", "arguments"],
            rows,
            "none recorded",
        )
    )
    if doc["compensation_failure"]:
        out.append(f"<p>stuck on:</p>{_error(doc['compensation_failure'], 'stuck')}")
    return "".join(out)


def _mail_pager(doc: dict[str, Any], query: InstanceQuery) -> str:
    total = doc["mailbox_total"]
    if total <= MAIL_PER_PAGE and query.mailpage == 1:
        return ""
    pages = max(1, math.ceil(total / MAIL_PER_PAGE))
    pager = [f'<span id="mail-pages">page {query.mailpage} of {pages} of the unread mail</span>']

    def to(page: int) -> str:
        return esc(instance_href(doc["address"], query.logpage, query.per, page))

    if query.mailpage > 1:
        pager.append(f'<a href="{to(query.mailpage - 1)}">← older</a>')
    if query.mailpage < pages:
        pager.append(f'<a href="{to(query.mailpage + 1)}">newer →</a>')
    return f'<div class="pager">{"".join(pager)}</div>'


# -- problems -----------------------------------------------------------------------


def problem_page(
    status: int, title: str, message: str, source: str, *, mode: str = "read-only"
) -> str:
    """A 4xx or 5xx page: what went wrong, and the way back to the list;
    ``mode`` says whether the inspector acts ("actions allowed")."""
    body = (
        f'<div class="problem"><h1>{status} · {esc(title)}</h1><p id="problem">{esc(message)}</p>'
        '<p><a href="/">all instances</a></p></div>'
    )
    return layout(title, source, body, live=None, poll=0, mode=mode)
