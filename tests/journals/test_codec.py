"""The msgpack codec: round trips keep value and type, bytes are canonical,
unsupported values fail early with a path, and bad bytes fail as ValueError."""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import enum
import math
import os
import re
import struct
import subprocess
import sys
import uuid
import zoneinfo
from pathlib import Path
from typing import Any

import attrs
import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from storage import ActorError, EncodeError, _codec, decode, digest, encode, serializable
from tests import strategies as S

REPO = Path(__file__).resolve().parents[2]

PROPERTY = settings(max_examples=150, deadline=None)

# -- helpers ---------------------------------------------------------------------------


def _tz(tz: dt.tzinfo | None) -> Any:
    """What the codec promises to keep of a tzinfo: the zone key, or the offset."""
    if tz is None:
        return None
    if isinstance(tz, zoneinfo.ZoneInfo):
        return ("zoneinfo", tz.key)
    return ("offset", tz.utcoffset(None))


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    """Assert ``actual`` equals ``expected`` with the same type at every level."""
    assert (path, type(expected)) == (path, type(actual))
    kind = type(expected)
    if kind is float:
        # Bit patterns, so -0.0 and 0.0 are told apart.
        assert (path, struct.pack("<d", expected)) == (path, struct.pack("<d", actual))
    elif kind is decimal.Decimal:
        # str keeps the exponent and sign that == ignores (1.0 vs 1.00, -0 vs 0).
        assert (path, str(expected)) == (path, str(actual))
    elif kind is dt.datetime or kind is dt.time:
        assert (path, expected.replace(tzinfo=None), expected.fold, _tz(expected.tzinfo)) == (
            path,
            actual.replace(tzinfo=None),
            actual.fold,
            _tz(actual.tzinfo),
        )
    elif kind is list or kind is tuple:
        assert (path, len(expected)) == (path, len(actual))
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_same(e, a, f"{path}[{i}]")
    elif kind is dict:
        assert (path, len(expected)) == (path, len(actual))
        for (ek, ev), (ak, av) in zip(expected.items(), actual.items(), strict=True):
            assert_same(ek, ak, f"{path} key {ek!r}")
            assert_same(ev, av, f"{path}[{ek!r}]")
    elif kind is set or kind is frozenset:
        assert (path, expected) == (path, actual)
        by_value = {item: item for item in actual}
        for item in expected:
            assert_same(item, by_value[item], f"{path} item {item!r}")
    elif attrs.has(kind):
        for field in attrs.fields(kind):
            assert_same(
                getattr(expected, field.name), getattr(actual, field.name), f"{path}.{field.name}"
            )
    else:
        assert (path, expected) == (path, actual)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a test register classes without leaving them registered afterwards."""
    for table in ("_registry", "_names", "_fields", "_aliases"):
        monkeypatch.setattr(_codec, table, dict(getattr(_codec, table)))


# -- round trips -------------------------------------------------------------------------


@PROPERTY
@given(S.values())
def test_round_trip_keeps_value_and_type(value: Any) -> None:
    assert_same(value, decode(encode(value)))
    assert value == decode(encode(value))


@PROPERTY
@given(S.values())
def test_reencoding_a_decoded_value_gives_the_same_bytes(value: Any) -> None:
    data = encode(value)
    assert data == encode(decode(data))


PARIS = zoneinfo.ZoneInfo("Europe/Paris")

RANDOM_UUID = uuid.uuid4()


def _stable_id(value: object) -> str:
    """A test id that is the same in every process (pytest-xdist's workers
    must collect the same tests, each with a hash seed of its own): ``repr``
    without memory addresses, sets sorted, and the random UUID by name."""
    if value is RANDOM_UUID:
        return "UUID(random)"
    if isinstance(value, (set, frozenset)):  # in an order no hash seed changes
        return f"{type(value).__name__}({sorted(map(_stable_id, value))})"
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


EDGE_VALUES = [
    None,
    True,
    False,
    [True, 1, False, 0],
    {True: "bool", 2: "int"},
    (True,),
    frozenset({True, 2}),
    0,
    -1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    -(2**63) - 1,
    10**100,
    -(10**100),
    [2**64, -(2**70)],
    {2**100: -(2**100)},
    math.inf,
    -math.inf,
    -0.0,
    1e-310,  # subnormal
    "",
    "naïve ☃ \U0001f600",
    b"",
    b"\x00\xff",
    (),
    [],
    {},
    set(),
    frozenset(),
    ((), [()], ((),)),
    {(1, "a"): [1], frozenset({1, 2}): (), None: None, 1.5: b"x", "": ""},
    {(1, (2, (3,))): frozenset({(4,), frozenset({5})})},
    [{1, 2}, frozenset({"x"}), (frozenset(),)],
    decimal.Decimal("-0"),
    decimal.Decimal("1.000"),
    decimal.Decimal("1E+5"),
    decimal.Decimal("-1234567890.123456789012345678901234567890"),
    {decimal.Decimal("1.0"): 1},
    dt.datetime.min,
    dt.datetime.max,
    dt.datetime(2024, 3, 1, 12, 30, 15, 123456),
    dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.UTC),
    dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
    dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(microseconds=1))),
    dt.datetime(2024, 7, 1, 12, 30, tzinfo=PARIS),
    dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=0),  # ambiguous: first 02:30
    dt.datetime(2024, 10, 27, 2, 30, tzinfo=PARIS, fold=1),  # ambiguous: second 02:30
    dt.datetime(2024, 3, 31, 2, 30, tzinfo=PARIS),  # in the spring-forward gap
    dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    dt.date.min,
    dt.date.max,
    dt.date(2024, 2, 29),
    dt.time(),
    dt.time(23, 59, 59, 999999),
    dt.time(12, 0, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=45))),
    dt.time(12, 0, tzinfo=PARIS),
    dt.time(1, 30, fold=1),
    dt.timedelta(),
    dt.timedelta(microseconds=-1),
    dt.timedelta.min,
    dt.timedelta.max,
    uuid.UUID(int=0),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    RANDOM_UUID,
    S.Point(1, 2),
    S.Segment(S.Point(0, 0), S.Point(2**70, -1)),
    S.Segment(S.Point(0, 0), S.Point(1, 1), label="diagonal"),
    S.Envelope({"items": [S.Point(1, 2)], (1, 2): {S.Point(3, 4)}}, frozenset({"a"})),
    S.Envelope(S.Envelope(None)),
    S.Sealed(7),
    {S.Point(1, 2): S.Segment(S.Point(0, 0), S.Point(1, 1))},
]


@pytest.mark.parametrize("value", EDGE_VALUES, ids=_stable_id)
def test_round_trip_edge_values(value: Any) -> None:
    assert_same(value, decode(encode(value)))


def test_float_nan_round_trips_as_nan() -> None:
    nan = float("nan")
    decoded = decode(encode([nan, {"x": nan}]))
    assert (float, True) == (type(decoded[0]), math.isnan(decoded[0]))
    assert (float, True) == (type(decoded[1]["x"]), math.isnan(decoded[1]["x"]))


@pytest.mark.parametrize("text", ["NaN", "-NaN", "sNaN", "Infinity", "-Infinity", "NaN123"])
def test_special_decimals_round_trip(text: str) -> None:
    value = decimal.Decimal(text)
    decoded = decode(encode([value]))[0]
    assert (decimal.Decimal, text) == (type(decoded), str(decoded))


def test_record_missing_a_defaulted_field_decodes_with_the_default(registry: None) -> None:
    @serializable(name="tests.codec.Versioned")
    @attrs.frozen
    class V1:
        a: int

    old = encode(V1(1))
    del _codec._registry["tests.codec.Versioned"]

    @serializable(name="tests.codec.Versioned")
    @attrs.frozen
    class V2:
        a: int
        b: str = "new"

    assert V2(1, "new") == decode(old)


def test_record_with_explicit_alias_round_trips(registry: None) -> None:
    @serializable
    @attrs.frozen
    class Aliased:
        value: int = attrs.field(alias="v")
        _hidden: str = "h"

    assert_same(Aliased(v=3, hidden="x"), decode(encode(Aliased(v=3, hidden="x"))))


def test_init_false_fields_are_rebuilt_not_stored(registry: None) -> None:
    @serializable
    @attrs.define
    class Counter:
        start: int
        seen: list[int] = attrs.field(init=False, factory=list)

    counter = Counter(5)
    counter.seen.append(1)
    decoded = decode(encode(counter))
    assert (5, []) == (decoded.start, decoded.seen)


# -- canonical bytes ---------------------------------------------------------------------


@PROPERTY
@given(st.data())
def test_equal_sets_in_any_insertion_order_encode_the_same(data: st.DataObject) -> None:
    items = data.draw(st.lists(S.hashables(), max_size=8, unique=True))
    reordered = list(items)
    data.draw(st.randoms(use_true_random=False)).shuffle(reordered)
    extras = data.draw(st.lists(st.text(), max_size=20))

    grown = set(reordered) | {("extra", e) for e in extras}  # grow, then shrink back
    grown -= {("extra", e) for e in extras}

    expected = encode(set(items))
    assert expected == encode(set(reordered))
    assert expected == encode(grown)
    assert encode(frozenset(items)) == encode(frozenset(reordered))
    assert encode({"s": frozenset(items)}) == encode({"s": frozenset(grown)})


def test_set_bytes_do_not_depend_on_insertion_order_of_strings() -> None:
    words = [f"word-{i}" for i in range(200)]
    forwards = set(words)
    backwards = set(reversed(words))
    assert encode(forwards) == encode(backwards)
    assert digest(frozenset(forwards)) == digest(frozenset(backwards))


_CROSS_PROCESS_VALUE = (
    "{'words': {f'w{i}' for i in range(64)},"
    " 'pairs': frozenset((f'k{i}', frozenset({f'v{i}', f'u{i}'})) for i in range(16)),"
    " 'point': __import__('tests.strategies').strategies.Point(1, 2)}"
)


def _digest_in_subprocess(seed: str) -> tuple[str, str]:
    script = (
        "from storage import digest\n"
        f"value = {_CROSS_PROCESS_VALUE}\n"
        "print(digest(value).hex())\n"
        "print(list(value['words']))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    digest_hex, order = done.stdout.splitlines()
    return digest_hex, order


@pytest.mark.slow  # starts two interpreters: hash seeds only differ across processes
def test_digest_of_string_sets_is_the_same_in_every_process() -> None:
    local = digest(eval(_CROSS_PROCESS_VALUE)).hex()
    digest_1, order_1 = _digest_in_subprocess("1")
    digest_2, order_2 = _digest_in_subprocess("2")
    # The seeds really do change iteration order, so the digests prove something.
    assert order_1 != order_2
    assert [local, local] == [digest_1, digest_2]


# Stored bytes must stay readable forever (ext codes never change meaning).
GOLDEN = [
    ((1, "a"), b"\xd6\x01\x92\x01\xa1a"),
    (frozenset({"b", "a"}), b"\xd6\x03\xa1a\xa1b"),
    ({2}, b"\xd4\x02\x02"),
    (2**64, b"\xc7\x14\x0418446744073709551616"),
    (dt.date(2024, 2, 29), b"\xc7\n\x062024-02-29"),
    (dt.timedelta(days=1, seconds=2, microseconds=3), b"\xd6\x08\x93\x01\x02\x03"),
    (decimal.Decimal("1.50"), b"\xd6\t1.50"),
    (uuid.UUID(int=1), b"\xd8\n" + (1).to_bytes(16, "big")),
    (
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        b"\xc7\x17\x05\x93\xb32024-01-02T03:04:05\x00\x00",
    ),
    (dt.time(1, 2), b"\xc7\x0c\x07\x93\xa801:02:00\xc0\x00"),
]


@pytest.mark.parametrize(("value", "data"), GOLDEN, ids=_stable_id)
def test_golden_bytes(value: Any, data: bytes) -> None:
    assert data == encode(value)
    assert_same(value, decode(data))


# -- encode errors -----------------------------------------------------------------------

ADVICE = (
    "which the codec cannot store; use None, bool, int, float, str, bytes, list, tuple, "
    "dict, set, frozenset, datetime/date/time/timedelta, Decimal, UUID or an attrs class "
    "decorated with @actors.serializable"
)


@attrs.frozen
class Unregistered:
    x: int = 0


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


class Mode(enum.StrEnum):
    FAST = "fast"


class Bag(dict):
    pass


class Name(str):
    pass


class Count(int):
    pass


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (object(), "builtins.object"),
        (lambda: None, "builtins.function"),
        (Unregistered(), "tests.journals.test_codec.Unregistered"),
        (Color.RED, "tests.journals.test_codec.Color"),
        (Level.LOW, "tests.journals.test_codec.Level"),
        (Mode.FAST, "tests.journals.test_codec.Mode"),
        (Bag(), "tests.journals.test_codec.Bag"),
        (Name("n"), "tests.journals.test_codec.Name"),
        (Count(3), "tests.journals.test_codec.Count"),
        (collections.OrderedDict(), "collections.OrderedDict"),
        (1 + 2j, "builtins.complex"),
        (range(3), "builtins.range"),
        (dt.UTC, "datetime.timezone"),
    ],
    ids=lambda v: type(v).__qualname__ if not isinstance(v, str) else v,
)
def test_unsupported_value_raises_encode_error_naming_type_and_fix(
    value: Any, type_name: str
) -> None:
    with pytest.raises(EncodeError) as caught:
        encode(value, what="payload")
    error = caught.value
    assert ("payload", type_name.rsplit(".", 1)[1]) == (error.path, error.value_type)
    assert f"payload is a {type_name}, {ADVICE}" == str(error)
    assert (True, True) == (isinstance(error, TypeError), isinstance(error, ActorError))


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"items": [1, 2, 3, object()]}, "payload['items'][3]"),
        ([0, (1, [Color.RED])], "payload[1][1][0]"),
        ({"ok": 1, Unregistered(): 2}, "payload key Unregistered(x=0)"),
        ({(1, Color.RED): "x"}, "payload key (1, <Color.RED: 1>)[1]"),
        ({"a": {Name("k"): 1}}, "payload['a'] key 'k'"),
        ({"tags": frozenset({Color.RED})}, "payload['tags'] item <Color.RED: 1>"),
        ({3: {Level.LOW}}, "payload[3] item <Level.LOW: 1>"),
        (S.Envelope(object()), "payload.body"),
        (S.Envelope({"items": [1, Color.RED]}), "payload.body['items'][1]"),
        (S.Segment(S.Point(0, 0), S.Point(1, Count(2))), "payload.end.y"),
        (
            S.Envelope(S.Envelope(None, frozenset({Mode.FAST}))),
            "payload.body.tags item <Mode.FAST: 'fast'>",
        ),
        ({"deep": [[[[[[Bag()]]]]]]}, "payload['deep'][0][0][0][0][0][0]"),
    ],
    ids=_stable_id,
)
def test_encode_error_names_the_path_to_the_bad_part(value: Any, path: str) -> None:
    with pytest.raises(EncodeError) as caught:
        encode(value, what="payload")
    assert path == caught.value.path
    assert str(caught.value).startswith(f"{path} is a ")


@pytest.mark.xfail(
    strict=True,
    reason="msgpack packs these natively even with strict_types, so encode accepts them "
    "and decode returns another type (bytes, or what the ext code means); the module "
    "docstring promises EncodeError for them",
)
@pytest.mark.parametrize(
    "value",
    [bytearray(b"x"), memoryview(b"x"), msgpack.ExtType(_codec._TUPLE, msgpack.packb([1]))],
    ids=lambda v: type(v).__qualname__,
)
def test_types_msgpack_packs_natively_are_rejected(value: Any) -> None:
    with pytest.raises(EncodeError):
        encode({"k": value}, what="payload")


def test_encode_error_message_for_a_nested_part_is_exact() -> None:
    with pytest.raises(EncodeError) as caught:
        encode({"items": [1, 2, 3, Color.RED]}, what="payload")
    assert f"payload['items'][3] is a tests.journals.test_codec.Color, {ADVICE}" == str(
        caught.value
    )
    assert "Color" == caught.value.value_type


def test_encode_and_digest_name_the_root_by_default() -> None:
    with pytest.raises(EncodeError) as by_encode:
        encode([object()])
    with pytest.raises(EncodeError) as by_digest:
        digest([object()])
    assert ["value[0]", "arguments[0]"] == [by_encode.value.path, by_digest.value.path]


# -- serializable --------------------------------------------------------------------------


def test_serializable_rejects_a_class_that_is_not_attrs(registry: None) -> None:
    class Plain:
        pass

    with pytest.raises(TypeError) as caught:
        serializable(Plain)
    assert (
        "@serializable needs an attrs class; decorate "
        "test_serializable_rejects_a_class_that_is_not_attrs.<locals>.Plain with "
        "@attrs.define or @attrs.frozen first (put @serializable above it)"
    ) == str(caught.value)
    with pytest.raises(TypeError):
        serializable(name="tests.codec.Plain")(Plain)
    assert "tests.codec.Plain" not in _codec._registry


def test_serializable_rejects_a_name_already_taken(registry: None) -> None:
    @serializable(name="tests.codec.Clash")
    @attrs.frozen
    class First:
        a: int

    @attrs.frozen
    class Second:
        a: int

    with pytest.raises(TypeError) as caught:
        serializable(name="tests.codec.Clash")(Second)
    assert (
        f"codec name 'tests.codec.Clash' is already registered to {First!r}; "
        "pass @serializable(name=...) with a unique name"
    ) == str(caught.value)
    # The first registration is untouched.
    assert_same(First(1), decode(encode(First(1))))
    with pytest.raises(EncodeError):
        encode(Second(1))


def test_serializable_default_name_clash_with_another_module(registry: None) -> None:
    @attrs.frozen
    class Impostor:
        x: int
        y: int

    with pytest.raises(TypeError, match=r"'tests\.strategies\.Point' is already registered"):
        serializable(name="tests.strategies.Point")(Impostor)


def test_serializable_returns_the_class_both_ways(registry: None) -> None:
    @attrs.frozen
    class Bare:
        a: int

    @attrs.frozen
    class Named:
        a: int

    assert [Bare, Named] == [serializable(Bare), serializable(name="tests.codec.Named")(Named)]


# -- decode errors -------------------------------------------------------------------------


def _ext(code: int, payload: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, payload))


GARBAGE = [
    b"",
    b"\xc1",  # the one byte msgpack never uses
    b"\x93\x01",  # array of 3, only one element
    encode([1, 2, 3])[:-1],
    encode(1) + b"\x00",  # trailing bytes
    b"\xd9\x01\xff",  # str that is not UTF-8
    b"\x81\x91\x01\x01",  # map with a list as key
    _ext(99, b""),  # unknown ext code
    _ext(_codec._TUPLE, b"\xc1"),
    _ext(_codec._TUPLE, msgpack.packb(5)),
    _ext(_codec._SET, msgpack.packb([1])),  # a list inside a set
    _ext(_codec._BIGINT, b"twelve"),
    _ext(_codec._DATE, b"not a date"),
    _ext(_codec._DATE, b"\xff"),
    _ext(_codec._DATETIME, msgpack.packb(["2024-01-01T00:00:00", "No/Such_Zone", 0])),
    _ext(_codec._TIME, msgpack.packb(["25:00", None, 0])),
    _ext(_codec._TIMEDELTA, msgpack.packb([1, 2])),
    _ext(_codec._DECIMAL, b"one"),
    _ext(_codec._UUID, b"short"),
    _ext(_codec._ATTRS, msgpack.packb(["tests.strategies.Point", {"nope": 1}])),
    _ext(_codec._ATTRS, msgpack.packb("just a name")),
]


@pytest.mark.parametrize("data", GARBAGE, ids=repr)
def test_decode_of_garbage_raises_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode(data)


def test_decode_of_unregistered_name_says_to_import_the_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = encode({"line": S.Segment(S.Point(0, 0), S.Point(1, 1))})
    monkeypatch.delitem(_codec._registry, "tests.strategies.Segment")
    with pytest.raises(ValueError) as caught:
        decode(data)
    assert (
        "no class is registered under codec name 'tests.strategies.Segment'; import the "
        "module that defines it (decorated with @actors.serializable) before opening the journal"
    ) == str(caught.value)


def test_the_record_code_written_at_import_shows_its_source_in_tracebacks() -> None:
    # InstanceRecord's evolve, to_stored and readers are generated source:
    # a traceback through them names the line, as through any other code.
    import traceback

    from storage import InstanceRecord

    with pytest.raises(TypeError, match="no field 'nope'") as caught:
        InstanceRecord().evolve(nope=1)
    shown = "".join(traceback.format_exception(caught.value))
    assert 'File "<InstanceRecord.evolve>"' in shown
    assert "raise TypeError(f'InstanceRecord has no field {name!r}')" in shown
