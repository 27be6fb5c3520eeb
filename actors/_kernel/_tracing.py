"""OpenTelemetry tracing: process runs and step attempts as spans, and the
caller's trace context carried through the journal into the process.

Optional: with ``opentelemetry-api`` absent, or present with no SDK's
tracer provider set (the API's default proxy), every hook returns at once
and no trace context is stored. The import is tried once, here; whether a
real provider is set is checked once per system, when it opens
(``ActorSystem.tracing``, `active`): the API's own check reads the
environment, a microsecond that a send must not pay. So set the provider
before `open_system`.

Spans:

- ``process <template>``: one per activation of an instance's run (from its
  load or start to its end, passivation or the system's close), with
  ``actors.address`` and ``actors.run``; a crash of the process is recorded
  on it (with the exception, status ERROR).
- ``step <name>``: one per attempt of a step (or compensation), a child of
  the process span, with ``actors.address``, ``actors.run``,
  ``actors.step.attempt`` and ``actors.step.key``; the attempt's exception
  is recorded.
- ``deliver <signal>``: a message with a trace context reached an
  activation of its receiver (each activation that loads it unread
  records it again), a child of the sender's span.

Trace context: `traceparent` gives the current span's W3C ``traceparent``
(or None). `start`/`signal_with_start`/`spawn`/`call` store it in the
instance's record (field ``trace``), `send` beside the payload in the
mailbox record (an optional 4th element); the process never sees it. Every
activation's process span is a child of the context stored at the start,
so a trace continues into the process across restarts of the system.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ._mailbox import StoredMessage

try:
    from opentelemetry import context as _otel_context, trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the "otel" extra is not installed: tracing is off
    _trace = None  # type: ignore[assignment]  # checked before each use
    _otel_context = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

__all__ = [
    "NO_SPAN",
    "active",
    "begin_run",
    "delivered",
    "end_run",
    "loaded",
    "record_crash",
    "step_span",
    "traceparent",
    "tracer",
]

#: What `step_span` gives with tracing off (a caller may use it without the call).
NO_SPAN = contextlib.nullcontext()
_inert: tuple[type, ...] = ()
if _trace is not None:
    _propagator = TraceContextTextMapPropagator()
    _inert = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)


def active() -> bool:
    """True if opentelemetry is installed and a real tracer provider is set."""
    return _trace is not None and not isinstance(_trace.get_tracer_provider(), _inert)


def tracer() -> Any:
    """The current tracer provider's tracer for "actors" (when `active`):
    a system takes it at open, with `active`, and holds it."""
    return _trace.get_tracer_provider().get_tracer("actors")


def traceparent(system: Any) -> str | None:
    """The current span's W3C traceparent, to store with a start or a
    message; None when ``system`` does not trace or no span is current."""
    if not system.tracing or not _trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


def _context_of(stored: Any) -> Any:
    """The OpenTelemetry context a stored traceparent names (an empty one,
    a new trace, for anything else: an old record, a foreign value)."""
    if isinstance(stored, str):
        return _propagator.extract({"traceparent": stored})
    return _otel_context.Context()


def begin_run(actor: Any) -> Any:
    """Open the process span of this activation and make it current in the
    actor's task (its steps' tasks inherit it); pass the result to `end_run`."""
    if not actor.system.tracing:
        return None
    span = actor.system.tracer.start_span(
        f"process {actor.proc.template}",
        context=_context_of(actor.record.trace),
        attributes={"actors.address": actor.address, "actors.run": actor.run},
    )
    return span, _otel_context.attach(_trace.set_span_in_context(span))


def end_run(run: Any) -> None:
    """Close what `begin_run` opened (in the same task)."""
    if run is not None:
        span, token = run
        _otel_context.detach(token)
        span.end()


def record_crash(exc: BaseException, summary: str) -> None:
    """Record the process's exception (``summary``: its text) on the current
    (process) span (no system at hand: the full check, off the hot path)."""
    if active():
        span = _trace.get_current_span()
        try:
            span.record_exception(exc)
        except Exception:  # noqa: BLE001 - an exception whose __str__ raises
            span.add_event(
                "exception", {"exception.type": type(exc).__name__, "exception.message": summary}
            )
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, summary))


def step_span(actor: Any, info: Any) -> Any:
    """A context manager around one attempt (``info``: its `StepInfo`)."""
    if not actor.system.tracing:
        return NO_SPAN
    return actor.system.tracer.start_as_current_span(
        f"step {info.name}",
        attributes={
            "actors.address": actor.address,
            "actors.run": actor.run,
            "actors.step.attempt": info.attempt,
            "actors.step.key": info.key,
        },
    )


def delivered(actor: Any, seq: int, signal: str, stored: Any) -> None:
    """A message sent with trace context ``stored`` reached ``actor``."""
    if stored is None or not actor.system.tracing:
        return
    span = actor.system.tracer.start_span(
        f"deliver {signal}",
        context=_context_of(stored),
        kind=_trace.SpanKind.CONSUMER,
        attributes={
            "actors.address": actor.address,
            "actors.run": actor.run,
            "actors.message": seq,
        },
    )
    span.end()


def loaded(actor: Any, mail: Any) -> None:
    """An activation loaded its unread ``mail`` (``(seq, message)`` pairs)."""
    if not actor.system.tracing:
        return
    for seq, stored in mail:
        message = StoredMessage.from_stored(stored)
        if message.trace is not None:
            delivered(actor, seq, message.signal, message.trace)
