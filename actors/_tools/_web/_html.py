"""The inspector's HTML building blocks: escaping (`esc`, `value_block`),
badges and times, the page layout, and the links every page makes.

Every value that comes from the journal (addresses, payloads, errors, names)
is user data and goes through `esc` or `value_block`; nothing else builds
markup from it."""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import urlencode

from .._cli._render import jsonable, local_time, relative
from ._query import instance_href

__all__ = [
    "VALUE_LIMIT",
    "as_json",
    "badge",
    "confirm_href",
    "esc",
    "layout",
    "value_block",
    "value_body",
    "when",
]

# Characters of one value a page shows; the rest is cut, with a link to the
# value page (`value_body`), which shows it whole.
VALUE_LIMIT = 4_000


def esc(value: Any) -> str:
    """``value`` as text safe in HTML content and in quoted attributes."""
    return html.escape(str(value), quote=True)


def as_json(value: Any) -> str:
    return json.dumps(jsonable(value), indent=2, ensure_ascii=False)


def value_block(value: Any, whole: str | None = None) -> str:
    """A stored value as indented JSON in a ``<pre>``: its first `VALUE_LIMIT`
    characters, and past that a link to ``whole`` (the URL that shows it all)."""
    # A long string is cut before it is turned into JSON, not after.
    text = as_json(value[: VALUE_LIMIT + 1] if isinstance(value, str) else value)
    note = ""
    if len(text) > VALUE_LIMIT:
        size = len(value) if isinstance(value, str) else len(text)
        link = f' <a class="whole" href="{esc(whole)}">show it whole</a>' if whole else ""
        note = f'<div class="muted cut">(first {VALUE_LIMIT} of {size} characters){link}</div>'
        text = text[:VALUE_LIMIT]
    return f'<pre class="value">{esc(text)}</pre>{note}'


def value_body(address: str, title: str, value: Any) -> str:
    """The value page: one stored value of ``address``, whole, escaped."""
    return (
        f'<h1 id="address">{esc(address)}</h1><p><a href="{esc(instance_href(address))}">'
        f'back to its page</a></p><h2>{esc(title)}</h2><pre class="value whole" id="value">'
        f"{esc(as_json(value))}</pre>"
    )


def badge(status: str, count: int | None = None) -> str:
    n = "" if count is None else f" <b>{count}</b>"
    return f'<span class="badge {esc(status)}">{esc(status)}{n}</span>'


def when(t: float | None, now: float) -> str:
    if t is None:
        return '<span class="muted">-</span>'
    return f'<span title="{esc(relative(t, now))}">{esc(local_time(t))}</span>'


def layout(
    title: str,
    source: str,
    body: str,
    *,
    live: str | None,
    poll: float,
    mode: str = "read-only",
    etag: str | None = None,
) -> str:
    """A whole page. ``live`` is the content of the polled ``<main>`` (None:
    no polling), ``etag`` its validator, which the polling script sends back
    (`_index`); ``mode`` says in the header whether actions are allowed."""
    controls = main = ""
    if live is not None:
        controls = (
            '<span class="live" id="live-state">live</span>'
            '<label><input type="checkbox" id="pause"> pause</label>'
        )
        main = f'<main id="live" data-poll="{poll:g}">{live}</main>'
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{'' if etag is None or live is None else etag_meta(etag)}"
        f"<title>{esc(title)} · actors inspector</title>"
        '<link rel="stylesheet" href="/static/inspector.css">'
        '<script src="/static/live.js" defer></script></head><body>'
        f'<header><a href="/">actors inspector</a><span class="source">{esc(source)}</span>'
        f'<span class="muted" id="mode">{esc(mode)}</span>{controls}</header>'
        f'<div class="wrap">{body}{main}</div></body></html>'
    )


def etag_meta(etag: str) -> str:
    return f'<meta name="live-etag" content="{esc(etag)}">'


def confirm_href(action: str, address: str, **fields: object) -> str:
    """The URL of the page that confirms ``action`` on ``address``."""
    params = [("action", action), ("address", address), *((k, str(v)) for k, v in fields.items())]
    return "/confirm?" + urlencode(params)
