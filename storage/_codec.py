"""The msgpack codec every stored value goes through.

Guarantees:

- ``decode(encode(v)) == v`` and ``type`` is kept for every supported value:
  None, bool, int of any size, float, str, bytes, list, tuple, dict (keys of
  any supported hashable type), set, frozenset, datetime (naive, fixed offset
  or zoneinfo), date, time, timedelta, Decimal, UUID, and attrs classes
  registered with `serializable`.
- ``encode`` is canonical: equal values built the same way give equal bytes
  in any process (sets are written in sorted order of their encoded
  elements), so the bytes can be hashed for the replay check.
- Anything else raises `EncodeError` naming the path to the offending value
  (``payload["items"][3]``) before anything is written.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import decimal
import hashlib
import uuid
import zoneinfo
from collections.abc import Iterator
from typing import Any, TypeVar

import attrs
import msgpack

from .errors import EncodeError

__all__ = ["encode", "decode", "digest", "serializable", "Opaque", "lenient_decoding"]

# Ext type codes. Invariant: a code, once released, keeps its meaning forever
# (journals written by older versions must stay readable).
_TUPLE = 1
_SET = 2
_FROZENSET = 3
_BIGINT = 4
_DATETIME = 5
_DATE = 6
_TIME = 7
_TIMEDELTA = 8
_DECIMAL = 9
_UUID = 10
_ATTRS = 11

_registry: dict[str, type] = {}
_names: dict[type, str] = {}
_fields: dict[type, tuple[str, ...]] = {}
# Field name (as stored) -> its __init__ parameter: attrs passes a private ``_x``
# as ``x``, and ``alias=`` renames any field.
_aliases: dict[type, dict[str, str]] = {}

T = TypeVar("T", bound=type)

# Whether a value of an unregistered class decodes as an `Opaque` (see
# `lenient_decoding`) rather than failing. Read only when decoding has
# already failed, so the runtime's decoding costs nothing for it.
_lenient: contextvars.ContextVar[bool] = contextvars.ContextVar("lenient", default=False)


@attrs.frozen
class Opaque:
    """A stored ``@serializable`` value whose class is not registered here:
    its codec name and its fields, as `lenient_decoding` gives it.

    Deliberately not serializable itself, so an `Opaque` can never be
    written back: encoding one raises `EncodeError`.
    """

    name: str
    fields: dict[str, Any]


@contextlib.contextmanager
def lenient_decoding() -> Iterator[None]:
    """Within the block (this thread, and the trio run or tasks started in
    it), decode values of unregistered ``@serializable`` classes as `Opaque`
    placeholders instead of failing.

    For tools that inspect a journal without importing the application (the
    ``actors`` command line): a record holding such a value reads instead of
    looking corrupt. Bytes that are not a valid encoding still fail.
    """
    token = _lenient.set(True)
    try:
        yield
    finally:
        _lenient.reset(token)


def serializable(cls: T | None = None, *, name: str | None = None) -> Any:
    """Register an attrs class with the codec so it round-trips to itself.

    Use as ``@serializable`` or ``@serializable(name="orders.Line")``. The
    name (by default ``module.QualName``) is what is stored: keep it stable
    across renames by passing ``name=``. Fields are stored by name, so adding
    a field with a default keeps old records readable.

    Raises:
        TypeError: ``cls`` is not an attrs class, or the name is taken by
            another class.
    """

    def register(klass: T) -> T:
        if not attrs.has(klass):
            raise TypeError(
                f"@serializable needs an attrs class; decorate {klass.__qualname__} "
                "with @attrs.define or @attrs.frozen first (put @serializable above it)"
            )
        key = name or f"{klass.__module__}.{klass.__qualname__}"
        other = _registry.get(key)
        if other is not None and other is not klass and (
            other.__module__,
            other.__qualname__,
        ) != (klass.__module__, klass.__qualname__):
            raise TypeError(
                f"codec name {key!r} is already registered to {other!r}; "
                "pass @serializable(name=...) with a unique name"
            )
        _registry[key] = klass
        _names[klass] = key
        _fields[klass] = tuple(f.name for f in attrs.fields(klass) if f.init)
        _aliases[klass] = {f.name: f.alias for f in attrs.fields(klass) if f.init}
        return klass

    if cls is None:
        return register
    return register(cls)


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, default=_default, strict_types=True, use_bin_type=True)


def _tz_spec(tz: _dt.tzinfo | None, sample: Any) -> Any:
    if tz is None:
        return None
    if isinstance(tz, zoneinfo.ZoneInfo) and tz.key is not None:
        return tz.key
    offset = tz.utcoffset(sample)
    if offset is None:
        return None
    return offset // _dt.timedelta(microseconds=1)


def _tz_from(spec: Any) -> _dt.tzinfo | None:
    if spec is None:
        return None
    if isinstance(spec, str):
        return zoneinfo.ZoneInfo(spec)
    if spec == 0:
        return _dt.timezone.utc
    return _dt.timezone(_dt.timedelta(microseconds=spec))


def _default(value: Any) -> msgpack.ExtType:
    kind = type(value)
    if kind is tuple:
        return msgpack.ExtType(_TUPLE, _pack(list(value)))
    if kind is set or kind is frozenset:
        # Canonical order: sorted by each element's own bytes, so the same set
        # encodes the same in every process whatever PYTHONHASHSEED is.
        items = sorted(_pack(item) for item in value)
        return msgpack.ExtType(_SET if kind is set else _FROZENSET, b"".join(items))
    if kind is int:  # outside msgpack's 64-bit range
        return msgpack.ExtType(_BIGINT, str(value).encode())
    if kind is _dt.datetime:
        naive = value.replace(tzinfo=None).isoformat()
        return msgpack.ExtType(
            _DATETIME, _pack([naive, _tz_spec(value.tzinfo, value), value.fold])
        )
    if kind is _dt.date:
        return msgpack.ExtType(_DATE, value.isoformat().encode())
    if kind is _dt.time:
        naive = value.replace(tzinfo=None).isoformat()
        return msgpack.ExtType(_TIME, _pack([naive, _tz_spec(value.tzinfo, None), value.fold]))
    if kind is _dt.timedelta:
        return msgpack.ExtType(
            _TIMEDELTA, _pack([value.days, value.seconds, value.microseconds])
        )
    if kind is decimal.Decimal:
        return msgpack.ExtType(_DECIMAL, str(value).encode())
    if kind is uuid.UUID:
        return msgpack.ExtType(_UUID, value.bytes)
    name = _names.get(kind)
    if name is not None:
        fields = {f: getattr(value, f) for f in _fields[kind]}
        return msgpack.ExtType(_ATTRS, _pack([name, fields]))
    raise TypeError(kind)


def _unpack_all(data: bytes) -> list[Any]:
    unpacker = msgpack.Unpacker(
        None, ext_hook=_ext_hook, strict_map_key=False, raw=False, max_buffer_size=0
    )
    unpacker.feed(data)
    return list(unpacker)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, strict_map_key=False, raw=False)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _TUPLE:
        return tuple(_unpack(data))
    if code == _SET:
        return set(_unpack_all(data))
    if code == _FROZENSET:
        return frozenset(_unpack_all(data))
    if code == _BIGINT:
        return int(data)
    if code == _DATETIME:
        naive, tz, fold = _unpack(data)
        return _dt.datetime.fromisoformat(naive).replace(tzinfo=_tz_from(tz), fold=fold)
    if code == _DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == _TIME:
        naive, tz, fold = _unpack(data)
        return _dt.time.fromisoformat(naive).replace(tzinfo=_tz_from(tz), fold=fold)
    if code == _TIMEDELTA:
        days, seconds, micros = _unpack(data)
        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == _DECIMAL:
        return decimal.Decimal(data.decode())
    if code == _UUID:
        return uuid.UUID(bytes=data)
    if code == _ATTRS:
        name, fields = _unpack(data)
        cls = _registry.get(name)
        if cls is None:
            if _lenient.get() and isinstance(name, str) and isinstance(fields, dict):
                return Opaque(name, fields)
            raise ValueError(
                f"no class is registered under codec name {name!r}; import the module "
                "that defines it (decorated with @actors.serializable) before opening the journal"
            )
        aliases = _aliases[cls]
        return cls(**{aliases.get(key, key): item for key, item in fields.items()})
    raise ValueError(f"unknown ext type {code}")


def encode(value: Any, *, what: str = "value") -> bytes:
    """Encode ``value`` to canonical bytes.

    Args:
        value: any supported value (see the module docstring).
        what: how to name the value in an error (``"payload"``, ``"input"``).

    Raises:
        EncodeError: some part of ``value`` is not supported; the message
            names its path and type and what to do instead.
    """
    try:
        return _pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        path, bad = _find_unencodable(value, what) or (what, value)
        raise EncodeError(
            f"{path} is a {type(bad).__module__}.{type(bad).__qualname__}, which the "
            "codec cannot store; use None, bool, int, float, str, bytes, list, tuple, dict, "
            "set, frozenset, datetime/date/time/timedelta, Decimal, UUID or an attrs class "
            "decorated with @actors.serializable",
            path=path,
            value_type=type(bad).__qualname__,
        ) from exc


def decode(data: bytes) -> Any:
    """Decode bytes written by `encode`.

    Raises:
        ValueError: the bytes are not a valid encoding (journals turn this
            into `JournalCorrupt` naming the record).
    """
    try:
        return _unpack(data)
    except ValueError:
        raise
    except Exception as exc:  # msgpack raises a zoo of types on garbage
        raise ValueError(f"undecodable record: {exc!r}") from exc


def digest(value: Any, *, what: str = "arguments") -> bytes:
    """An 8-byte hash of ``value``'s canonical encoding, stable across processes."""
    return hashlib.blake2b(encode(value, what=what), digest_size=8).digest()


_SCALARS = (
    type(None), bool, int, float, str, bytes, _dt.datetime, _dt.date, _dt.time,
    _dt.timedelta, decimal.Decimal, uuid.UUID,
)  # fmt: skip


def _find_unencodable(value: Any, path: str) -> tuple[str, Any] | None:
    """Walk ``value``; return (path, part) for the first unsupported part, or None."""
    kind = type(value)
    if kind in _SCALARS:
        return None
    if kind is list or kind is tuple:
        children = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    elif kind is dict:
        children = (
            pair
            for key, item in value.items()
            for pair in ((f"{path} key {key!r}", key), (f"{path}[{key!r}]", item))
        )
    elif kind is set or kind is frozenset:
        children = ((f"{path} item {item!r}", item) for item in value)
    elif kind in _names:
        children = ((f"{path}.{f}", getattr(value, f)) for f in _fields[kind])
    else:
        return path, value
    for child_path, child in children:
        found = _find_unencodable(child, child_path)
        if found is not None:
            return found
    return None

