"""Each argument's digest (`storage.argument_digests`, a step entry's ``p``):
the pieces it digests are the very bytes the whole digest (``h``) encodes,
so ``h`` is what it always was; the field is stored, read back and carried
through a history's export and import."""

from __future__ import annotations

import zlib

from hypothesis import given, settings, strategies as st

from actors import Context, Signal, process
from actors._tools import _history
from storage import EncodeError, LogEntry, MemoryJournal, argument_digests, encode
from storage._digests import pieces
from tests import strategies as S
from tests.runtime_helpers import wait_status

go = Signal("go")

keywords = st.dictionaries(st.text(max_size=8), S.values(), max_size=20)


def _header(n: int, fix: int, word: int, long: int) -> bytes:
    if n < 16:
        return bytes([fix | n])
    if n < 0x10000:
        return bytes([word]) + n.to_bytes(2, "big")
    return bytes([long]) + n.to_bytes(4, "big")


def _joined(name: str, args: list, kwargs: dict) -> bytes:
    """``[name, args, kwargs]`` encoded from the pieces: headers and the
    pieces joined, as msgpack lays a list and a map out."""
    positional, values = pieces(args, kwargs)
    out = [b"\x93", encode(name), _header(len(args), 0x90, 0xDC, 0xDD), *positional]
    out.append(_header(len(kwargs), 0x80, 0xDE, 0xDF))
    for key, piece in zip(kwargs, values, strict=True):
        out += [encode(key), piece]
    return b"".join(out)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=10), st.lists(S.values(), max_size=20), keywords)
def test_the_pieces_are_the_bytes_of_the_whole_encoding(name, args, kwargs):
    assert encode([name, args, kwargs]) == _joined(name, args, kwargs)
    parts = argument_digests(args, kwargs)
    if not args and not kwargs:
        assert parts is None
        return
    positional, values = pieces(args, kwargs)
    assert [
        b"".join(zlib.crc32(p).to_bytes(4, "big") for p in positional),
        {k: zlib.crc32(v).to_bytes(4, "big") for k, v in zip(kwargs, values, strict=True)},
    ] == parts


def test_long_argument_lists_and_keyword_maps_take_the_long_headers():
    for n in (15, 16, 65_535, 65_536):
        args, kwargs = list(range(n)), {f"k{i}": i for i in range(min(n, 70_000))}
        assert encode(["s", args, kwargs]) == _joined("s", args, kwargs)


def test_an_argument_nested_past_the_limit_is_refused_as_in_the_whole():
    # The pieces sit at the depth they have in the whole: msgpack refuses
    # one only where it refuses the whole (storage._digests's invariant).
    outcomes = set()
    for depth in range(1015, 1030):
        arg = S.nest(depth, lambda v: [v])
        for args, kwargs in (([arg], {}), ([], {"k": arg})):
            try:
                encode(["s", args, kwargs])
                whole = True
            except EncodeError:
                whole = False
            assert whole == (argument_digests(args, kwargs) is not None), depth
            outcomes.add(whole)
    assert {True, False} == outcomes  # both sides of the limit were met


def test_the_field_is_stored_and_read_back():
    entry = LogEntry("step", "charge", b"12345678", parts=[b"abcdefgh", {"currency": b"wxyz"}])
    stored = entry.to_stored()
    assert [b"abcdefgh", {"currency": b"wxyz"}] == stored["p"]
    assert entry == LogEntry.from_stored(stored)
    assert entry == LogEntry._checked(stored)
    # An entry written before: no "p", parts None, the same hash.
    old = LogEntry.from_stored({"k": "step", "n": "charge", "h": b"12345678"})
    assert (None, b"12345678") == (old.parts, old.hash)


def charge(order: str, amount: int, *, currency: str = "EUR") -> str:
    return f"{order}:{amount}{currency}"


@process("orders/:id")
async def order(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="EUR")
    await ctx.wait(go)
    return id


async def test_a_history_carries_the_argument_digests(autojump_clock):
    import actors

    journal = MemoryJournal()
    async with actors.open_system(journal, processes=[order]) as system:
        await wait_status(await system.start(order, "o-1"), "suspended")
        history = await _history.read_history(journal, "orders/o-1")
    (one,) = history.instances
    (log,) = one.runs.values()
    assert [8, ["currency"]] == [len(log[1].parts[0]), list(log[1].parts[1])]
    again = _history.loads(_history.dumps(history))
    assert log == next(iter(again.instances[0].runs.values()))
