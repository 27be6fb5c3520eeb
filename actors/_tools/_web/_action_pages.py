"""The HTML of the inspector's actions: the panel on an instance's page,
the confirmation page that says what will happen, and the page of what
happened.

Only the confirmation page holds a form that POSTs, with the session's
token; the panel and the links on log entries and messages are GET links
and forms to it, which change nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._actions import Action, Outcome
from ._html import esc
from ._query import instance_href

__all__ = ["action_panel", "confirm_body", "outcome_body"]


def _get_form(action: Action, address: str, inner: str = "") -> str:
    return (
        f'<form class="action" method="get" action="/confirm" data-action="{esc(action.name)}">'
        f'<input type="hidden" name="action" value="{esc(action.name)}">'
        f'<input type="hidden" name="address" value="{esc(address)}">'
        f'{inner}<button type="submit">{esc(action.title)}…</button></form>'
    )


def action_panel(doc: dict[str, Any], actions: Mapping[str, Action]) -> str:
    """The instance's actions that apply to its status (each asks for confirmation)."""
    status, address = doc["status"], doc["address"]
    forms = []
    for action in actions.values():
        if action.per_item or status not in action.statuses:
            continue
        inner = ""
        if action.name == "send":
            inner = (
                '<label>signal<input name="signal" required placeholder="approved"></label>'
                '<label>payload (JSON)<input name="payload" placeholder=\'{"by": "ann"}\'>'
                '</label><label>key (optional)<input name="key"></label>'
            )
        if action.name == "retry":
            inner = (
                '<label>new input (JSON object, optional)<input name="input" '
                'placeholder="the input it had"></label>'
            )
        forms.append(_get_form(action, address, inner))
    if "fork" in actions and status in actions["fork"].statuses:
        forms.append(
            '<p class="muted">To fork, pick a log entry below ("fork after '
            'this"): the fork keeps the entries up to it and runs on after it.</p>'
        )
    if not forms:
        return (
            f'<section id="actions"><h2>Actions</h2><p class="muted">none apply to a '
            f"{esc(status)} instance</p></section>"
        )
    return f'<section id="actions"><h2>Actions</h2>{"".join(forms)}</section>'


def confirm_body(
    action: Action,
    address: str,
    says: list[str],
    fields: Mapping[str, str],
    token: str,
    command: list[str],
) -> str:
    """The confirmation: what will happen, the command that does it, and the
    form that does it (POST, with the session's token)."""
    hidden = "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
        for k, v in (
            ("action", action.name),
            ("address", address),
            *fields.items(),
            ("token", token),
        )
    )
    shown = " ".join(command[3:])  # after "python -m actors"
    return (
        f'<div class="confirm"><h1>{esc(action.title)}: {esc(address)}?</h1>'
        '<h2>What will happen</h2><ul id="says">'
        + "".join(f"<li>{esc(line)}</li>" for line in says)
        + f'</ul><p class="muted">Done as the command line does it: <code>actors '
        f"{esc(shown)}</code></p>"
        f'<form id="confirm" method="post" action="/act">{hidden}'
        f'<button type="submit" class="danger">Confirm: {esc(action.title.lower())}</button> '
        f'<a href="{esc(instance_href(address))}">no, back to {esc(address)}</a></form>'
        + (_fork_elsewhere(address, fields) if action.name == "fork" and "to" not in fields else "")
        + "</div>"
    )


def _fork_elsewhere(address: str, fields: Mapping[str, str]) -> str:
    """A way to confirm the same fork to another address instead (GET: it changes nothing)."""
    return (
        '<form class="action" id="fork-to" method="get" action="/confirm">'
        '<input type="hidden" name="action" value="fork">'
        f'<input type="hidden" name="address" value="{esc(address)}">'
        f'<input type="hidden" name="from" value="{esc(fields.get("from", ""))}">'
        '<label>or fork to another address<input name="to" required placeholder="orders/o-18">'
        '</label><button type="submit">Say what that does…</button></form>'
    )


def outcome_body(action: Action, address: str, outcome: Outcome, then: str) -> str:
    """What the action's command did, and the way on."""
    cls = "done" if outcome.code == 0 else "error"
    return (
        f'<div class="confirm"><h1>{esc(action.title)}: {esc(address)}</h1>'
        f'<p id="outcome" class="{cls}">{esc(outcome.word)}</p>'
        f'<pre id="said" class="value">{esc(outcome.text)}</pre>'
        f'<p><a id="then" href="{esc(instance_href(then))}">{esc(then)}</a> · '
        '<a href="/">all instances</a></p></div>'
    )
