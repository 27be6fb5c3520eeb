"""Hostile input gets a named error at the call, never a crash elsewhere.

Bad arguments raise `InvalidArguments`, unstorable values `EncodeError` with
the path to the bad part; a bad value from process code fails that process
cleanly (across a reopen too) and the system stays up; a bad value from a
caller writes nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import sys

import msgpack
import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

import actors
from actors import Context, Retry, Signal, process
from actors._kernel._checks import MAX_SECONDS
from actors.errors import ActorError, EncodeError, InvalidArguments, ProcessFailed
from storage import MemoryJournal, decode, encode, instance_id
from storage._codec import MAX_NESTING
from tests.strategies import WRAPPERS, bad_seconds, nest, unencodable_texts, values

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


# -- process code: the process fails cleanly, the system stays up -------------------------


go = Signal("go")
DEEP = nest(10_000, WRAPPERS["list"])
FAR_EAST = dt.timezone(dt.timedelta(hours=14))


class _NoOffset(dt.tzinfo):
    def utcoffset(self, when: object) -> None:
        return None


class _BrokenZone(dt.tzinfo):
    def utcoffset(self, when: object) -> dt.timedelta:
        raise RuntimeError("no such zone")


def _raise(text: str) -> None:
    raise ValueError(text)


# What process code does with a hostile value, and the error it must get.
PROCESS_CASES = {
    "sleep_inf": (lambda ctx: ctx.sleep(math.inf), "InvalidArguments"),
    "sleep_minus_inf": (lambda ctx: ctx.sleep(-math.inf), "InvalidArguments"),
    "sleep_nan": (lambda ctx: ctx.sleep(math.nan), "InvalidArguments"),
    "sleep_negative": (lambda ctx: ctx.sleep(-1), "InvalidArguments"),
    "sleep_1e300": (lambda ctx: ctx.sleep(1e300), "InvalidArguments"),
    "sleep_huge_int": (lambda ctx: ctx.sleep(10**400), "InvalidArguments"),
    "sleep_bool": (lambda ctx: ctx.sleep(True), "InvalidArguments"),
    "sleep_str": (lambda ctx: ctx.sleep("5"), "InvalidArguments"),
    "sleep_until_naive": (lambda ctx: ctx.sleep_until(dt.datetime(2030, 1, 1)), "InvalidArguments"),
    "sleep_until_no_offset": (
        lambda ctx: ctx.sleep_until(dt.datetime(2030, 1, 1, tzinfo=_NoOffset())),
        "InvalidArguments",
    ),
    "sleep_until_broken_tz": (
        lambda ctx: ctx.sleep_until(dt.datetime(2030, 1, 1, tzinfo=_BrokenZone())),
        "InvalidArguments",
    ),
    "step_timeout_nan": (lambda ctx: ctx.step(len, "a", timeout=math.nan), "InvalidArguments"),
    "step_timeout_zero": (lambda ctx: ctx.step(len, "a", timeout=0), "InvalidArguments"),
    "step_timeout_inf": (lambda ctx: ctx.step(len, "a", timeout=math.inf), "InvalidArguments"),
    "step_name_empty": (lambda ctx: ctx.step(len, "a", name=""), "InvalidArguments"),
    "step_name_surrogate": (lambda ctx: ctx.step(len, "a", name="\ud800"), "InvalidArguments"),
    "step_arg_surrogate": (lambda ctx: ctx.step(len, "\ud800"), "EncodeError"),
    "step_arg_deep": (lambda ctx: ctx.step(len, DEEP), "EncodeError"),
    "step_result_surrogate": (lambda ctx: ctx.step(lambda: "\ud800", name="r"), "StepFailed"),
    "step_raises_surrogate": (
        lambda ctx: ctx.step(lambda: _raise(chr(0xDFFF)), name="raise"),
        "StepFailed",
    ),
    "retry_nan": (
        lambda ctx: ctx.step(len, "a", retry=Retry(backoff=math.nan)),
        "InvalidArguments",
    ),
    "retry_zero": (lambda ctx: ctx.step(len, "a", retry=Retry(attempts=0)), "InvalidArguments"),
    "emit_deep": (lambda ctx: ctx.emit(DEEP), "EncodeError"),
    "emit_surrogate": (lambda ctx: ctx.emit(["\ud800"]), "EncodeError"),
    "publish_surrogate": (lambda ctx: ctx.publish({"\ud800": 1}), "EncodeError"),
    "signal_empty": (lambda ctx: ctx.wait(Signal("")), "InvalidArguments"),
    "call_param_surrogate": (lambda ctx: ctx.call(hostile, "\ud800"), "InvalidArguments"),
    "scope_not_iterable": (lambda ctx: ctx.scope(5, hostile), "InvalidArguments"),
    "scope_unhashable_key": (
        lambda ctx: ctx.scope(["a"], hostile, key=lambda item: [item]),
        "InvalidArguments",
    ),
}


@process("hostile/:case")
async def hostile(ctx: Context, case: str) -> object:
    make, _ = PROCESS_CASES[case]
    return await make(ctx)


@process("plain/:name")
async def plain(ctx: Context, name: str) -> object:
    return await ctx.wait(go)


@pytest.mark.parametrize("case", sorted(PROCESS_CASES))
async def test_bad_values_from_process_code_fail_that_process_only(opener, case, autojump_clock):
    expected_type = PROCESS_CASES[case][1]
    async with opener(hostile, plain) as system:
        handle = await system.start(hostile, case)
        with pytest.raises(ProcessFailed) as caught:
            await handle.result()
        assert expected_type == caught.value.error_type.rsplit(".", 1)[-1]
        assert "failed" == handle.status
        # The system is up: another instance runs and finishes.
        other = await system.start(plain, "p")
        await system.send("plain/p", go, 1)
        assert 1 == await other.result()
    # Reopening does not replay the instance into a crash.
    async with opener(hostile, plain) as system:
        await trio.sleep(1)
        handle = system.get(f"hostile/{case}")
        assert "failed" == handle.status
        with pytest.raises(ProcessFailed):
            await handle.result()
        other = await system.start(plain, "q")
        await system.send("plain/q", go, 2)
        assert 2 == await other.result()


@process("sleeper/:name")
async def sleeper(ctx: Context, name: str, *, seconds: object) -> str:
    try:
        await ctx.sleep(seconds)
    except InvalidArguments as exc:
        return f"refused: {exc}"
    return "slept"


@given(bad_seconds)
@settings(max_examples=40, deadline=None)
def test_ctx_sleep_refuses_every_bad_duration_at_the_call(seconds: object) -> None:
    async def main() -> str:
        async with actors.open_system(MemoryJournal(), processes=[sleeper]) as system:
            handle = await system.start(sleeper, "s", seconds=seconds)
            return await handle.result()

    outcome = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert outcome.startswith("refused: ctx.sleep")


@given(st.floats(0, 10 * 365 * 86400) | st.integers(0, 10 * 365 * 86400))
@settings(max_examples=20, deadline=None)
def test_ctx_sleep_takes_every_sane_duration(seconds: float) -> None:
    async def main() -> tuple[str, float]:
        async with actors.open_system(MemoryJournal(), processes=[sleeper]) as system:
            start = trio.current_time()
            handle = await system.start(sleeper, "s", seconds=seconds)
            return await handle.result(), trio.current_time() - start

    outcome, took = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert "slept" == outcome
    assert seconds <= took + 1e-3


# -- callers: a named error, and nothing written ------------------------------------------

CALLER_CASES = {
    "start_param_surrogate": (lambda s: s.start(plain, "\ud800"), InvalidArguments),
    "start_param_empty": (lambda s: s.start(plain, ""), InvalidArguments),
    "start_input_surrogate": (lambda s: s.start(hostile, "x", bogus="\ud800"), InvalidArguments),
    "start_input_deep": (lambda s: s.start(sleeper, "x", seconds=DEEP), EncodeError),
    "start_input_bad_text": (lambda s: s.start(sleeper, "x", seconds="\ud800"), EncodeError),
    "send_address_surrogate": (lambda s: s.send("plain/\ud800", go, 1), InvalidArguments),
    "send_address_empty": (lambda s: s.send("", go, 1), InvalidArguments),
    "send_address_int": (lambda s: s.send(5, go, 1), InvalidArguments),
    "send_payload_surrogate": (lambda s: s.send("plain/live", go, {"k": "\ud800"}), EncodeError),
    "send_payload_deep": (lambda s: s.send("plain/live", go, DEEP), EncodeError),
    "send_signal_str": (lambda s: s.send("plain/live", "go", 1), InvalidArguments),
    "sws_param_surrogate": (
        lambda s: s.signal_with_start(plain, "\ud800", signal=go, payload=1),
        InvalidArguments,
    ),
    "sws_payload_surrogate": (
        lambda s: s.signal_with_start(plain, "new", signal=go, payload="\ud800"),
        EncodeError,
    ),
    "sws_payload_deep": (
        lambda s: s.signal_with_start(plain, "new", signal=go, payload=DEEP),
        EncodeError,
    ),
    "cancel_surrogate": (lambda s: s.cancel("\ud800"), InvalidArguments),
    "resume_surrogate": (lambda s: s.resume_compensation("\ud800"), InvalidArguments),
    "abandon_surrogate": (lambda s: s.abandon_compensation("\ud800"), InvalidArguments),
    "cleanup_nan": (lambda s: s.cleanup(math.nan), InvalidArguments),
    "cleanup_negative": (lambda s: s.cleanup(-1), InvalidArguments),
    "cleanup_inf": (lambda s: s.cleanup(math.inf), InvalidArguments),
    "cleanup_str": (lambda s: s.cleanup("1"), InvalidArguments),
    "query_process_int": (lambda s: s.query(process=5).__anext__(), InvalidArguments),
    "query_process_surrogate": (lambda s: s.query(process="\ud800").__anext__(), InvalidArguments),
    "query_status": (lambda s: s.query(status="asleep").__anext__(), InvalidArguments),
}


async def _enter_stream(system, address, consumer):
    async with system.stream(address, consumer=consumer):
        pass


CALLER_CASES.update(
    {
        "stream_address_surrogate": (lambda s: _enter_stream(s, "\ud800", "c"), InvalidArguments),
        "stream_consumer_surrogate": (
            lambda s: _enter_stream(s, "plain/live", "\ud800"),
            InvalidArguments,
        ),
        "stream_consumer_empty": (lambda s: _enter_stream(s, "plain/live", ""), InvalidArguments),
        "stream_consumer_int": (lambda s: _enter_stream(s, "plain/live", 7), InvalidArguments),
    }
)


def _state(system):
    with system.journal.reader() as r:
        rows = sorted(row.address for row in r.instances())
        mail = r.mailbox(instance_id("plain/live"))
        cursors = r.cursors(instance_id("plain/live"))
    return rows, mail, cursors


@pytest.mark.parametrize("case", sorted(CALLER_CASES))
async def test_bad_values_from_callers_are_named_errors_and_write_nothing(opener, case):
    call, error = CALLER_CASES[case]
    async with opener(hostile, plain, sleeper) as system:
        await system.start(plain, "live")
        before = _state(system)
        with pytest.raises(error) as caught:
            await call(system)
        assert isinstance(caught.value, ActorError)
        assert before == _state(system)
    async with opener(hostile, plain, sleeper) as system:
        assert before == _state(system)
        await system.send("plain/live", go, "still up")
        assert "still up" == await system.get("plain/live").result()


@given(unencodable_texts())
@settings(max_examples=25, deadline=None)
def test_any_lone_surrogate_in_a_name_is_refused_at_the_call(text: str) -> None:
    with pytest.raises(InvalidArguments):
        Signal(text)

    async def main() -> None:
        async with actors.open_system(MemoryJournal(), processes=[plain]) as system:
            for call in (
                lambda: system.start(plain, text),
                lambda: system.send(f"plain/{text}", go),
                lambda: system.cancel(text),
                lambda: _enter_stream(system, "plain/x", text),
            ):
                with pytest.raises(InvalidArguments):
                    await call()
            assert [] == [info async for info in system.query()]

    trio.run(main)


# -- the records a process is made of ------------------------------------------------------


@pytest.mark.parametrize("name", ["", 5, None, "\ud800", b"go"])
def test_signal_with_a_bad_name_is_invalid_arguments(name: object) -> None:
    with pytest.raises(InvalidArguments, match="Signal"):
        Signal(name)


def test_signal_may_not_take_the_runtime_prefix() -> None:
    with pytest.raises(InvalidArguments, match="NUL"):
        Signal("\x00end")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts": 0},
        {"attempts": 2.5},
        {"attempts": True},
        {"attempts": "3"},
        {"backoff": math.nan},
        {"backoff": -1},
        {"backoff": math.inf},
        {"backoff": "1"},
        {"max_backoff": math.nan},
        {"max_backoff": 1e300},
        {"non_retryable": ValueError},
        {"non_retryable": (ValueError, "x")},
    ],
)
def test_retry_with_bad_settings_is_invalid_arguments(kwargs: dict) -> None:
    with pytest.raises(InvalidArguments, match="Retry"):
        Retry(**kwargs)


def test_retry_with_good_settings_is_kept() -> None:
    retry = Retry(attempts=5, backoff=1, max_backoff=60, non_retryable=(KeyError,))
    assert (5, 1.0, 60.0, (KeyError,)) == (
        retry.attempts,
        retry.backoff,
        retry.max_backoff,
        retry.non_retryable,
    )


@process("until/:name")
async def until(ctx: Context, name: str, *, when: dt.datetime) -> str:
    await ctx.sleep_until(when)
    return "woke"


async def test_sleep_until_the_ends_of_the_calendar(opener, autojump_clock):
    async with opener(until, sleeper) as system:
        longest = await system.start(sleeper, "longest", seconds=MAX_SECONDS)
        await trio.sleep(86400)
        assert "suspended" == longest.status
        past = await system.start(until, "past", when=dt.datetime.min.replace(tzinfo=FAR_EAST))
        assert "woke" == await past.result()
        last = dt.datetime.max.replace(tzinfo=dt.UTC)
        future = await system.start(until, "future", when=last)
        await trio.sleep(86400)
        assert "suspended" == future.status
    async with opener(until, sleeper) as system:
        await trio.sleep(86400)
        assert "suspended" == system.get("until/future").status
        assert "suspended" == system.get("sleeper/longest").status


# -- limits say what they mean -----------------------------------------------------------


@pytest.mark.parametrize("signal_name", ["go", "a-much-longer-signal-name-" * 4])
async def test_max_payload_counts_the_payload_alone(opener, signal_name):
    signal = Signal(signal_name)

    @process("limited/:name")
    async def limited(ctx: Context, name: str) -> object:
        return await ctx.wait(signal)

    payload = "x" * 985
    size = len(encode(payload))
    async with opener(limited, max_payload=size) as system:
        handle = await system.start(limited, "a")
        await system.send("limited/a", signal, payload)  # exactly at the limit
        assert payload == await handle.result()
    async with opener(limited, max_payload=size - 1) as system:
        await system.start(limited, "b")
        with pytest.raises(actors.LimitExceeded) as caught:
            await system.send("limited/b", signal, payload)
        assert f"encodes to {size} bytes, over the max_payload={size - 1}" in str(caught.value)


async def test_a_five_thousand_digit_int_crosses_the_journal_exactly(opener, autojump_clock):
    huge = 7 * 10**4999 + 3
    async with opener(plain, passivate_after=0) as system:
        handle = await system.start(plain, "big")
        await system.send("plain/big", go, [huge, -huge])
        assert [huge, -huge] == await handle.result()
    async with opener(plain) as system:
        assert [huge, -huge] == await system.get("plain/big").result()


@pytest.mark.parametrize(
    "options",
    [
        {"passivate_after": math.nan},
        {"passivate_after": -1},
        {"passivate_after": "60"},
        {"max_sync_steps": 0},
        {"max_sync_steps": 2.5},
        {"max_sync_steps": math.inf},
        {"max_payload": 0},
        {"max_payload": -5},
        {"max_payload": math.nan},
    ],
)
async def test_open_system_refuses_bad_options_before_opening(tmp_path, options):
    with pytest.raises(InvalidArguments, match="open_system"):
        async with actors.open_system(MemoryJournal(), processes=[plain], **options):
            pass


async def test_passivate_after_inf_means_never(opener, autojump_clock):
    async with opener(plain, passivate_after=math.inf) as system:
        await system.start(plain, "p")
        await trio.sleep(365 * 86400)
        assert instance_id("plain/p") in system.registry.live
