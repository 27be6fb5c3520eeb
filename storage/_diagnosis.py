"""Why a value cannot be stored: the walk `storage._codec.encode` makes
once packing has failed, to name the path of the first part that cannot be
(``payload["items"][3]``) and say what to do instead.

It takes what packing takes, in the same order, so the part it names is
the one packing stopped at; it is iterative, so a value nested far past
the recursion limit is walked too.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["FLATTEN", "SCALARS", "diagnose"]


# The types the codec stores as themselves, with nothing inside to walk
# (and which nothing can change in place: `_log_cache` shares them).
SCALARS = (
    type(None),
    bool,
    int,
    float,
    str,
    bytes,
    _dt.datetime,
    _dt.date,
    _dt.time,
    _dt.timedelta,
    decimal.Decimal,
    uuid.UUID,
)
_NESTED = (tuple, set, frozenset)  # each is a nested msgpack document, like a record
_PLAIN_DEPTH = 1024  # how deep msgpack nests lists and dicts in one document
_OPENING: dict[type, int] = {tuple: 1, set: 0, frozenset: 0}  # levels a nested document starts with
_SUPPORTED = (
    "use None, bool, int, float, str, bytes, list, tuple, dict, set, frozenset, "
    "datetime/date/time/timedelta, Decimal, UUID or an attrs class decorated with "
    "@actors.serializable"
)
FLATTEN = (
    "flatten it (a list of rows, or ids that refer to the parts) or encode that part "
    "as bytes yourself"
)


def diagnose(
    value: Any, what: str, records: Mapping[type, tuple[str, ...]], max_nesting: int
) -> tuple[str, Any, str] | None:
    """Walk ``value`` in encoding order; return (path, part, reason) for the
    first part that cannot be stored, or None. ``records`` are the classes
    registered with `serializable`, with their stored fields; tuples, sets,
    frozensets and records may nest ``max_nesting`` levels deep.

    Iterative, so a value nested far past the recursion limit is walked too."""
    segments: list[str] = []
    # Each frame: an iterator over (segment, child) pairs, the nested-document
    # depth and the list/dict depth inside the current document.
    stack: list[tuple[Any, int, int]] = []
    current: Any = value
    nested = plain = 0
    while True:
        kind = type(current)
        children: Any = None
        if kind is str:
            try:
                current.encode("utf-8")
            except UnicodeEncodeError as exc:
                return (
                    _path(what, segments),
                    current,
                    (
                        f"is a str that is not valid Unicode (a lone surrogate "
                        f"{current[exc.start]!r} at index {exc.start}); it cannot be stored as "
                        "UTF-8. Decode bytes with errors='replace' (or pass them as bytes)"
                    ),
                )
        elif kind in SCALARS:
            pass  # (an int of any size too: a long one is stored as bytes)
        elif kind is list or kind is dict or kind in _NESTED or kind in records:
            if kind is list or kind is dict:
                plain += 1
            else:
                # A new document: a tuple is packed as a list, a record as
                # [name, {fields}], a set's items one by one.
                nested, plain = nested + 1, _OPENING.get(kind, 2)
            if nested > max_nesting:
                return (
                    _path(what, segments),
                    current,
                    (
                        f"nests tuples, sets, frozensets and records more than {max_nesting} "
                        f"levels deep; {FLATTEN}"
                    ),
                )
            if plain > _PLAIN_DEPTH:
                return (
                    _path(what, segments),
                    current,
                    (f"nests lists and dicts more than {_PLAIN_DEPTH} levels deep; {FLATTEN}"),
                )
            if kind is list or kind is tuple:
                children = ((f"[{i}]", item) for i, item in enumerate(current))
            elif kind is dict:
                children = (
                    pair
                    for key, item in current.items()
                    for pair in ((f" key {_short(key)}", key), (f"[{_short(key)}]", item))
                )
            elif kind is set or kind is frozenset:
                children = ((f" item {_short(item)}", item) for item in current)
            else:
                children = _fields_of(current, records[kind])
        else:
            kind_name = f"{kind.__module__}.{kind.__qualname__}"
            return (
                _path(what, segments),
                current,
                (f"is a {kind_name}, which the codec cannot store; {_SUPPORTED}"),
            )
        if children is not None:
            stack.append((children, nested, plain))
        # Move to the next child, climbing out of finished containers.
        while stack:
            iterator, nested, plain = stack[-1]
            step = next(iterator, None)
            if len(segments) >= len(stack):
                segments.pop()
            if step is not None:
                segments.append(step[0])
                current = step[1]
                break
            stack.pop()
        else:
            return None


def _fields_of(record: Any, names: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    for name in names:
        yield f".{name}", getattr(record, name)


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # too deep to print, or an odd __repr__
        return f"<a {type(value).__qualname__}>"
    return text if len(text) <= 40 else text[:37] + "..."


def _path(root: str, segments: list[str]) -> str:
    if len(segments) > 12:
        hidden = len(segments) - 10
        segments = [*segments[:5], f"...({hidden} more levels)...", *segments[-5:]]
    return root + "".join(segments)
