"""The inspector's instance list: its filter form and the polled part
(counts by status, a page of instances, the pager)."""

from __future__ import annotations

import math
import time
from typing import Any

from storage import STATUSES

from .._cli._render import zone_name
from ._html import badge, esc, when
from ._query import PER_PAGE, ListQuery, instance_href, list_href

__all__ = ["list_filters", "list_fragment"]


def list_filters(query: ListQuery, processes: list[str]) -> str:
    """The filter form (outside the polled part, so typing is never interrupted)."""
    options = ['<option value="">any</option>'] + [
        f'<option value="{esc(s)}"{" selected" if s == query.status else ""}>{esc(s)}</option>'
        for s in STATUSES
    ]
    known = "".join(f'<option value="{esc(p)}">' for p in processes)
    per = "" if query.per == PER_PAGE else f'<input type="hidden" name="per" value="{query.per}">'
    return (
        '<h1>Instances</h1><form class="filters" method="get" action="/">'
        f'<label>status<select name="status">{"".join(options)}</select></label>'
        f'<label>process<input name="process" list="processes" value="{esc(query.process or "")}"'
        ' placeholder="orders/:id"></label>'
        f'<datalist id="processes">{known}</datalist>'
        f'<label>address, and below it<input name="prefix" value="{esc(query.prefix or "")}"'
        ' placeholder="orders/o-17"></label>'
        f'{per}<button type="submit">filter</button> <a href="/">clear</a></form>'
    )


def list_fragment(
    query: ListQuery, shown: list[dict[str, Any]], matching: int, counts: dict[str, int]
) -> str:
    """Counts by status, then ``shown``: the page ``query`` asks for of the
    ``matching`` instances, most recently updated first."""
    now = time.time()
    total = sum(counts.values())
    chips = [f'<a href="{esc(list_href(query, status=None, page=1))}">{badge("all", total)}</a>']
    chips += [
        f'<a href="{esc(list_href(query, status=s, page=1))}">{badge(s, counts[s])}</a>'
        for s in STATUSES
        if counts.get(s)
    ]
    pages = max(1, math.ceil(matching / query.per))
    rows = []
    for i in shown:
        address = i["address"]
        link = (
            esc(address)
            if i["corrupt"]
            else (f'<a href="{esc(instance_href(address))}">{esc(address)}</a>')
        )
        rows.append(
            f'<tr data-address="{esc(address)}"><td class="mono">{link}</td>'
            f'<td class="mono nowrap">{esc(i["process"])}</td><td>{badge(i["status"])}</td>'
            f'<td class="nowrap">{when(i["updated"], now)}</td>'
            f'<td class="nowrap">{when(i["created"], now)}</td>'
            f'<td class="detail">{esc(i["detail"] or "")}</td></tr>'
        )
    if rows:
        table = (
            f'<table id="instances"><thead><tr><th>address</th><th>process</th><th>status</th>'
            f"<th>updated ({esc(zone_name())})</th><th>created</th><th>detail</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
    elif matching:
        table = f'<p class="muted">no instances on page {query.page}; there are {pages}.</p>'
    else:
        table = '<p class="muted" id="instances">no instances match.</p>'
    pager = [f"<span>{matching} matching · page {query.page} of {pages}</span>"]
    if query.page > 1:
        pager.append(f'<a href="{esc(list_href(query, page=query.page - 1))}">← newer</a>')
    if query.page < pages:
        pager.append(f'<a href="{esc(list_href(query, page=query.page + 1))}">older →</a>')
    return (
        f'<div class="counts">{"".join(chips)}</div>{table}'
        f'<div class="pager">{"".join(pager)}</div>'
    )
