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

import shutil

import pytest
import trio

import actors
from actors import Context, Retry, Signal, process
from actors.testing import open_test_system
from storage import LMDBJournal, Txn, instance_id
from tests.runtime_helpers import virtual_wall

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
        assert tuple is type(result["pair"])


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


# -- hole 2: idempotency keys name the incarnation -------------------------------------

KEYS: list[str] = []


async def charge_card(amount: int) -> str:
    info = actors.current_step()
    KEYS.append(info.key)
    return info.key


async def refund(amount: int) -> None:
    KEYS.append(actors.current_step().key)


@process("orders/:order_id")
async def order(ctx: Context, order_id: str, *, amount: int) -> str:
    key = await ctx.step(charge_card, amount, name="charge_card", compensate=refund)
    _signal, payload = await ctx.receive(go)
    if payload == "fail":
        raise RuntimeError("rejected")
    if payload == "again":
        await ctx.continue_as_new(amount=amount + 1)
    return key


async def test_a_fresh_incarnation_never_repeats_a_key(any_opener, autojump_clock):
    KEYS.clear()
    async with any_opener(order) as system:
        first = await system.start(order, "o-17", amount=100)
        await wait_for_suspended(first)
        assert await system.cancel("orders/o-17")
        second = await system.start(order, "o-17", amount=100)
        await wait_for_suspended(second)
    assert ["orders/o-17/1/0/charge_card/1", "orders/o-17/2/0/charge_card/1"] == KEYS
    # Across a restart of the system: the recorded step is not run again,
    # and the keys of the same incarnation stay what they were.
    async with any_opener(order) as system:
        await system.send("orders/o-17", go, "again")  # continue as new: run 1
        await wait_for_suspended(system.get("orders/o-17"))
        await system.send("orders/o-17", go, "fail")
        with pytest.raises(actors.ProcessFailed):
            await system.get("orders/o-17").result()
    assert [
        "orders/o-17/1/0/charge_card/1",
        "orders/o-17/2/0/charge_card/1",
        "orders/o-17/2/1/charge_card/1",
        # Both registered compensations ran, newest first, keyed by incarnation.
        "orders/o-17/2/1/charge_card/1/compensate",
        "orders/o-17/2/0/charge_card/1/compensate",
    ] == KEYS


ATTEMPTS: list[tuple[int, str]] = []
RELEASE: dict[str, trio.Event] = {}


async def blocking_charge() -> str:
    """Blocks on its first two attempts (the system closes meanwhile)."""
    info = actors.current_step()
    ATTEMPTS.append((info.attempt, info.key))
    if info.attempt < 3:
        await trio.sleep_forever()
    return info.key


@process("blocking/:id")
async def blocking(ctx: Context, id: str) -> str:
    return await ctx.step(blocking_charge, name="charge", retry=Retry(attempts=2, backoff=0))


async def test_key_is_stable_within_an_incarnation_across_closes(any_opener, autojump_clock):
    ATTEMPTS.clear()
    async with any_opener(blocking) as system:
        await system.start(blocking, "b")
        await wait_until(lambda: len(ATTEMPTS) == 1)
        assert await system.cancel("blocking/b")
        await system.start(blocking, "b")  # incarnation 2
        await wait_until(lambda: len(ATTEMPTS) == 2)
    # Closing is not a crash: the attempt cut short by each close is not
    # spent, so a budget of 2 still allows the third attempt to run.
    async with any_opener(blocking) as system:
        await wait_until(lambda: len(ATTEMPTS) == 3)
    async with any_opener(blocking) as system:
        assert "blocking/b/2/0/charge/1" == await system.get("blocking/b").result()
    assert [
        (1, "blocking/b/1/0/charge/1"),
        (1, "blocking/b/2/0/charge/1"),
        (2, "blocking/b/2/0/charge/1"),
        (3, "blocking/b/2/0/charge/1"),
    ] == ATTEMPTS


async def wait_until(predicate) -> None:
    with trio.fail_after(30):
        while not predicate():
            await trio.sleep(0.01)


# -- hole 3: the retry budget counts crashes, for an at-most-once step ---------------------
#
# (A step without at_most_once=True runs again after a crash, outside its
# retry budget: tests/features/test_step_crashes.py.)
#
# A crash, simulated in process: while an attempt runs, the step function
# copies the journal's files (everything committed so far, the attempt's
# start included) to a new directory, the state a SIGKILL at that moment
# would leave. Opening a system on the copy is the restart after the crash.
# (tests/whole/test_retry_crash.py does the same with a real SIGKILL.)

CRASHES: dict[str, object] = {}
LEDGER: list[str] = []


async def crashing_charge(amount: int) -> str:
    info = actors.current_step()
    LEDGER.append(f"charge {info.key} attempt {info.attempt}")
    source = CRASHES["source"]
    target = CRASHES["root"] / f"crash-{len(CRASHES['copies'])}"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("owner.lock", "*control.sock*"))
    CRASHES["copies"].append(target)
    await trio.sleep_forever()  # the process "died" here


async def undo_charge(amount: int) -> None:
    info = actors.current_step()
    LEDGER.append(f"undo {info.key} forward_result={info.forward_result!r}")


@process("crashy/:id")
async def crashy(ctx: Context, id: str, *, attempts: int) -> str:
    retry = Retry(attempts=attempts, backoff=0) if attempts > 1 else None
    try:
        return await ctx.step(
            crashing_charge,
            5,
            name="charge",
            retry=retry,
            compensate=undo_charge,
            at_most_once=True,
        )
    except actors.StepFailed as exc:
        LEDGER.append(f"caught {type(exc).__name__}")
        raise


@process("caller/:id")
async def caller(ctx: Context, id: str) -> str:
    try:
        return await ctx.call(crashy, "kid", attempts=1)
    except actors.ChildFailed as exc:
        return f"ChildFailed: {exc}"


def _open(path, *procs):
    return actors.open_system(LMDBJournal(path), processes=list(procs), now=virtual_wall)


async def _crash_until_done(tmp_path, start) -> tuple[int, object]:
    """Start with ``start(system)``, then restart from each crash copy until
    nothing crashes any more; returns (crashes, the last system's outcome)."""
    CRASHES.update(root=tmp_path, copies=[], source=tmp_path / "journal")
    LEDGER.clear()
    async with _open(tmp_path / "journal", crashy, caller) as system:
        await start(system)
        await wait_until(lambda: len(CRASHES["copies"]) == 1)
    crashes = 0
    while True:
        assert crashes < 8, f"still crashing after {crashes} restarts: {LEDGER}"
        path = CRASHES["copies"][crashes]
        crashes += 1
        CRASHES["source"] = path
        async with _open(path, crashy, caller) as system:
            with trio.move_on_after(60):
                while len(CRASHES["copies"]) == crashes:
                    for address in ("caller/c", "crashy/x"):
                        handle = system.get(address)
                        if handle is not None and handle.status in ("completed", "failed"):
                            try:
                                return crashes, await handle.result()
                            except actors.ProcessFailed as exc:
                                return crashes, exc
                    await trio.sleep(0.01)
            assert len(CRASHES["copies"]) == crashes + 1, "neither crashed nor ended"


async def test_crashes_spend_the_retry_budget(tmp_path, autojump_clock):
    async def start(system):
        await system.start(crashy, "x", attempts=3)

    crashes, outcome = await _crash_until_done(tmp_path, start)
    assert 3 == crashes  # attempts 1, 2 and 3 each took the process down
    assert isinstance(outcome, actors.ProcessFailed)
    assert "attempt 3 of 3 was interrupted by a crash" in str(outcome)
    assert "3 of the 3 attempt(s) spent did not finish" in str(outcome)
    key = "crashy/x/1/0/charge/1"
    assert [
        f"charge {key} attempt 1",
        f"charge {key} attempt 2",
        f"charge {key} attempt 3",
        "caught StepFailed",  # the process sees it like any step failure
        f"undo {key}/compensate forward_result=None",  # it may have applied: undone
    ] == LEDGER


async def test_one_crash_spends_a_single_attempt_and_the_parent_is_told(tmp_path, autojump_clock):
    async def start(system):
        await system.start(caller, "c")

    crashes, outcome = await _crash_until_done(tmp_path, start)
    assert 1 == crashes
    assert isinstance(outcome, str) and outcome.startswith("ChildFailed: ")
    assert "attempt 1 of 1 was interrupted by a crash" in outcome
    key = "caller/c/crashy/kid/1/0/charge/1"
    assert [
        f"charge {key} attempt 1",
        "caught StepFailed",
        f"undo {key}/compensate forward_result=None",
    ] == LEDGER


async def test_a_spent_step_fails_the_same_on_replay(tmp_path, autojump_clock):
    async def start(system):
        await system.start(crashy, "x", attempts=1)

    crashes, outcome = await _crash_until_done(tmp_path, start)
    assert 1 == crashes
    # The failure is recorded: a reopen gives the same error, nothing runs again.
    async with _open(CRASHES["source"], crashy, caller) as system:
        with pytest.raises(actors.ProcessFailed) as again:
            await system.get("crashy/x").result()
        assert str(outcome) == str(again.value)
        with system.journal.reader() as r:
            [entry] = r.log(instance_id("crashy/x"), 0).values()
        assert 1 == entry["a"] and 1 == entry["e"]["crashed"]
    assert 3 == len(LEDGER)


async def test_a_started_record_from_before_crashes_counted_keeps_its_budget(
    tmp_path, autojump_clock
):
    """A journal whose step attempt was started by a version that did not
    count crashes (no "c" in the record): its unfinished attempts are not
    charged to the budget, so the step still runs."""
    path = tmp_path / "journal"
    async with _open(path, crashy, caller) as system:
        await system.start(crashy, "old", attempts=1)
        CRASHES.update(root=tmp_path, copies=[], source=path)
        await wait_until(lambda: len(CRASHES["copies"]) == 1)
    crashed = CRASHES["copies"][0]
    journal = LMDBJournal(crashed)
    async with journal:
        iid = instance_id("crashy/old")
        with journal.reader() as r:
            [(seq, entry)] = r.log(iid, 0).items()
        assert {"a": 1, "f": 0, "c": 0} == {k: entry[k] for k in ("a", "f", "c")}
        del entry["c"]
        txn = Txn()
        txn.put_log(iid, 0, seq, entry)
        await journal.commit(txn)
    LEDGER.clear()
    CRASHES["source"] = crashed
    async with _open(crashed, crashy, caller) as system:
        await wait_until(lambda: len(CRASHES["copies"]) == 2)  # it ran (and "crashed") again
    assert ["charge crashy/old/1/0/charge/1 attempt 2"] == LEDGER


GLOBAL_ITEMS: list[int] = [1]


@process("looper/:id")
async def looper(ctx: Context, id: str, *, items: list, rounds: int = 0) -> object:
    if rounds == 0:
        await ctx.continue_as_new(items=GLOBAL_ITEMS, rounds=1)
    items.append(2)  # the new run's own copy: the module's list is untouched
    await ctx.wait(go)
    return items


async def test_continue_as_new_input_is_what_was_encoded(any_opener, autojump_clock):
    GLOBAL_ITEMS[:] = [1]
    async with any_opener(looper) as system:
        handle = await system.start(looper, "l", items=[])
        await wait_for_suspended(handle)
        assert [1] == GLOBAL_ITEMS
        await system.send("looper/l", go)
        assert [1, 2] == await handle.result()


async def test_a_value_the_codec_changes_arrives_changed_live_as_on_replay(
    any_opener, autojump_clock
):
    """msgpack stores a bytearray as bytes: the live process gets bytes, as
    a replay does, not the sender's bytearray."""
    async with any_opener(hold) as system:
        handle = await system.start(hold, "b")
        await system.send("hold/b", data, {"raw": bytearray(b"ab")})
        await system.send("hold/b", go)
        result = await handle.result()
        assert {"raw": b"ab"} == result
        assert bytes is type(result["raw"])
