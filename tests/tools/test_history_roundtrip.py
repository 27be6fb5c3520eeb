"""Histories round-trip: an instance exported while it waits, imported into
another journal and resumed there, finishes as it would have where it ran,
whatever effects it made before (every kind, with outcomes of None, falsy
and large values), and no step recorded before the export runs again.

A history whose log the runtime could not have written (a started record of
an effect that logs its outcome only, as an export that dropped outcomes of
None left) holds its own instance, with a WARNING; the journal still opens
and the other instances run.
"""

from __future__ import annotations

import collections
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import trio
import trio.testing
from hypothesis import strategies as st

import actors
from actors import Context, Signal, process
from actors._tools import _history
from actors.testing import import_history, open_test_system
from storage import Journal, LMDBJournal, MemoryJournal, encode
from tests import strategies

note = Signal("note")  # sent to itself, never taken: unread mail that travels
msg = Signal("msg")  # what its waits and receives take
resume = Signal("resume")  # what it waits for where it is exported
question = Signal("question")

CALLS: list[int] = []  # the plan items whose step function ran, in order
PAUSED: list[str] = []  # the instances that reached the point of export


def give(i: int, value: Any) -> Any:
    CALLS.append(i)
    return value


def reach_pause(address: str) -> None:
    PAUSED.append(address)


@process("echo/:id")
async def echo(ctx: Context, id: str, *, value: Any) -> Any:
    return value


@process("srv/:id")
async def server(ctx: Context, id: str) -> None:
    while True:
        payload = await ctx.wait(question)
        await ctx.reply(payload)


async def _effect(ctx: Context, i: int, kind: str, value: Any, srv: str) -> Any:
    """Plan item ``i``: one effect (or two) of ``kind`` made with ``value``."""
    if kind == "step":
        return await ctx.step(give, i, value)
    if kind == "send":
        return await ctx.send(ctx.id, note, value)
    if kind == "send_many":
        return await ctx.send_many([(ctx.id, note, value), (ctx.id, note, [value])])
    if kind == "sleep":
        return await ctx.sleep(1)
    if kind == "publish":
        return await ctx.publish(value)
    if kind == "emit":
        return await ctx.emit(value)
    if kind == "wait":
        return await ctx.wait(msg)
    if kind == "receive":
        signal, payload = await ctx.receive(msg)
        return [signal.name, payload]
    if kind == "call":
        return await ctx.call(echo, f"c{i}", value=value)
    if kind == "spawn_join":
        child = await ctx.spawn(echo, f"j{i}", value=value)
        return await ctx.join(child)
    if kind == "first":
        return await ctx.first(a=ctx.step(give, i, value), b=ctx.sleep(10**6))
    if kind == "all":
        return await ctx.all(ctx.step(give, i, value), ctx.publish(value))
    if kind == "ask":
        return await ctx.ask(srv, question, value)
    if kind == "patched":
        return ctx.patched(f"patch-{i}")
    if kind == "uuid":
        return ctx.uuid()
    if kind == "random":
        return ctx.random()
    raise AssertionError(kind)


@process("plan/:id")
async def planned(ctx: Context, id: str, *, plan: list[Any], pause: int) -> list[Any]:
    srv = await ctx.spawn(server, "s")
    out = []
    for i, (kind, value) in enumerate(plan):
        if i == pause:
            await ctx.step(reach_pause, ctx.id)
            out.append(await ctx.wait(resume))
        out.append(await _effect(ctx, i, kind, value, srv.id))
    if pause >= len(plan):
        await ctx.step(reach_pause, ctx.id)
        out.append(await ctx.wait(resume))
    return out


PROCESSES = [planned, echo, server]
KINDS = [
    "step",
    "send",
    "send_many",
    "sleep",
    "publish",
    "emit",
    "wait",
    "receive",
    "call",
    "spawn_join",
    "first",
    "all",
    "ask",
    "patched",
    "uuid",
    "random",
]
RECORDED = {"uuid", "random"}  # values drawn live: equal only where the log answers them
TAKES = {"wait", "receive"}  # items that take a message the test sends


def expected(kind: str, value: Any) -> Any:
    """What item ``kind`` made with ``value`` gives the process (its message's
    payload is ``value`` too)."""
    return {
        "step": value,
        "wait": value,
        "receive": ["msg", value],
        "call": value,
        "spawn_join": value,
        "first": ("a", value),
        "all": [value, None],
        "ask": value,
        "patched": True,
    }.get(kind)


def falsy() -> st.SearchStrategy[Any]:
    return st.sampled_from([None, 0, 0.0, False, "", b"", [], {}, (), frozenset()])


def large() -> st.SearchStrategy[Any]:
    return st.sampled_from(
        ["x" * 100_000, 2**200, -(2**64), list(range(5000)), {"k": b"\xff" * 50_000}]
    )


def outcomes() -> st.SearchStrategy[Any]:
    return st.one_of(falsy(), large(), strategies.values())


plans = st.lists(st.tuples(st.sampled_from(KINDS), outcomes()), min_size=1, max_size=7)


class Stores:
    """Where the instance ran (``source``) and where its history goes (``target``)."""

    def __init__(self, backend: str, root: Path) -> None:
        self.backend = backend
        self.root = root
        self.memory = {"source": MemoryJournal(), "target": MemoryJournal()}

    def journal(self, which: str) -> Journal:
        if self.backend == "memory":
            return self.memory[which]
        return LMDBJournal(self.root / which)


async def round_trip(stores: Any, plan: list[tuple[str, Any]], pause: int, resumed: Any) -> None:
    """Run ``plan`` up to ``pause``, export, import, and finish it in both
    journals; check both results and that no step ran twice in one."""
    CALLS.clear()
    PAUSED.clear()
    address = "plan/1"
    before = [value for kind, value in plan[:pause] if kind in TAKES]
    after = [value for kind, value in plan[pause:] if kind in TAKES]
    async with open_test_system(PROCESSES, journal=stores.journal("source")) as system:
        handle = await system.start(planned, "1", plan=[list(item) for item in plan], pause=pause)
        for value in before:
            await system.send(address, msg, value)
        with trio.fail_after(10 * len(plan) + 60):
            while address not in PAUSED:
                await trio.sleep(0.5)
        await actors.testing.wait_quiescent(system)
        assert "suspended" == handle.status
    source = stores.journal("source")
    async with source:
        history = await _history.read_history(source, address)
    file = stores.root / "h.history"
    file.write_bytes(_history.dumps(history))
    # The file says what the journal says: every outcome is one still.
    read_back = _history.loads(file.read_bytes())
    assert [one.runs for one in history.instances] == [one.runs for one in read_back.instances]
    assert address == (await import_history(file, stores.journal("target")))[0]
    ran_before = collections.Counter(CALLS)

    results = {}
    for which in ("target", "source"):
        async with open_test_system(PROCESSES, journal=stores.journal(which)) as system:
            await system.send(address, resume, resumed)
            for value in after:
                await system.send(address, msg, value)
            with trio.fail_after(10 * len(plan) + 60):
                results[which] = await system.get(address).result()

    items = [*plan[:pause], ("resume", resumed), *plan[pause:]]
    if pause >= len(plan):
        items = [*plan, ("resume", resumed)]
    for n, ((kind, value), got, there) in enumerate(
        zip(items, results["target"], results["source"], strict=True)
    ):
        if kind in RECORDED:
            if n < pause:  # recorded before the export: the log answers it in both
                assert got == there
            continue
        want = value if kind == "resume" else expected(kind, value)
        assert encode(want) == encode(got), (n, kind)
        assert encode(want) == encode(there), (n, kind)
    # A step recorded before the export ran once; one after it, once in each journal.
    steps = {i for i, (kind, _) in enumerate(plan) if kind in ("step", "first", "all")}
    assert {i: 1 for i in steps if i < pause} == {i: n for i, n in ran_before.items() if i in steps}
    assert {i: 1 if i < pause else 2 for i in steps} == dict(collections.Counter(CALLS))


def run_round_trip(backend: str, plan: list[tuple[str, Any]], pause: int, resumed: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stores = Stores(backend, Path(tmp))
        trio.run(
            round_trip,
            stores,
            plan,
            pause,
            resumed,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )


@pytest.mark.parametrize("backend", ["memory", "lmdb"])
@hypothesis.given(plan=plans, data=st.data(), resumed=outcomes())
@hypothesis.settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large],
)
def test_an_exported_instance_resumes_and_finishes_in_another_journal(backend, plan, data, resumed):
    pause = data.draw(st.integers(0, len(plan)), label="pause")
    run_round_trip(backend, plan, pause, resumed)


# Every kind with an outcome of None before the export, and once more after.
EVERY_KIND = [(kind, None) for kind in KINDS] + [(kind, 0) for kind in KINDS]


@pytest.mark.parametrize("backend", ["memory", "lmdb"])
def test_every_kind_with_none_round_trips(backend):
    run_round_trip(backend, EVERY_KIND, len(KINDS), None)


async def test_every_kind_with_none_round_trips_on_postgresql(request, tmp_path, autojump_clock):
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from storage import PostgresJournal
    from tests.pg import fresh_schema

    schemas = {which: fresh_schema(request) for which in ("source", "target")}

    class OnPostgres:
        root = tmp_path

        def journal(self, which: str) -> Journal:
            dsn, schema = schemas[which]
            return PostgresJournal(dsn, schema=schema)

    await round_trip(OnPostgres(), EVERY_KIND, len(KINDS), None)


# -- a log the runtime never wrote -----------------------------------------------------


@process("senders/:id")
async def sender(ctx: Context, id: str) -> Any:
    await ctx.send(ctx.id, note, None)  # effect 1
    await ctx.publish(None)  # 2
    await ctx.emit(None)  # 3
    first = await ctx.wait(msg)  # 4: a message without payload
    ctx.uuid()  # 5
    await ctx.sleep(1)  # 6: fired
    return [first, await ctx.wait(msg)]


# What each effect's entry without its value reads as: a started record of
# a kind that writes none.
UNWRITTEN = {1: "send 'senders/bad'", 2: "publish", 3: "emit", 4: "wait 'msg'", 5: "uuid 'uuid'"}


@pytest.mark.parametrize("effect", sorted(UNWRITTEN))
async def test_an_instance_whose_log_the_runtime_never_wrote_is_held_and_the_rest_run(
    effect, tmp_path, autojump_clock, caplog
):
    source = MemoryJournal()
    async with open_test_system([sender], journal=source) as system:
        for name in ("bad", "good"):
            await system.start(sender, name)
            await system.send(f"senders/{name}", msg, None)
        await actors.testing.wait_quiescent(system)
        await trio.sleep(2)
        await actors.testing.wait_quiescent(system)
    async with source:
        for name in ("bad", "good"):
            history = await _history.read_history(source, f"senders/{name}")
            assert 6 == len(history.instances[0].log)
            (tmp_path / f"{name}.history").write_bytes(_history.dumps(history))
    # As an export that left out outcomes of None wrote it: the entry reads
    # as started. And "running", so the open resumes it at once.
    doc = json.loads((tmp_path / "bad.history").read_text())
    (bad,) = doc["instances"]
    bad["status"] = "running"
    (entry,) = [e for e in bad["runs"][0]["log"] if e["effect"] == effect]
    del entry["value"]
    (tmp_path / "bad.history").write_text(json.dumps(doc))
    target = tmp_path / "laptop"
    await import_history(tmp_path / "good.history", LMDBJournal(target))
    await import_history(tmp_path / "bad.history", LMDBJournal(target))

    caplog.set_level(logging.WARNING, logger="actors")
    async with open_test_system([sender], journal=LMDBJournal(target)) as system:
        await system.send("senders/good", msg, "ok")
        assert [None, "ok"] == await system.get("senders/good").result()
        await actors.testing.wait_quiescent(system)
        held = system.get("senders/bad")
        assert "suspended" == held.status
        assert held.stuck is not None and f"effect {effect}" in held.stuck
        assert "cannot be replayed" in held.last_error
        assert f"holds {UNWRITTEN[effect]} at position {effect} with no outcome" in held.last_error
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("senders/bad" in r.getMessage() for r in warned)
    # Nothing of it ran live again: its one message to itself is the one exported.
    async with LMDBJournal(target) as journal:
        history = await _history.read_history(journal, "senders/bad")
    assert [None] == [m.payload for m in history.instances[0].mail]
