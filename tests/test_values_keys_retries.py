"""Values that cross the journal, idempotency keys across incarnations, and
the retry budget across crashes, through the public API.

- What a process (or a watcher, a consumer, a parent) sees of a value that
  crossed the journal is what was encoded: never the caller's own object,
  and the same live as on replay.
- A step's idempotency key names the incarnation, so a cancelled and
  restarted address never repeats a key; within one incarnation it stays
  stable across retries and restarts of the system.
- A step's attempts are counted across crashes: a step that keeps taking
  the process down fails once its budget is spent.
"""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Retry, Signal, process
from actors.testing import open_test_system

go = Signal("go")
data = Signal("data")

# What process code saw, by test: process code may keep notes in globals in
# a test; replay runs it again, so each note is the last value seen.
SEEN: dict[str, object] = {}


# -- hole 1: values are what was encoded ---------------------------------------------


@process("hold/:id")
async def hold(ctx: Context, id: str) -> object:
    """Take a payload, note it, wait for "go", give the payload back."""
    payload = await ctx.wait(data)
    SEEN[ctx.id] = payload
    await ctx.wait(go)
    return payload


@process("inputs/:id")
async def inputs(ctx: Context, id: str, *, items: list, meta: dict) -> object:
    SEEN[ctx.id] = items
    await ctx.wait(go)
    return {"items": items, "meta": meta}


async def test_send_hands_the_process_what_was_encoded(any_opener, autojump_clock):
    sent = {"n": 1, "pair": (1, "a"), "tags": {"x", "y"}, "nested": {"l": [1, 2]}}
    expected = {"n": 1, "pair": (1, "a"), "tags": {"x", "y"}, "nested": {"l": [1, 2]}}
    async with any_opener(hold) as system:
        handle = await system.start(hold, "s1")
        await system.send("hold/s1", data, sent)
        # The sender mutates its object as soon as send returns.
        sent["n"] = 2
        sent["nested"]["l"].append(3)
        sent["tags"].add("z")
        await system.send("hold/s1", go)
        result = await handle.result()
        assert expected == result
        assert expected == SEEN["hold/s1"]
        assert SEEN["hold/s1"] is not sent
        assert tuple == type(result["pair"])


async def test_signal_with_start_hands_the_process_what_was_encoded(any_opener, autojump_clock):
    sent = {"n": 1, "l": [1]}
    async with any_opener(hold) as system:
        handle = await system.signal_with_start(hold, "s2", signal=data, payload=sent)
        sent["n"] = 2
        sent["l"].append(2)
        # A second signal_with_start to the live instance goes through send.
        await system.signal_with_start(hold, "s2", signal=go, payload=sent)
        sent["l"].append(3)
        assert {"n": 1, "l": [1]} == await handle.result()


async def test_start_input_is_what_was_encoded(any_opener, autojump_clock):
    items = [1, 2]
    meta = {"k": (1, 2)}
    async with any_opener(inputs) as system:
        handle = await system.start(inputs, "i1", items=items, meta=meta)
        items.append(3)
        meta["k"] = "changed"
        await system.send("inputs/i1", go)
        assert {"items": [1, 2], "meta": {"k": (1, 2)}} == await handle.result()
        assert SEEN["inputs/i1"] is not items


async def test_live_value_equals_replayed_value(autojump_clock):
    """The same process run in memory and on replay at every suspension sees the same."""
    results = []
    for always_replay in (False, True):
        sent = {"pair": (1, 2), "when": [1.5, None, b"x"], "fs": frozenset({1})}
        async with open_test_system([hold], always_replay=always_replay) as system:
            handle = await system.start(hold, "r")
            await system.send("hold/r", data, sent)
            sent["pair"] = "mutated"
            await system.send("hold/r", go)
            results.append(await handle.result())
    assert results[0] == results[1]
    assert {"pair": (1, 2), "when": [1.5, None, b"x"], "fs": frozenset({1})} == results[0]


STEP_RESULT: dict[str, list[int]] = {"l": [1]}


def shared_result() -> dict[str, list[int]]:
    """A step whose result object lives on after the step (a cache, say)."""
    return STEP_RESULT


@process("stepper/:id")
async def stepper(ctx: Context, id: str) -> object:
    value = await ctx.step(shared_result)
    SEEN[ctx.id] = value
    await ctx.wait(go)
    return value


async def test_step_result_is_what_was_encoded(any_opener, autojump_clock):
    STEP_RESULT["l"] = [1]
    async with any_opener(stepper) as system:
        handle = await system.start(stepper, "t")
        await wait_for_suspended(handle)
        assert SEEN["stepper/t"] is not STEP_RESULT
        STEP_RESULT["l"].append(2)
        await system.send("stepper/t", go)
        assert {"l": [1]} == await handle.result()


@process("publisher/:id")
async def publisher(ctx: Context, id: str) -> None:
    exports = {"stage": 1, "items": [1]}
    await ctx.publish(exports)
    exports["stage"] = 2  # the process keeps using its own object
    exports["items"].append(2)
    await ctx.emit(exports)
    exports["stage"] = 3
    await ctx.emit(exports)
    exports["stage"] = 4
    await ctx.wait(go)


async def test_publish_and_emit_give_what_was_encoded(any_opener, autojump_clock):
    async with any_opener(publisher) as system:
        handle = await system.start(publisher, "p")
        await wait_for_suspended(handle)
        assert {"stage": 1, "items": [1]} == handle.exports
        async with system.stream("publisher/p", consumer="c") as stream:
            got = []
            async for value in stream:
                got.append(value)
                if len(got) == 2:
                    break
        assert [{"stage": 2, "items": [1, 2]}, {"stage": 3, "items": [1, 2]}] == got
    async with any_opener(publisher) as system:
        assert {"stage": 1, "items": [1]} == system.get("publisher/p").exports


CHILD_RESULT: dict[str, list[int]] = {"l": [1]}


@process("kid/:id")
async def kid(ctx: Context, id: str, *, items: list) -> object:
    SEEN[ctx.id] = list(items)
    return CHILD_RESULT


@process("parent/:id")
async def parent(ctx: Context, id: str) -> object:
    items = [1]
    handle = await ctx.spawn(kid, "spawned", restart="temporary", items=items)
    items.append(2)  # after the child exists: it must not see this
    value = await ctx.call(kid, "called", items=[7])
    SEEN[ctx.id] = value
    await ctx.wait(go)
    return {"value": value, "spawned": handle.id}


async def test_child_input_and_call_result_are_what_was_encoded(any_opener, autojump_clock):
    CHILD_RESULT["l"] = [1]
    async with any_opener(parent, kid) as system:
        handle = await system.start(parent, "q")
        await wait_for_suspended(handle)
        assert SEEN["parent/q"] is not CHILD_RESULT
        CHILD_RESULT["l"].append(2)
        await system.send("parent/q", go)
        result = await handle.result()
        assert {"value": {"l": [1]}, "spawned": "parent/q/kid/spawned"} == result
        assert [1] == SEEN["parent/q/kid/spawned"]


async def wait_for_suspended(handle) -> None:
    with trio.fail_after(30):
        while handle.status != "suspended":
            await trio.sleep(0.01)
