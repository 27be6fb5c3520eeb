"""Saga compensation: undo completed steps, newest first, when a process fails.

A step made with ``compensate=fn`` registers its compensation in the
instance's record in the same transaction that records its result, so the
registration survives continue-as-new and restarts of the system. When the
process fails (or is cancelled, for a process defined with
``compensate_on_cancel=True``) the compensations run in reverse order, each
a retried, recorded step called with the forward step's own arguments and
with ``current_step().key`` ending in ``/compensate`` and
``current_step().forward_result`` the forward step's result.

Invariant: a compensation id is in ``record.compensated`` only once its
function has returned, and that record is durable before the next one
starts, so a crash mid-compensation resumes with the same compensation
(at least once, deduplicable by its key), never an earlier one twice.

A compensation that exhausts its retries parks the instance as
``compensation_stuck`` with the error; `ActorSystem.resume_compensation`
retries from there, `ActorSystem.abandon_compensation` ends it failed.

Finding a compensation again: stored data never chooses code. The record
names the function (``module:qualname``, and the file that defines it) only
so that it can be compared with the callables this system was given (see
`_compensations`): those passed to ``open_system(compensations=[...])`` and
those its process code passes as ``compensate=``, live or replayed. No
module is imported and no attribute looked up from the recorded name. A
name that matches none parks the instance at once, with a WARNING that
names the function and the fix; nothing runs in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from storage import InstanceRecord, Txn

from .._kernel import _reports, _tracing
from .._kernel._effects import Step
from .._kernel._failures import describe_error, error_summary
from .._kernel._interfaces import ActorAPI
from .._kernel._values import Retry
from ._steps import StepInfo, call_once

DEFAULT_RETRY = Retry(attempts=3, backoff=1.0, max_backoff=30.0)


def register(
    actor: ActorAPI, step: Step[Any], result: Any, *, possibly_applied: bool = False
) -> None:
    """Record ``step``'s compensation (riding on the step's own result write)."""
    assert step.compensate is not None
    known = actor.system.compensations
    name = known.learn(step.compensate)
    retry = step.retry or DEFAULT_RETRY
    entry = {
        "id": step.key,
        "name": step.name,
        "fn": name,
        "file": known.source_file(step.compensate),
        "args": list(step.args),
        "kwargs": step.kwargs,
        "result": result,
        "possibly_applied": possibly_applied,
        "retry": [retry.attempts, retry.backoff, retry.max_backoff],
    }
    comps = list(actor.record.compensations)
    comps.append(entry)
    actor.writes.update_record(compensations=comps)


def pending(record: InstanceRecord) -> list[dict[str, Any]]:
    done = set(record.compensated)
    return [c for c in reversed(record.compensations) if c["id"] not in done]


def resolve(actor: ActorAPI, comp: dict[str, Any]) -> Callable[..., Any]:
    """The function a recorded compensation stands for: one this system
    was given (see `_compensations`); the record only names it.

    Raises:
        LookupError: this system was given no such function; the message
            names it and what to do. Nothing is imported to find it.
    """
    name, file = comp.get("fn"), comp.get("file")
    found = actor.system.compensations.find(name, file)
    if found is not None:
        return found
    qualname = name.partition(":")[2] if isinstance(name, str) else ""
    resume = f"then resume_compensation({actor.address!r})"
    if "<" in qualname:  # <lambda>, <locals>
        why = (
            "it was a closure, lambda or other unnamed callable, which exists only while "
            "the program that made it runs; undo the step by hand and "
            "abandon_compensation, and pass a module-level function as compensate= in the code"
        )
    else:
        where = f" (defined in {file!r})" if isinstance(file, str) else ""
        listed = qualname if qualname.replace(".", "_").isidentifier() else "..."
        why = (
            f"this system was given no function of that name{where}, and a name read "
            "from the journal never chooses the code that runs; if the application "
            f"defines it, pass it to open_system(compensations=[{listed}]) (or open the "
            f"system with the process code that passes it as compensate=), {resume}; "
            "otherwise undo the step by hand and abandon_compensation"
        )
    _reports.compensation_unknown(actor.address, repr(name), why)
    raise LookupError(f"compensation {name!r} is not run: {why}")


async def compensate(actor: ActorAPI, failure: dict[str, Any], end: str) -> str:
    """Run the pending compensations; the status to end with: ``end`` when
    all are done, ``"compensation_stuck"`` if one gives up."""
    txn = Txn()
    actor.writes.put_record(txn, "running", failure=failure, failure_end=end)
    actor.become("running")
    await actor.writes.barrier(txn)
    known = actor.system.compensations
    if any(known.find(c.get("fn"), c.get("file")) is None for c in pending(actor.record)):
        # Resumed after a restart: the process code has not run in this
        # system yet, so what it passes as compensate= is not known.
        await actor.replay_for_compensations()
    for comp in pending(actor.record):
        error = await _run_one(actor, comp)
        if error is not None:
            txn = Txn()
            summary = f"compensation of step {comp['name']!r} failed: {error_summary(error)}"
            actor.writes.put_record(txn, "compensation_stuck", last_error=summary, stuck=error)
            actor.become("compensation_stuck")
            await actor.writes.barrier(txn, durable=True)
            return "compensation_stuck"
    return end


async def _run_one(actor: ActorAPI, comp: dict[str, Any]) -> dict[str, Any] | None:
    attempts_done = actor.record.comp_attempts.get(comp["id"], 0)
    limit, backoff, max_backoff = comp["retry"]
    retry = Retry(attempts=limit, backoff=backoff, max_backoff=max_backoff)
    failures = 0
    key = f"{comp['id']}/compensate"
    try:
        fn = resolve(actor, comp)
    except LookupError as exc:
        return describe_error(exc)  # retrying cannot help: park with the cause now
    while True:
        attempts_done += 1
        txn = Txn()
        attempts = dict(actor.record.comp_attempts)
        attempts[comp["id"]] = attempts_done
        actor.writes.put_record(txn, "running", comp_attempts=attempts)
        await actor.writes.barrier(txn)
        info = StepInfo(key, comp["name"], attempts_done, actor.address, comp["result"])
        try:
            with _tracing.step_span(actor, info):
                await call_once(actor, fn, tuple(comp["args"]), comp["kwargs"], None, info)
        except Exception as exc:
            failures += 1
            if failures >= retry.attempts:
                return describe_error(exc)
            await trio.sleep(retry.delay(failures, actor.system.random.random()))
            continue
        txn = Txn()
        done = [*actor.record.compensated, comp["id"]]
        actor.writes.put_record(txn, "running", compensated=done)
        await actor.writes.barrier(txn, durable=True)
        return None
