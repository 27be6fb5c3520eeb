"""Values in a history file: anything the codec carries, as JSON data.

`to_plain` writes a value as JSON where JSON carries it, and as a one-key
``{"$tag": ...}`` object where it does not; `from_plain` reads it back,
equal, of the same type, with the same canonical encoding (so argument
hashes still match on replay). docs/histories.md lists the tags.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import math
import uuid
import zoneinfo
from typing import Any

import msgpack

from storage import Opaque, decode, encode

from ..errors import HistoryFormatError

__all__ = ["bad", "from_plain", "to_plain"]

# The ext type code of ``@serializable`` records in `storage`'s codec
# (released codes keep their meaning forever: see storage._codec).
_CODEC_RECORD = 11
_JSON_SAFE_INT = 1 << 53  # past this, JSON tools lose digits: written as text


def to_plain(value: Any) -> Any:
    """``value`` (anything the codec carries) as JSON data.

    None, bool, str, finite floats, ints within ±2**53, lists and maps with
    str keys are themselves; anything else is a one-key object:
    ``{"$tuple": [...]}``, ``{"$set": [...]}``, ``{"$frozenset": [...]}``,
    ``{"$bytes": base64}``, ``{"$int": "digits"}``, ``{"$float": "nan" |
    "inf" | "-inf"}``, ``{"$datetime": [naive ISO, zone, fold]}``,
    ``{"$date": ISO}``, ``{"$time": [naive ISO, zone, fold]}``,
    ``{"$timedelta": [days, seconds, microseconds]}``, ``{"$decimal":
    text}``, ``{"$uuid": text}``, ``{"$class": [codec name, {field: value}]}``
    and ``{"$map": [[key, value], ...]}`` (a map with a key that is no str,
    or that would read as a tag). A zone is null (naive), an IANA name, or
    an offset in microseconds.
    """
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if -_JSON_SAFE_INT < value < _JSON_SAFE_INT else {"$int": str(value)}
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        return [to_plain(item) for item in value]
    if kind is dict:
        if all(type(k) is str for k in value) and not _looks_tagged(value):
            return {k: to_plain(v) for k, v in value.items()}
        return {"$map": [[to_plain(k), to_plain(v)] for k, v in value.items()]}
    if kind is tuple:
        return {"$tuple": [to_plain(item) for item in value]}
    if kind is set or kind is frozenset:
        # The codec's canonical order: sorted by each element's encoding.
        items = sorted(value, key=lambda item: encode(item))
        return {"$set" if kind is set else "$frozenset": [to_plain(item) for item in items]}
    if kind is bytes:
        return {"$bytes": base64.b64encode(value).decode()}
    if kind is _dt.datetime or kind is _dt.time:
        naive = value.replace(tzinfo=None).isoformat()
        sample = value if kind is _dt.datetime else None
        tag = "$datetime" if kind is _dt.datetime else "$time"
        return {tag: [naive, _zone(value.tzinfo, sample), value.fold]}
    if kind is _dt.date:
        return {"$date": value.isoformat()}
    if kind is _dt.timedelta:
        return {"$timedelta": [value.days, value.seconds, value.microseconds]}
    if kind is decimal.Decimal:
        return {"$decimal": str(value)}
    if kind is uuid.UUID:
        return {"$uuid": str(value)}
    # A @serializable record (or an `Opaque` one, read without its class):
    # the codec writes it as [name, fields]; read that back from its encoding.
    name, fields = _record_parts(value)
    return {"$class": [name, to_plain(fields)]}


def _looks_tagged(value: dict[str, Any]) -> bool:
    return len(value) == 1 and next(iter(value)).startswith("$")


def _zone(tz: _dt.tzinfo | None, sample: Any) -> Any:
    if tz is None:
        return None
    key = getattr(tz, "key", None)
    if isinstance(key, str):
        return key
    offset = tz.utcoffset(sample)
    return None if offset is None else offset // _dt.timedelta(microseconds=1)


def _record_parts(value: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(value, Opaque):
        return value.name, value.fields
    ext = msgpack.unpackb(encode(value), ext_hook=msgpack.ExtType)
    if not isinstance(ext, msgpack.ExtType) or ext.code != _CODEC_RECORD:
        raise TypeError(f"{type(value).__qualname__} is not a value the codec carries")
    name, fields = decode(ext.data)
    return name, fields


def from_plain(value: Any, where: str = "value") -> Any:
    """The value `to_plain` gave ``value`` for.

    Raises:
        HistoryFormatError: ``value`` is not what `to_plain` writes (an
            unknown tag, a tag of the wrong shape), naming ``where``; or it
            holds a ``@serializable`` class no imported module registers.
    """
    kind = type(value)
    if value is None or kind in (bool, str, int, float):
        return value
    if kind is list:
        return [from_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if kind is not dict:
        raise bad(where, f"is a {kind.__name__}, which JSON does not give")
    if not _looks_tagged(value):
        return {k: from_plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    ((tag, inner),) = value.items()
    at = f"{where}[{tag!r}]"
    try:
        return _untag(tag, inner, at)
    except HistoryFormatError:
        raise
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise bad(at, f"does not read as {tag} ({exc})") from None


def _untag(tag: str, inner: Any, at: str) -> Any:
    if tag in ("$tuple", "$set", "$frozenset"):
        if type(inner) is not list:
            raise ValueError("not a list")
        items = [from_plain(item, f"{at}[{i}]") for i, item in enumerate(inner)]
        return {"$tuple": tuple, "$set": set, "$frozenset": frozenset}[tag](items)
    if tag == "$map":
        pairs = [
            (from_plain(k, f"{at}[{i}][0]"), from_plain(v, f"{at}[{i}][1]"))
            for i, (k, v) in enumerate(inner)
        ]
        return dict(pairs)
    if tag == "$bytes":
        return base64.b64decode(_text(inner), validate=True)
    if tag == "$int":
        return int(_text(inner))
    if tag == "$float":
        if inner not in ("nan", "inf", "-inf"):
            raise ValueError(f"{inner!r} is not nan, inf or -inf")
        return float(inner)
    if tag in ("$datetime", "$time"):
        naive, zone, fold = inner
        cls = _dt.datetime if tag == "$datetime" else _dt.time
        return cls.fromisoformat(_text(naive)).replace(tzinfo=_tz(zone), fold=fold)
    if tag == "$date":
        return _dt.date.fromisoformat(_text(inner))
    if tag == "$timedelta":
        days, seconds, micros = inner
        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if tag == "$decimal":
        return decimal.Decimal(_text(inner))
    if tag == "$uuid":
        return uuid.UUID(_text(inner))
    if tag == "$class":
        return _record_value(inner, at)
    raise bad(at, f"is an unknown tag {tag!r} (a map whose one key starts with '$' is $map)")


def _text(value: Any) -> str:
    if type(value) is not str:
        raise ValueError(f"{value!r} is not a str")
    return value


def _tz(zone: Any) -> _dt.tzinfo | None:
    if zone is None:
        return None
    if isinstance(zone, str):
        return zoneinfo.ZoneInfo(zone)
    if zone == 0:
        return _dt.UTC
    return _dt.timezone(_dt.timedelta(microseconds=zone))


def _record_value(inner: Any, at: str) -> Any:
    name, fields = inner
    fields = from_plain(fields, f"{at}[1]")
    if not isinstance(name, str) or not isinstance(fields, dict):
        raise ValueError("not [codec name, {field: value}]")
    # Built by the codec from its own encoding of a record, so the class
    # registered under ``name`` makes it, exactly as a journal read would.
    data = msgpack.packb(msgpack.ExtType(_CODEC_RECORD, encode([name, fields])))
    try:
        return decode(data)
    except ValueError as exc:
        raise HistoryFormatError(
            f"the history's {at} is a {name!r}, which no imported module registers: import "
            "the module that defines it (decorated with @actors.serializable) first, or pass "
            f"--import MODULE to the command line ({exc})"
        ) from None


def bad(where: str, what: str) -> HistoryFormatError:
    return HistoryFormatError(
        f"not a readable history: {where} {what}; export it again with "
        "'python -m actors export ADDRESS'"
    )
