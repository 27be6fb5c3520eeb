"""The codec reuses its msgpack packers: the bytes of a value never depend on
what was encoded before it, in which thread, or from inside which encode."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from storage import EncodeError, _codec, decode, encode
from tests import strategies as S


def _fresh(value: Any) -> bytes:
    """``value``'s bytes from a codec state with no packer kept."""
    saved = [list(pool) for pool in _codec._PACKERS]
    for pool in _codec._PACKERS:
        pool.clear()
    try:
        return encode(value)
    finally:
        for pool, packers in zip(_codec._PACKERS, saved, strict=True):
            pool[:] = packers


@settings(max_examples=100, deadline=None)
@given(st.lists(S.values(), min_size=2, max_size=6))
def test_a_value_encodes_the_same_after_any_others(values: list[Any]) -> None:
    expected = [_fresh(value) for value in values]
    assert expected == [encode(value) for value in values]
    assert expected[::-1] == [encode(value) for value in values[::-1]]


def test_a_failed_encode_leaves_nothing_behind_for_the_next() -> None:
    value = {"items": [1, (2, {3, 4}), "x" * 100]}
    expected = encode(value)
    for bad in ({"a": [1, 2, object()]}, (1, (2, (3, object()))), {"s": "\ud800"}):
        with pytest.raises(EncodeError):
            encode(bad)
        assert expected == encode(value)


def test_a_large_value_then_small_ones_round_trip() -> None:
    big = {"blob": b"\x01" * (1 << 20), "rows": [(i, str(i)) for i in range(1000)]}
    assert big == decode(encode(big))
    assert b"\x91\x01" == encode([1])


class _EncodingZone(dt.tzinfo):
    """A zone whose utcoffset encodes a value of its own: the codec asks for
    it while it is packing the datetime that holds it."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def utcoffset(self, when: dt.datetime | None) -> dt.timedelta:
        self.seen.append(encode({"inner": (1, 2), "when": "x" * 40}))
        return dt.timedelta(hours=2)

    def dst(self, when: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(0)

    def tzname(self, when: dt.datetime | None) -> str:
        return "enc"


def test_an_encode_inside_an_encode_gets_its_own_bytes() -> None:
    zone = _EncodingZone()
    value = [(1, "a"), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=zone), {"k": (2, 3)}]
    data = encode(value)
    inner = encode({"inner": (1, 2), "when": "x" * 40})
    assert zone.seen and all(seen == inner for seen in zone.seen)
    plain = [(1, "a"), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))]
    assert decode(data)[:2] == plain
    assert data == encode(value)


def test_threads_encoding_at_once_each_get_their_own_bytes() -> None:
    values = [
        {"n": n, "t": (n, str(n) * (n % 7)), "s": frozenset(range(n % 5)), "l": [n] * (n % 9)}
        for n in range(64)
    ]
    expected = [encode(value) for value in values]
    wrong: list[int] = []
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        for _ in range(200):
            for n, value in enumerate(values):
                if encode(value) != expected[n]:
                    wrong.append(n)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [] == wrong
