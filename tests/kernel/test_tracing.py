"""OpenTelemetry spans through the public API, with the SDK's in-memory
exporter: process runs and step attempts, exceptions recorded, and the
caller's trace carried through the journal into the process, across a
close and reopen of the system. Without a tracer provider nothing is stored."""

from __future__ import annotations

import attrs
import pytest
import trio

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

import actors
from actors import Context, Retry, Signal, process
from actors._kernel import _tracing
from storage import Txn, instance_id
from tests.runtime_helpers import wait_status

go = Signal("go")
attempts: list[int] = []


@pytest.fixture
def exporter(monkeypatch):
    """A real tracer provider for this test only (the global one is set once
    per process by the API, so it is patched rather than set)."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    attempts.clear()
    yield memory
    provider.shutdown()


@pytest.fixture
def tracer(exporter):
    return trace.get_tracer_provider().get_tracer("caller")


def traceparent_of(span) -> str:
    """The W3C traceparent of ``span``, written out by hand."""
    c = span.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


async def _stored(opener, address: str) -> tuple[dict, list]:
    """The record and unread mail of ``address``, as the journal holds them."""
    async with opener.journal() as journal:
        iid = instance_id(address)
        return await journal.read(lambda r: (r.instance(iid).record, r.mailbox(iid)))


def by_name(exporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def charge(order: str) -> str:
    attempts.append(1)
    if len(attempts) == 1:
        raise ConnectionError("card service down")
    return f"ch-{order}"


@process("pay/:id")
async def pay(ctx: Context, id: str) -> str:
    receipt = await ctx.step(charge, id, retry=Retry(attempts=3, backoff=0.1))
    payload = await ctx.wait(go)
    return f"{receipt} {payload}"


async def test_a_run_and_its_step_attempts_are_spans_under_the_callers_trace(
    opener, exporter, tracer, autojump_clock
):
    async with opener(pay) as system:
        with tracer.start_as_current_span("caller") as caller:
            handle = await system.start(pay, "o1")
            await system.send("pay/o1", go, {"n": 1})
        assert "ch-o1 {'n': 1}" == await handle.result()
    (run,) = by_name(exporter, "process pay/:id")
    steps = by_name(exporter, "step charge")
    context = caller.get_span_context()
    assert context.trace_id == run.context.trace_id
    assert context.span_id == run.parent.span_id
    assert {"actors.address": "pay/o1", "actors.run": 0} == dict(run.attributes)
    key = "pay/o1/1/0/charge/1"
    assert [
        {
            "actors.address": "pay/o1",
            "actors.run": 0,
            "actors.step.attempt": n,
            "actors.step.key": key,
        }
        for n in (1, 2)
    ] == [dict(s.attributes) for s in steps]
    assert [run.context.span_id] * 2 == [s.parent.span_id for s in steps]
    # The failed attempt carries its exception; the second is clean.
    assert [["exception"], []] == [[e.name for e in s.events] for s in steps]
    assert "ConnectionError" == steps[0].events[0].attributes["exception.type"]
    assert trace.StatusCode.ERROR == steps[0].status.status_code
    (deliver,) = by_name(exporter, "deliver go")
    assert (context.trace_id, context.span_id) == (deliver.context.trace_id, deliver.parent.span_id)
    assert trace.SpanKind.CONSUMER == deliver.kind


ready = Signal("ready")


@process("later/:id")
async def later(ctx: Context, id: str) -> str:
    receipt = await ctx.step(charge, id, retry=Retry(attempts=3, backoff=0.1))
    await ctx.wait(ready)
    return f"{receipt} {await ctx.wait(go)}"


async def test_the_trace_continues_into_the_process_across_a_close_and_reopen(
    opener, exporter, tracer, autojump_clock
):
    async with opener(later) as system:
        with tracer.start_as_current_span("caller") as caller:
            handle = await system.start(later, "o2")
        assert "suspended" == await wait_status(handle, "suspended")
        with tracer.start_as_current_span("sender") as sender:
            await system.send("later/o2", go, "early")  # not taken yet: it waits for ready
    exporter.clear()
    # A new program: the run resumes under the caller's trace, and the
    # message, still unread, brings the sender's with it.
    async with opener(later) as system:
        await system.send("later/o2", ready)
        assert "ch-o2 early" == await system.get("later/o2").result()
    caller_ctx, sender_ctx = caller.get_span_context(), sender.get_span_context()
    runs = by_name(exporter, "process later/:id")
    assert 1 <= len(runs)
    assert [(caller_ctx.trace_id, caller_ctx.span_id)] * len(runs) == [
        (s.context.trace_id, s.parent.span_id) for s in runs
    ]
    (deliver,) = by_name(exporter, "deliver go")
    assert (sender_ctx.trace_id, sender_ctx.span_id) == (
        deliver.context.trace_id,
        deliver.parent.span_id,
    )
    assert {"actors.address": "later/o2", "actors.run": 0, "actors.message": 1} == dict(
        deliver.attributes
    )
    assert [] == by_name(exporter, "deliver ready")  # sent outside any span


@process("hold/:id")
async def hold(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, retry=Retry(attempts=3, backoff=0.1))
    return str(await ctx.wait(go))


async def test_the_stored_context_is_beside_the_payload_in_the_journal(
    opener, exporter, tracer, autojump_clock
):
    async with opener(hold) as system:
        with tracer.start_as_current_span("caller") as caller:
            await system.start(hold, "h")
        with tracer.start_as_current_span("sender") as sender:
            await system.send("hold/h", Signal("other"), {"x": 1})
    record, mail = await _stored(opener, "hold/h")
    assert traceparent_of(caller) == record.trace
    ((_seq, message),) = mail
    assert ["other", {"x": 1}] == message[:2]
    assert traceparent_of(sender) == message[3]


@process("boom/:id")
async def boom(ctx: Context, id: str) -> None:
    raise ValueError(f"boom {id}")


async def test_a_crash_is_recorded_on_the_process_span(opener, exporter):
    async with opener(boom) as system:
        handle = await system.start(boom, "b")
        with pytest.raises(actors.ProcessFailed):
            await handle.result()
    (run,) = by_name(exporter, "process boom/:id")
    assert trace.StatusCode.ERROR == run.status.status_code
    assert ["ValueError"] == [e.attributes["exception.type"] for e in run.events]
    # No caller span: the run is a trace of its own.
    assert run.parent is None


@process("kid/:id")
async def kid(ctx: Context, id: str) -> str:
    return await ctx.step(charge, id, retry=Retry(attempts=3, backoff=0.1))


@process("mom/:id")
async def mom(ctx: Context, id: str) -> str:
    return await ctx.call(kid, "k")


async def test_a_childs_run_is_a_child_of_its_parents_run(opener, exporter, autojump_clock):
    async with opener(mom, kid) as system:
        assert "ch-k" == await (await system.start(mom, "m")).result()
    mom_runs = by_name(exporter, "process mom/:id")
    (kid_run,) = by_name(exporter, "process kid/:id")
    assert mom_runs[0].context.span_id == kid_run.parent.span_id
    every = exporter.get_finished_spans()
    assert {mom_runs[0].context.trace_id} == {s.context.trace_id for s in every}


async def test_without_a_tracer_provider_nothing_is_stored_or_recorded(
    opener, monkeypatch, autojump_clock
):
    # What the API gives while no SDK set one (whatever this test process set).
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    assert not _tracing.active()
    async with opener(hold) as system:
        assert system.tracing is False  # decided at open
        await system.start(hold, "n")
        await system.send("hold/n", Signal("other"), 1)
    record, mail = await _stored(opener, "hold/n")
    ((_, message),) = mail
    assert record.trace is None
    assert 3 == len(message)


async def test_a_provider_without_a_current_span_stores_no_context(
    opener, exporter, autojump_clock
):
    async with opener(hold) as system:
        await system.start(hold, "q")
        await system.send("hold/q", Signal("other"), 1)
    record, mail = await _stored(opener, "hold/q")
    ((_, message),) = mail
    assert record.trace is None
    assert 3 == len(message)
    (run,) = by_name(exporter, "process hold/:id")
    assert run.parent is None


async def test_a_stored_context_that_is_not_a_traceparent_starts_a_trace_of_its_own(
    opener, exporter, tracer, autojump_clock
):
    async with opener(hold) as system:
        with tracer.start_as_current_span("caller"):
            await system.start(hold, "j")
        await wait_status(system.get("hold/j"), "suspended")
    async with opener.journal() as journal:
        row = await journal.read(lambda r: r.instance(instance_id("hold/j")))
        txn = Txn()
        txn.put_instance(
            row.iid,
            address=row.address,
            process=row.process,
            status="running",
            record=attrs.evolve(row.record, trace="00-not-a-trace"),
        )
        await journal.commit(txn)
    exporter.clear()
    async with opener(hold) as system:
        await system.send("hold/j", go, 7)
        assert "7" == await system.get("hold/j").result()
    runs = by_name(exporter, "process hold/:id")
    assert [None] * len(runs) == [s.parent for s in runs] and runs


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


@process("odd/:id")
async def odd(ctx: Context, id: str) -> None:
    raise Unprintable("odd")


async def test_a_crash_whose_str_raises_is_recorded_all_the_same(opener, exporter):
    async with opener(odd) as system:
        with pytest.raises(actors.ProcessFailed):
            await (await system.start(odd, "o")).result()
    (run,) = by_name(exporter, "process odd/:id")
    assert "Unprintable: Unprintable('odd')" == run.status.description
    assert ["exception"] == [e.name for e in run.events]


crashes: list[int] = []


@process("phoenix/:id", restart="transient")
async def phoenix(ctx: Context, id: str) -> None:
    run = await ctx.step(_count_crash)
    if run == 1:
        raise RuntimeError("first run dies")
    await ctx.wait(go)


def _count_crash() -> int:
    crashes.append(1)
    return len(crashes)


async def test_a_supervisor_restart_runs_on_under_the_starters_trace(
    opener, exporter, tracer, autojump_clock
):
    crashes.clear()
    async with opener(phoenix) as system:
        with tracer.start_as_current_span("caller") as caller:
            handle = await system.start(phoenix, "p")
        while len(handle.restarts) < 1 or handle.status != "suspended":
            await trio.sleep(0.05)
        await system.send("phoenix/p", go)
        await handle.result()
    runs = by_name(exporter, "process phoenix/:id")
    context = caller.get_span_context()
    assert [0, 1] == [s.attributes["actors.run"] for s in runs]
    assert [(context.trace_id, context.span_id)] * 2 == [
        (s.context.trace_id, s.parent.span_id) for s in runs
    ]
    assert [trace.StatusCode.ERROR, trace.StatusCode.UNSET] == [s.status.status_code for s in runs]
