"""Hostile input gets a named error at the call, never a crash elsewhere.

Bad arguments raise `InvalidArguments`, unstorable values `EncodeError` with
the path to the bad part; a bad value from process code fails that process
cleanly (across a reopen too) and the system stays up; a bad value from a
caller writes nothing.
"""

from __future__ import annotations

import math
import sys

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import Retry, Signal
from actors.errors import ActorError, EncodeError, InvalidArguments
from storage import decode, encode
from storage._codec import MAX_NESTING
from tests.strategies import WRAPPERS, nest, unencodable_texts, values

# -- the codec --------------------------------------------------------------------------


@given(unencodable_texts())
def test_a_lone_surrogate_is_an_encode_error_naming_it(text: str) -> None:
    with pytest.raises(EncodeError) as caught:
        encode({"name": [1, text]}, what="payload")
    assert "payload['name'][1]" == caught.value.path
    assert "not valid Unicode" in str(caught.value)
    assert "errors='replace'" in str(caught.value)


@given(unencodable_texts())
def test_a_lone_surrogate_in_a_key_or_set_is_named_too(text: str) -> None:
    with pytest.raises(EncodeError) as caught:
        encode({text: 1}, what="payload")
    assert caught.value.path.startswith("payload key ")
    with pytest.raises(EncodeError) as caught:
        encode({"s": frozenset([text])}, what="payload")
    assert caught.value.path.startswith("payload['s'] item ")


@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_a_value_nested_ten_thousand_deep_is_an_encode_error(kind: str) -> None:
    value = nest(10_000, WRAPPERS[kind])
    with pytest.raises(EncodeError) as caught:
        encode(value, what="payload")
    message = str(caught.value)
    assert "levels deep" in message and "flatten it" in message
    assert caught.value.path.startswith("payload")
    assert "more levels" in caught.value.path  # abbreviated, not 10,000 segments
    assert len(message) < 1000
    assert caught.value.__cause__ is None  # no 10,000-frame chained traceback


@pytest.mark.parametrize("kind", ["tuple", "frozenset", "record"])
def test_nesting_up_to_the_limit_round_trips_and_one_more_does_not(kind: str) -> None:
    wrap = WRAPPERS[kind]
    limit = MAX_NESTING - 1 if kind == "record" else MAX_NESTING  # Envelope.tags is one deeper
    deepest = nest(limit, wrap)
    assert encode(deepest) == encode(decode(encode(deepest)))
    with pytest.raises(EncodeError, match=f"more than {MAX_NESTING} levels deep"):
        encode(nest(limit + 1, wrap))


def test_lists_nest_as_deep_as_msgpack_allows() -> None:
    deepest = nest(1024, WRAPPERS["list"])
    assert encode(deepest) == encode(decode(encode(deepest)))
    with pytest.raises(EncodeError, match="more than 1024 levels deep"):
        encode(nest(1025, WRAPPERS["list"]))


def test_decode_of_hostile_nesting_is_a_value_error_not_a_crash() -> None:
    # Nested tuple documents far past what encode writes: decoding each level
    # with msgpack.unpackb took ~50 KB of C stack and crashed the process.
    data = msgpack.packb(1)
    for _ in range(5000):
        data = msgpack.packb(msgpack.ExtType(1, msgpack.packb([msgpack.ExtType(1, data)])))
    with pytest.raises(ValueError, match="nested deeper"):
        decode(data)


@pytest.mark.parametrize("digits", [4299, 4300, 4301, 5000, 50_000])
def test_ints_of_any_size_round_trip(digits: int) -> None:
    for value in (10 ** (digits - 1), -(10 ** (digits - 1)) - 7):
        assert value == decode(encode(value))
        assert encode(value) == encode(decode(encode(value)))


@given(st.integers(0, 60_000).map(lambda bits: (1 << bits) - 3), st.booleans())
@settings(max_examples=50)
def test_big_ints_round_trip_exactly(magnitude: int, negative: bool) -> None:
    value = -magnitude if negative else magnitude
    assert value == decode(encode([value]))[0]


def test_the_decimal_encoding_of_big_ints_is_kept() -> None:
    # Journals already hold big ints up to 4300 digits as decimal text; the
    # same value must keep the same bytes (digests of step arguments).
    value = 2**64
    assert msgpack.packb(msgpack.ExtType(4, b"18446744073709551616")) == encode(value)


@given(values())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_supported_values_still_encode_as_before(value: object) -> None:
    assert encode(value) == encode(decode(encode(value)))


def test_the_int_str_conversion_limit_does_not_change_the_bytes() -> None:
    value = 10**4299
    expected = encode(value)
    old = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(640)
        with pytest.raises(EncodeError):  # named, not a bare ValueError
            encode(value)
    finally:
        sys.set_int_max_str_digits(old)
    assert expected == encode(value)
