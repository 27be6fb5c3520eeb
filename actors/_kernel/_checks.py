"""Checks of the numbers, names and text that public entry points take.

Every check raises `InvalidArguments` at the call, naming the argument and
what to pass instead, before anything is written or scheduled: a value that
passed would otherwise fail later, far from its cause (a NaN timer in the
journal writer, a lone surrogate in the key encoder), or be replayed into
the same failure on every open.

Names and text the runtime stores (path params, and so addresses; stream
consumers, queue, schedule and signal names, send keys, step names) hold no
NUL and no other control character (Unicode's category Cc: U+0000-U+001F,
U+007F-U+009F): PostgreSQL's text cannot hold NUL, a control character in a
name is invisible in every listing, and the runtime names its own records
with prefixes that start with one (see `_message_txns.KEY_PREFIX`), which no
user's name can then take.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArguments, LimitExceeded

__all__ = [
    "MAX_SCOPE",
    "MAX_SECONDS",
    "check_count",
    "check_deadline",
    "check_many",
    "check_name",
    "check_scope",
    "check_seconds",
    "check_text",
]

#: The most children one ``ctx.scope`` starts.
MAX_SCOPE = 1000

#: The longest duration a timer, timeout or age may have: 1,000 years. Every
#: due time within it fits the journals' timer index (int64 microseconds) and
#: is a datetime (before year 10000) that the CLI and ``ctx.now()`` can show.
MAX_SECONDS = 1_000 * 365.25 * 86400


def check_seconds(value: Any, what: str, *, positive: bool = False) -> float:
    """``value`` as float seconds, if it is a real, finite number of seconds
    at least 0 (above 0 if ``positive``) and at most `MAX_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArguments(
            f"{what} takes a number of seconds (int or float), not {_show(value)}"
        )
    if isinstance(value, float) and math.isnan(value):
        raise InvalidArguments(f"{what} got NaN seconds; pass a number")
    low = "above 0" if positive else "0 or more"
    if value < 0 or (positive and value == 0):
        raise InvalidArguments(f"{what} needs seconds {low}, not {value!r}")
    if value > MAX_SECONDS:
        raise InvalidArguments(
            f"{what} got {value!r} seconds, more than the {MAX_SECONDS:.0f} (1,000 years) "
            "any duration may be; pass a finite, smaller number"
            + (" (or None for no limit)" if positive else "")
        )
    try:
        return float(value)
    except OverflowError:  # an int too large for a float is over MAX_SECONDS anyway
        raise InvalidArguments(f"{what} got {value!r} seconds; pass a smaller number") from None


def check_count(value: Any, what: str) -> int:
    """``value`` if it is an int (not a bool) of 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArguments(f"{what} takes a whole number (int), not {_show(value)}")
    if value < 0:
        raise InvalidArguments(f"{what} needs a count of 0 or more, not {value!r}")
    return value


def check_many(value: Any, what: str, items: str) -> list[Any]:
    """The items of ``value`` as a list, if it is an iterable other than a
    str or bytes (whose characters are never the items meant)."""
    try:
        if isinstance(value, (str, bytes, bytearray)):
            raise TypeError
        found = iter(value)
    except TypeError:
        raise InvalidArguments(
            f"{what} takes a collection (a list or tuple) of {items}, not {_show(value)}"
        ) from None
    return list(found)


def check_deadline(when: Any, what: str) -> float:
    """The epoch seconds of ``when``, a timezone-aware datetime."""
    if not isinstance(when, _dt.datetime) or when.tzinfo is None:
        raise InvalidArguments(
            f"{what} needs a timezone-aware datetime, not {_show(when)} "
            "(use datetime.now(timezone.utc) + timedelta(...))"
        )
    try:
        offset = when.utcoffset()
        epoch = when.timestamp()
    except Exception as exc:  # noqa: BLE001 - a tzinfo's own code may raise anything
        raise InvalidArguments(
            f"{what} got {when!r}, which has no point in time ({exc}); pass a datetime "
            "with a tzinfo such as timezone.utc or a zoneinfo.ZoneInfo"
        ) from None
    if offset is None or not math.isfinite(epoch):
        raise InvalidArguments(
            f"{what} got {when!r}, whose tzinfo gives no UTC offset; pass a datetime "
            "with a tzinfo such as timezone.utc or a zoneinfo.ZoneInfo"
        )
    return epoch


# Unicode's control characters (category Cc), refused in names (see the module doc).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def check_text(value: Any, what: str) -> str:
    """``value`` if it is a str that every journal can store as text: valid
    Unicode (no lone surrogates) without NUL or another control character."""
    if not isinstance(value, str):
        raise InvalidArguments(f"{what} must be a str, not {_show(value)}")
    if value.isascii():
        if value.isprintable():  # ASCII's unprintables are its control characters
            return value  # the common case
    else:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArguments(
                f"{what} {_show(value)} is not valid Unicode (a lone surrogate at index "
                f"{exc.start}); decode bytes with errors='replace' before using them as a name"
            ) from None
    found = _CONTROL.search(value)
    if found is None:
        return value
    code = ord(found.group())
    char = "NUL" if code == 0 else f"U+{code:04X}"
    raise InvalidArguments(
        f"{what} {_show(value)} holds a control character ({char} at index "
        f"{found.start()}), which no name may: remove it, or encode the value "
        "(e.g. urllib.parse.quote) before using it as a name"
    )


def check_name(value: Any, what: str) -> str:
    """``value`` if it is a non-empty str that every journal can store as
    text (see `check_text`)."""
    if isinstance(value, str) and value and value.isascii() and value.isprintable():
        return value  # (`check_text`'s common case, written out: every ctx.step names one)
    check_text(value, what)
    if not value:
        raise InvalidArguments(f"{what} is empty; pass a non-empty str")
    name: str = value  # check_text let only a str through
    return name


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an odd __repr__ must not hide the error
        return f"a value of type {type(value).__qualname__}"
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} (of type {type(value).__qualname__})"


def check_scope(items: Any, key: Callable[[Any], Any] | None) -> tuple[list[Any], list[Any]]:
    """The items of a ``ctx.scope`` and their keys (``key(item)``, or the
    item itself): at most `MAX_SCOPE` items (`LimitExceeded`), keys
    hashable and unique."""
    try:
        items = list(items)
    except TypeError:
        raise InvalidArguments(
            f"ctx.scope takes an iterable of items (a list of params or tuples), not {items!r}"
        ) from None
    if len(items) > MAX_SCOPE:
        raise LimitExceeded(
            f"ctx.scope takes at most {MAX_SCOPE} items, got {len(items)}; split the "
            "work into batches (e.g. a scope per 1000 items) or spawn children"
        )
    keys = [key(item) if key is not None else item for item in items]
    seen: set[Any] = set()
    for k in keys:
        try:
            repeated = k in seen
        except TypeError:
            raise InvalidArguments(
                f"ctx.scope keys must be hashable, not {k!r}; pass key=... giving "
                "a str, int or tuple for each item"
            ) from None
        if repeated:
            raise InvalidArguments(f"ctx.scope keys must be unique; {k!r} repeats")
        seen.add(k)
    return items, keys
