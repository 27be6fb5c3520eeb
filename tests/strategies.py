"""Hypothesis strategies for the values the codec carries, and the attrs
records the tests use.

`values()` draws any supported value, nested to any depth; `hashables()` draws
the subset that can be a dict key or a set element. NaN (float and Decimal)
is left out of both because ``NaN != NaN``; tests check it on its own.

The last section draws hostile input: text UTF-8 cannot carry, values nested
past the codec's bounds, durations no timer can have.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import attrs
from hypothesis import strategies as st

from storage import serializable

# -- attrs records registered with the codec -------------------------------------


@serializable
@attrs.frozen
class Point:
    """A hashable record of two ints (usable as a dict key or set element)."""

    x: int
    y: int


@serializable
@attrs.frozen
class Segment:
    """A hashable record nesting two `Point` records, with a defaulted field."""

    start: Point
    end: Point
    label: str = ""


@serializable(name="tests.Envelope")
@attrs.define
class Envelope:
    """A mutable (so unhashable) record whose ``body`` holds any value."""

    body: Any
    tags: frozenset[str] = frozenset()


@serializable
@attrs.frozen
class Sealed:
    """A record with a private field, whose ``__init__`` parameter is ``secret``."""

    _secret: int


# -- scalars -----------------------------------------------------------------------

# msgpack's native ints stop at [-2**63, 2**64); the codec carries the rest as
# an extension type, so draw both sides of both edges.
INT64_EDGES = [-(2**63) - 1, -(2**63), 2**63 - 1, 2**63, 2**64 - 1, 2**64]


def _shifted(n: int, bits: int) -> int:
    return n << bits


# ``_shifted`` rather than bounds like 2**200 keeps hypothesis' repr of the
# strategies short (it spells out every bound at every level of nesting).
ints = st.one_of(
    st.integers(),
    st.builds(_shifted, st.integers(), st.integers(0, 200)),
    st.sampled_from(INT64_EDGES),
)

floats = st.floats(allow_nan=False)  # includes inf, -inf and -0.0

_MAX_OFFSET_US = 24 * 3600 * 10**6 - 1  # datetime.timezone needs |offset| < 1 day

fixed_offsets = st.one_of(
    st.just(dt.UTC),
    st.integers(-_MAX_OFFSET_US, _MAX_OFFSET_US).map(
        lambda us: dt.timezone(dt.timedelta(microseconds=us))
    ),
    st.integers(-23 * 60, 23 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m))),
)

tzinfos = st.one_of(st.none(), fixed_offsets, st.timezones())


@st.composite
def datetimes(draw: st.DrawFn) -> dt.datetime:
    """Naive, fixed-offset and zoneinfo datetimes, with either ``fold``."""
    value = draw(st.datetimes(timezones=tzinfos))
    return value.replace(fold=draw(st.sampled_from([0, 1])))


@st.composite
def times(draw: st.DrawFn) -> dt.time:
    """Naive, fixed-offset and zoneinfo times, with either ``fold``."""
    value = draw(st.times(timezones=tzinfos))
    return value.replace(fold=draw(st.sampled_from([0, 1])))


decimals = st.decimals(allow_nan=False, allow_infinity=False)

points = st.builds(Point, ints, ints)
segments = st.builds(Segment, points, points) | st.builds(Segment, points, points, st.text())
sealed = st.builds(Sealed, ints)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    floats,
    st.text(),
    st.binary(),
    datetimes(),
    st.dates(),
    times(),
    st.timedeltas(),
    decimals,
    st.uuids(),
    points,
    segments,
    sealed,
)


# -- containers ----------------------------------------------------------------------


def hashables() -> st.SearchStrategy[Any]:
    """Values that can be dict keys and set elements: scalars, tuples, frozensets."""
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4).map(tuple),
            st.frozensets(inner, max_size=4),
        ),
        max_leaves=8,
    )


def values() -> st.SearchStrategy[Any]:
    """Any value the codec carries, nested recursively."""
    keys = hashables()
    return st.recursive(
        st.one_of(scalars, keys),
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.lists(inner, max_size=5).map(tuple),
            st.dictionaries(keys, inner, max_size=5),
            st.sets(keys, max_size=5),
            st.frozensets(keys, max_size=5),
            st.builds(Envelope, inner, st.frozensets(st.text(), max_size=3)),
        ),
        max_leaves=12,
    )


# -- hostile input ---------------------------------------------------------------------

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)


@st.composite
def unencodable_texts(draw: st.DrawFn) -> str:
    """A str holding a lone surrogate somewhere: valid Python, not valid UTF-8."""
    before, after = draw(st.text(max_size=5)), draw(st.text(max_size=5))
    return before + draw(SURROGATES) + after


def nest(depth: int, wrap: Any) -> Any:
    """``wrap`` applied ``depth`` times around 1 (``nest(3, list) == [[[1]]]``)."""
    value: Any = 1
    for _ in range(depth):
        value = wrap(value)
    return value


WRAPPERS = {
    "list": lambda v: [v],
    "tuple": lambda v: (v,),
    "dict": lambda v: {"k": v},
    "frozenset": lambda v: frozenset([v]),
    "record": lambda v: Envelope(v),
}

# Durations no timer can have: not finite, negative, past any calendar, or not a number.
bad_seconds = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan, -1, -1e-9, 1e300, 1e20, True, "5", None]),
    st.floats(max_value=-1e-6),
    st.floats(min_value=1e13, allow_infinity=False),
)

# -- damage to a stored journal (tests/journals/test_fuzz_journal.py) ------------------------------

# Names of the fields the runtime reads in its records and log entries, so that
# reshaped values come near the real shapes (a map with a kind of the wrong type)
# rather than only far from them.
_RUNTIME_FIELDS = [
    "k",
    "n",
    "h",
    "v",
    "e",
    "s",
    "m",
    "a",
    "due",
    "run",
    "inc",
    "params",
    "input",
    "parent",
    "restarts",
    "last_error",
    "created",
    "updated",
]
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)


def msgpack_shapes() -> st.SearchStrategy[Any]:
    """Values plain msgpack carries (what a record of another shape decodes to),
    weighted towards maps that use the runtime's own field names."""
    near = st.dictionaries(st.sampled_from(_RUNTIME_FIELDS), _scalars, max_size=4)
    far = st.recursive(
        _scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=6,
    )
    return near | far | st.lists(st.text(max_size=4) | _scalars, min_size=2, max_size=3)


# Every key a log entry may store, and one no version knows.
_ENTRY_KEYS = [
    "k",
    "n",
    "h",
    "v",
    "e",
    "m",
    "s",
    "a",
    "f",
    "c",
    "key",
    "due",
    "child",
    "q",
    "p",
    "later",
]
_entry_values = st.one_of(
    _scalars,
    st.sampled_from(["sleep", "wait", "step"]),
    st.lists(_scalars, max_size=2),
    st.dictionaries(st.text(max_size=2), _scalars, max_size=2),
)


def log_entry_maps() -> st.SearchStrategy[dict[str, Any]]:
    """Maps with a log entry's keys, in any order, each holding a value of
    any type: most read as an entry, many are reported as corrupt."""
    return st.dictionaries(st.sampled_from(_ENTRY_KEYS), _entry_values, max_size=6)


def journal_mutations(kind: str) -> st.SearchStrategy[Any]:
    """The argument of one mutation of ``kind`` (see `tests.journal_damage.damage`)."""
    if kind == "flip":
        return st.tuples(st.integers(0, 1 << 16), st.integers(1, 255))
    if kind == "truncate":
        return st.integers(0, 1 << 16)
    if kind == "reshape":
        return msgpack_shapes()
    return st.none()  # delete, delete_counter
