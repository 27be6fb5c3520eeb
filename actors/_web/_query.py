"""The inspector's query strings: parsed into records, checked, and built back
into links. A query that does not parse is a `BadQuery`, which the app
answers with a 400 page naming the parameter and what it takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

import attrs

from storage import STATUSES

__all__ = [
    "BadQuery",
    "ListQuery",
    "InstanceQuery",
    "parse_list",
    "parse_instance",
    "list_href",
    "instance_href",
    "PER_PAGE",
    "MAX_PER_PAGE",
]

PER_PAGE = 50  # rows of a list or log page unless ``per`` says otherwise
MAX_PER_PAGE = 500


class BadQuery(ValueError):
    """A query string the inspector cannot act on; the message says why."""


@attrs.frozen
class ListQuery:
    """Which instances the list shows: filters, then a page of the result.

    ``prefix`` keeps an address and those below it (``orders/o-1`` keeps
    ``orders/o-1`` and ``orders/o-1/pay/p1``, not ``orders/o-10``), as
    ``actors list --prefix`` does."""

    status: str | None = None
    process: str | None = None
    prefix: str | None = None
    page: int = 1
    per: int = PER_PAGE
    partial: bool = False


@attrs.frozen
class InstanceQuery:
    """Which instance a page shows, and which page of its effect log."""

    address: str
    logpage: int = 1
    per: int = PER_PAGE
    partial: bool = False


def _single(params: Mapping[str, Sequence[str]], allowed: Sequence[str]) -> dict[str, str]:
    """One value per parameter; unknown or repeated parameters are refused."""
    out = {}
    for name, values in params.items():
        if name not in allowed:
            raise BadQuery(
                f"unknown query parameter {name!r}; this page takes {', '.join(allowed)}"
            )
        if len(values) != 1:
            raise BadQuery(f"query parameter {name!r} is given {len(values)} times; give it once")
        out[name] = values[0]
    return out


def _number(params: dict[str, str], name: str, default: int, top: int | None = None) -> int:
    text = params.get(name, "")
    if text == "":
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
        raise BadQuery(f"{name} must be a whole number from 1, not {text!r}")
    if top is not None and int(text) > top:
        raise BadQuery(f"{name} must be at most {top}, not {text}")
    return int(text)


def _flag(params: dict[str, str], name: str) -> bool:
    text = params.get(name, "")
    if text not in ("", "0", "1"):
        raise BadQuery(f"{name} must be 0 or 1, not {text!r}")
    return text == "1"


def parse_list(params: Mapping[str, Sequence[str]]) -> ListQuery:
    """The list page's query (``status``, ``process``, ``prefix``, ``page``, ``per``)."""
    p = _single(params, ("status", "process", "prefix", "page", "per", "partial"))
    status = p.get("status") or None
    if status is not None and status not in STATUSES:
        raise BadQuery(f"unknown status {status!r}; one of {', '.join(STATUSES)}")
    return ListQuery(
        status=status,
        process=p.get("process") or None,
        prefix=p.get("prefix") or None,
        page=_number(p, "page", 1),
        per=_number(p, "per", PER_PAGE, MAX_PER_PAGE),
        partial=_flag(p, "partial"),
    )


def parse_instance(params: Mapping[str, Sequence[str]]) -> InstanceQuery:
    """An instance page's query (``address``, ``logpage``, ``per``)."""
    p = _single(params, ("address", "logpage", "per", "partial"))
    address = p.get("address", "")
    if not address:
        raise BadQuery("address is missing: /instance?address=orders/o-17 shows orders/o-17")
    return InstanceQuery(
        address=address,
        logpage=_number(p, "logpage", 1),
        per=_number(p, "per", PER_PAGE, MAX_PER_PAGE),
        partial=_flag(p, "partial"),
    )


def list_href(query: ListQuery, **changes: object) -> str:
    """The list page's URL for ``query`` with ``changes`` (defaults left out)."""
    q = attrs.evolve(query, partial=False, **changes)  # type: ignore[arg-type]
    params = [
        (name, value)
        for name, value, default in (
            ("status", q.status, None),
            ("process", q.process, None),
            ("prefix", q.prefix, None),
            ("page", q.page, 1),
            ("per", q.per, PER_PAGE),
        )
        if value != default
    ]
    return "/" + (f"?{urlencode(params)}" if params else "")


def instance_href(address: str, logpage: int = 1, per: int = PER_PAGE) -> str:
    """The URL of ``address``'s page (its log at page ``logpage``)."""
    params: list[tuple[str, object]] = [("address", address)]
    if logpage != 1:
        params.append(("logpage", logpage))
    if per != PER_PAGE:
        params.append(("per", per))
    return "/instance?" + urlencode(params)
