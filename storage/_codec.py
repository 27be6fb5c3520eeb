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
  (``payload["items"][3]``) before anything is written: an unsupported type,
  a str that is not valid Unicode (a lone surrogate such as ``"\\ud800"``),
  or a value nested too deeply (tuples, sets, frozensets and records at most
  `MAX_NESTING` levels inside one another; lists and dicts as deep as
  msgpack allows, about a thousand levels).
- ``decode`` never recurses without bound, so a damaged or hostile record
  raises ``ValueError`` rather than exhausting the stack.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import decimal
import functools
import hashlib
import uuid
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast, overload

import attrs
import msgpack

from ._diagnosis import FLATTEN, diagnose
from .errors import EncodeError

__all__ = ["Opaque", "decode", "digest", "encode", "lenient_decoding", "serializable"]

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
_BIGINT_BYTES = 12  # ints too long for a decimal text under Python's conversion limit

#: How deep tuples, sets, frozensets and records may nest inside one another.
#: Each such level is a nested msgpack document: the bound keeps encoding
#: within Python's recursion limit and decoding within any thread's stack.
MAX_NESTING = 100

# Ints of at most this many decimal digits keep the decimal text (_BIGINT)
# they were always stored as; longer ones are stored as bytes, which no
# conversion limit applies to. A fixed bound, not sys.get_int_max_str_digits(),
# so the bytes do not depend on a setting.
_DECIMAL_DIGITS = 4300
_DECIMAL_BOUND = 10**_DECIMAL_DIGITS

# Nested documents decoded with msgpack.unpackb (fast, but about 50 KB of C
# stack each) up to this depth; deeper ones with a heap-allocated Unpacker.
_FAST_DEPTH = 4

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


@overload
def serializable(cls: T, *, name: str | None = None) -> T: ...


@overload
def serializable(cls: None = None, *, name: str | None = None) -> Callable[[T], T]: ...


def serializable(cls: T | None = None, *, name: str | None = None) -> T | Callable[[T], T]:
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
        if (
            other is not None
            and other is not klass
            and (
                other.__module__,
                other.__qualname__,
            )
            != (klass.__module__, klass.__qualname__)
        ):
            raise TypeError(
                f"codec name {key!r} is already registered to {other!r}; "
                "pass @serializable(name=...) with a unique name"
            )
        _registry[key] = klass
        _names[klass] = key
        _fields[klass] = tuple(f.name for f in attrs.fields(klass) if f.init)
        _aliases[klass] = {f.name: f.alias for f in attrs.fields(klass) if f.init}
        return cast(T, klass)  # attrs.has narrowed it to type[AttrsInstance]; it is the T given

    if cls is None:
        return register
    return register(cls)


class _TooDeep(ValueError):
    """Tuples, sets or records nested past MAX_NESTING (found at encode)."""


def _pack(value: Any, depth: int = 0) -> bytes:
    # Every stored value passes here, most of them small: a packer from the
    # pool packs a log entry in a third of the time ``msgpack.packb`` takes
    # (which makes a Packer, and its buffer, per call), and a value holding
    # tuples or sets, which nests a document per level, in a quarter.
    pool = _PACKERS[depth]
    try:
        # Invariant: a packer is in at most one pool list or one call. pop
        # and append are atomic under the GIL, so two threads, or an encode
        # re-entered at the same depth (a datetime's fields, a tzinfo whose
        # utcoffset encodes), each get a packer of their own.
        packer = pool.pop()
    except IndexError:
        packer = msgpack.Packer(
            default=_DEFAULTS[depth], strict_types=True, use_bin_type=True, buf_size=4096
        )
    packed: bytes = packer.pack(value)  # on error the packer is dropped, not reused
    if len(packed) <= _KEEP_PACKER_BYTES:
        pool.append(packer)
    return packed


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
        return _dt.UTC
    return _dt.timezone(_dt.timedelta(microseconds=spec))


def _default(value: Any, depth: int) -> msgpack.ExtType:
    kind = type(value)
    if kind is tuple:
        return msgpack.ExtType(_TUPLE, _pack(list(value), _deeper(depth)))
    if kind is set or kind is frozenset:
        # Canonical order: sorted by each element's own bytes, so the same set
        # encodes the same in every process whatever PYTHONHASHSEED is.
        inner = _deeper(depth)
        items = sorted(_pack(item, inner) for item in value)
        return msgpack.ExtType(_SET if kind is set else _FROZENSET, b"".join(items))
    if kind is int:  # outside msgpack's 64-bit range
        if -_DECIMAL_BOUND < value < _DECIMAL_BOUND:
            return msgpack.ExtType(_BIGINT, str(value).encode())
        size = (value.bit_length() + 8) // 8
        return msgpack.ExtType(_BIGINT_BYTES, value.to_bytes(size, "big", signed=True))
    if kind is _dt.datetime:
        naive = value.replace(tzinfo=None).isoformat()
        return msgpack.ExtType(_DATETIME, _pack([naive, _tz_spec(value.tzinfo, value), value.fold]))
    if kind is _dt.date:
        return msgpack.ExtType(_DATE, value.isoformat().encode())
    if kind is _dt.time:
        naive = value.replace(tzinfo=None).isoformat()
        return msgpack.ExtType(_TIME, _pack([naive, _tz_spec(value.tzinfo, None), value.fold]))
    if kind is _dt.timedelta:
        return msgpack.ExtType(_TIMEDELTA, _pack([value.days, value.seconds, value.microseconds]))
    if kind is decimal.Decimal:
        return msgpack.ExtType(_DECIMAL, str(value).encode())
    if kind is uuid.UUID:
        return msgpack.ExtType(_UUID, value.bytes)
    name = _names.get(kind)
    if name is not None:
        fields = {f: getattr(value, f) for f in _fields[kind]}
        return msgpack.ExtType(_ATTRS, _pack([name, fields], _deeper(depth)))
    raise TypeError(kind)


def _deeper(depth: int) -> int:
    if depth >= MAX_NESTING:
        raise _TooDeep()
    return depth + 1


# One default per depth, made once: the depth rides along at no cost per call.
_DEFAULTS = [functools.partial(_default, depth=depth) for depth in range(MAX_NESTING + 1)]
# Idle packers per depth, for `_pack` (a packer's default knows its depth).
# A pool holds as many packers as were ever busy at once at its depth:
# one per thread that encodes, and one more per re-entry.
_PACKERS: list[list[msgpack.Packer]] = [[] for _ in range(MAX_NESTING + 1)]
# A packer's buffer grows to the largest value it packed and stays that
# size; one that packed more than this is left to be freed, so the pools
# keep a few small buffers, not the memory of the largest record ever seen.
_KEEP_PACKER_BYTES = 64 * 1024


def _unpacker(data: bytes, depth: int) -> msgpack.Unpacker:
    unpacker = msgpack.Unpacker(
        None,
        ext_hook=_hook(depth),
        strict_map_key=False,
        raw=False,
        max_buffer_size=max(len(data), 1),
    )
    unpacker.feed(data)
    return unpacker


def _unpack_all(data: bytes, depth: int) -> list[Any]:
    return list(_unpacker(data, depth))


def _unpack(data: bytes, depth: int = 0) -> Any:
    if depth <= _FAST_DEPTH and _ext_hook is _EXT_HOOK:
        return msgpack.unpackb(data, ext_hook=_HOOKS[depth], strict_map_key=False, raw=False)
    unpacker = _unpacker(data, depth)
    value = unpacker.unpack()
    if unpacker.tell() != len(data):
        raise ValueError("extra bytes after a nested value")
    return value


def _ext_hook(code: int, data: bytes, depth: int = 0) -> Any:
    if depth > MAX_NESTING:
        raise ValueError(f"values nested deeper than {MAX_NESTING} levels")
    inner = depth + 1
    if code == _TUPLE:
        return tuple(_unpack(data, inner))
    if code == _SET:
        return set(_unpack_all(data, inner))
    if code == _FROZENSET:
        return frozenset(_unpack_all(data, inner))
    if code == _BIGINT:
        return int(data)
    if code == _BIGINT_BYTES:
        return int.from_bytes(data, "big", signed=True)
    if code == _DATETIME:
        naive, tz, fold = _unpack(data, inner)
        return _dt.datetime.fromisoformat(naive).replace(tzinfo=_tz_from(tz), fold=fold)
    if code == _DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == _TIME:
        naive, tz, fold = _unpack(data, inner)
        return _dt.time.fromisoformat(naive).replace(tzinfo=_tz_from(tz), fold=fold)
    if code == _TIMEDELTA:
        days, seconds, micros = _unpack(data, inner)
        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == _DECIMAL:
        return decimal.Decimal(data.decode())
    if code == _UUID:
        return uuid.UUID(bytes=data)
    if code == _ATTRS:
        name, fields = _unpack(data, inner)
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


_EXT_HOOK = _ext_hook
_HOOKS = [functools.partial(_ext_hook, depth=depth) for depth in range(MAX_NESTING + 2)]


def _hook(depth: int) -> Any:
    # A replaced _ext_hook (the CLI's lenient decoding of unknown records)
    # is used as it is, at every depth; it decodes without the fast path.
    return _HOOKS[depth] if _ext_hook is _EXT_HOOK else _ext_hook


def encode(value: Any, *, what: str = "value") -> bytes:
    """Encode ``value`` to canonical bytes.

    Args:
        value: any supported value (see the module docstring).
        what: how to name the value in an error (``"payload"``, ``"input"``).

    Raises:
        EncodeError: some part of ``value`` cannot be stored (an unsupported
            type, a str that is not valid Unicode, nesting too deep); the
            message names its path and what to do instead.
    """
    # `_pack` at depth 0, written out: every stored value comes here, and a
    # call less per encode is a call less per write (a send encodes its
    # message, a step its entry; see docs/design.md, "The hot flows").
    pool = _PACKERS[0]
    try:
        packer = pool.pop()  # (the invariant of `_pack`: one packer, one call)
    except IndexError:
        packer = msgpack.Packer(
            default=_DEFAULTS[0], strict_types=True, use_bin_type=True, buf_size=4096
        )
    try:
        packed: bytes = packer.pack(value)  # on error the packer is dropped, not reused
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        error = exc
    else:
        if len(packed) <= _KEEP_PACKER_BYTES:
            pool.append(packer)
        return packed
    problem = diagnose(value, what, _fields, MAX_NESTING)
    if problem is None:
        # Not found by the walk (an attrs field whose getattr fails, say).
        problem = (what, value, f"could not be encoded ({error!r})")
    path, bad, reason = problem
    # A depth error's own chain is a traceback thousands of frames long.
    deep = isinstance(error, (RecursionError, _TooDeep)) or reason.endswith(FLATTEN)
    raise EncodeError(f"{path} {reason}", path=path, value_type=type(bad).__qualname__) from (
        None if deep else error
    )


def decode(data: bytes) -> Any:
    """Decode bytes written by `encode`.

    Raises:
        ValueError: the bytes are not a valid encoding (journals turn this
            into `JournalCorrupt` naming the record).
    """
    try:
        # `_unpack` at depth 0, written out (one call per decode, as encode)
        if _ext_hook is _EXT_HOOK:
            return msgpack.unpackb(data, ext_hook=_HOOKS[0], strict_map_key=False, raw=False)
        return _unpack(data)
    except ValueError:
        raise
    except Exception as exc:  # msgpack raises a zoo of types on garbage
        raise ValueError(f"undecodable record: {exc!r}") from exc


def stream_unpacker() -> Any:
    """A msgpack unpacker that decodes values fed one after another as
    `decode` decodes each, for a loop over many (a run's log), without a
    call of `decode` per value. The caller checks that ``tell()`` moved by
    exactly the length of each value it fed (else the value held more than
    one encoding, or part of one), and on any exception decodes again with
    `decode`, which says what is wrong."""
    return msgpack.Unpacker(
        None, ext_hook=_hook(0), strict_map_key=False, raw=False, max_buffer_size=0
    )  # max_buffer_size 0: no limit below unpackb's, which is the value's length


# The hash `digest` takes of an encoding: ``hash_encoded(encoded).digest()``
# for a caller that holds the encoding already (a C call: none of ours).
hash_encoded = functools.partial(hashlib.blake2b, digest_size=8)


def digest(value: Any, *, what: str = "arguments") -> bytes:
    """An 8-byte hash of ``value``'s canonical encoding, stable across processes."""
    return hash_encoded(encode(value, what=what)).digest()
