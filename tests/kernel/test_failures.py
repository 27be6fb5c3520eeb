"""The error record's stored form (actors/_kernel/_failures.py): any map a journal
holds reads back and is written back as it was, what the runtime writes is
the map it wrote before the record had a class (so journals are unchanged),
and replay raises from it the exception the process saw."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

import actors
from actors import Context, process
from actors._kernel._failures import ErrorRecord
from storage import decode, encode
from tests.runtime_helpers import wait_status

texts = st.text(max_size=20)
values = st.none() | st.booleans() | st.integers() | texts
stored_maps = st.dictionaries(
    st.sampled_from(
        [
            "raise",
            "child",
            "type",
            "message",
            "traceback",
            "timeout",
            "summary",
            "stage",
            "crashed",
            "attempts",
            "address",
            "reason",
            "cause",
            "code",
            "z",
        ]
    )
    | texts,
    values,
    max_size=8,
)


@given(stored_maps)
def test_any_stored_map_is_written_back_as_it_was(stored):
    # (None is "absent" for the record's own fields: a stored None of one of
    # them is not written back; no version of the runtime writes one.)
    known = {"raise", "child", "cause", "type", "message", "traceback", "timeout"} | {
        "summary",
        "stage",
        "crashed",
        "attempts",
        "address",
        "reason",
    }
    kept = {k: v for k, v in stored.items() if not (k in known and v is None)}
    assert ErrorRecord.from_stored(decode(encode(stored))).to_stored() == kept


def test_what_the_runtime_writes_is_the_map_it_wrote_before():
    # Each producer's keys, in the order they have always been written.
    try:
        raise ValueError("boom")
    except ValueError as exc:
        described = ErrorRecord.of(exc, summary="step 'a' failed", stage="input validation")
    stored = described.to_stored()
    assert ["type", "message", "traceback", "summary", "stage"] == list(stored)
    assert ("builtins.ValueError", "boom") == (stored["type"], stored["message"])
    assert "ValueError: boom" in stored["traceback"]
    assert ["type", "message"] == list(ErrorRecord.cancelled("by the operator").to_stored())
    undelivered = ErrorRecord.undelivered(actors.NotDelivered("gone", address="a/1", reason="x"))
    assert ["raise", "type", "message", "summary", "address", "reason"] == list(
        undelivered.to_stored()
    )
    child = ErrorRecord(raises="ChildFailed", child="c/1", cause={"type": "T"}, summary="s")
    assert ["raise", "child", "cause", "summary"] == list(child.to_stored())


def test_an_exception_whose_str_raises_is_recorded():
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    record = ErrorRecord.of(Odd())
    assert record.message is not None and "Odd" in record.message
    assert record.summed_up().startswith("Odd: ")


def test_lone_surrogates_are_escaped_so_the_record_encodes():
    record = ErrorRecord.of(ValueError("bad \udc80 text"))
    assert "\\udc80" in (record.message or "")
    encode(record.to_stored())


@pytest.mark.parametrize(
    ("stored", "kind", "fields"),
    [
        ({"type": "x.E", "message": "m"}, actors.StepFailed, {"error_message": "m"}),
        ({"type": "x.E", "timeout": True, "summary": "slow"}, actors.StepTimeout, {}),
        (
            {"raise": "ChildFailed", "child": "c/1", "cause": {"type": "x.E"}, "summary": "s"},
            actors.ChildFailed,
            {"address": "c/1", "error_type": "x.E"},
        ),
        ({"raise": "ProcessCancelled", "reason": "r"}, actors.ProcessCancelled, {"reason": "r"}),
        (
            {"raise": "NotDelivered", "message": "gone", "address": "a/1", "reason": "unknown"},
            actors.NotDelivered,
            {"address": "a/1", "reason": "unknown"},
        ),
    ],
)
def test_replay_raises_what_the_record_names(stored, kind, fields):
    exc = ErrorRecord.from_stored(stored).exception()
    assert type(exc) is kind
    for name, value in fields.items():
        assert value == getattr(exc, name)


def explode() -> None:
    raise KeyError("missing")


GO = actors.Signal("go")


@process("failing/:id")
async def failing(ctx: Context, id: str) -> str:
    try:
        await ctx.step(explode, name="explode")
    except actors.StepFailed as exc:
        seen = f"{type(exc).__name__} {exc.error_type} {exc.error_message}"
    else:
        seen = "no failure"
    await ctx.wait(GO)
    return seen


async def test_a_failed_step_raises_the_same_exception_on_replay_after_a_restart(
    any_opener, autojump_clock
):
    # The second run replays the failed step from its stored record: the
    # process catches the same exception, with the same recorded error.
    async with any_opener(failing) as system:
        await wait_status(await system.start(failing, "f"), "suspended")
    async with any_opener(failing) as system:
        await system.send("failing/f", GO)
        assert "StepFailed builtins.KeyError 'missing'" == await system.get("failing/f").result()
