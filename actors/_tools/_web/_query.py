"""The inspector's query strings: parsed into records, checked, and built back
into links. A query that does not parse is a `BadQuery`, which the app
answers with a 400 page naming the parameter and what it takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

import attrs

from storage import STATUSES

__all__ = [
    "MAIL_PER_PAGE",
    "MAX_PER_PAGE",
    "PARTS",
    "PER_PAGE",
    "BadQuery",
    "InstanceQuery",
    "ListQuery",
    "ValueQuery",
    "instance_href",
    "list_href",
    "parse_instance",
    "parse_list",
    "parse_value",
    "value_href",
]

PER_PAGE = 50  # rows of a list or log page unless ``per`` says otherwise
MAIL_PER_PAGE = 20  # unread messages on an instance's page (each up to a value's cut)
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
    """Which instance a page shows, which page of its effect log (``per``
    entries a page) and which of its unread mail (`MAIL_PER_PAGE` a page)."""

    address: str
    logpage: int = 1
    per: int = PER_PAGE
    partial: bool = False
    mailpage: int = 1


# The values of an instance that the value page shows whole, and what names
# one of them: "mail" the message #seq at position ``at`` of the unread mail
# (0-based), "log" the entry #seq of the current run's log, "compensation"
# the ``at``-th registered compensation's arguments.
PARTS = ("input", "result", "exports", "handling", "mail", "log", "compensation")


@attrs.frozen
class ValueQuery:
    """One stored value of an instance, to show whole."""

    address: str
    part: str
    seq: int | None = None
    at: int | None = None


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
    p = _single(params, ("address", "logpage", "mailpage", "per", "partial"))
    address = p.get("address", "")
    if not address:
        raise BadQuery("address is missing: /instance?address=orders/o-17 shows orders/o-17")
    return InstanceQuery(
        address=address,
        logpage=_number(p, "logpage", 1),
        per=_number(p, "per", PER_PAGE, MAX_PER_PAGE),
        partial=_flag(p, "partial"),
        mailpage=_number(p, "mailpage", 1),
    )


def parse_value(params: Mapping[str, Sequence[str]]) -> ValueQuery:
    """The value page's query (``address``, ``part``, and ``seq`` and ``at``
    where the part needs them)."""
    p = _single(params, ("address", "part", "seq", "at"))
    address = p.get("address", "")
    if not address:
        raise BadQuery("address is missing: /value?address=orders/o-17&part=input shows its input")
    part = p.get("part", "")
    if part not in PARTS:
        raise BadQuery(f"part must be one of {', '.join(PARTS)}, not {part!r}")
    needs = {"mail": ("seq", "at"), "log": ("seq",), "compensation": ("at",)}.get(part, ())
    for name in ("seq", "at"):
        if name in needs and not p.get(name):
            raise BadQuery(f"the {part} part needs {name}")
        if name not in needs and p.get(name):
            raise BadQuery(f"the {part} part takes no {name}")
    return ValueQuery(
        address=address,
        part=part,
        seq=_number(p, "seq", 1) if "seq" in needs else None,
        at=_index(p, "at") if "at" in needs else None,
    )


def _index(params: dict[str, str], name: str) -> int:
    """A position counted from 0."""
    text = params.get(name, "")
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise BadQuery(f"{name} must be a whole number from 0, not {text!r}")
    return int(text)


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


def instance_href(address: str, logpage: int = 1, per: int = PER_PAGE, mailpage: int = 1) -> str:
    """The URL of ``address``'s page (its log at page ``logpage``, its mail at ``mailpage``)."""
    params: list[tuple[str, object]] = [("address", address)]
    if logpage != 1:
        params.append(("logpage", logpage))
    if mailpage != 1:
        params.append(("mailpage", mailpage))
    if per != PER_PAGE:
        params.append(("per", per))
    return "/instance?" + urlencode(params)


def value_href(address: str, part: str, *, seq: int | None = None, at: int | None = None) -> str:
    """The URL of the page that shows one value of ``address`` whole."""
    params: list[tuple[str, object]] = [("address", address), ("part", part)]
    params += [(name, n) for name, n in (("seq", seq), ("at", at)) if n is not None]
    return "/value?" + urlencode(params)
