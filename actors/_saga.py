"""Saga compensation: undo completed steps, newest first, when a process fails.

A step made with ``compensate=fn`` registers its compensation in the
instance's record in the same transaction that records its result, so the
registration survives continue-as-new and restarts of the system. When the
process fails (or is cancelled, for a process defined with
``compensate_on_cancel=True``) the compensations run in reverse order, each
a retried, recorded step called with the forward step's own arguments and
with ``current_step().key`` ending in ``/compensate`` and
``current_step().forward_result`` the forward step's result.

Invariant: a compensation id is in ``record["compensated"]`` only once its
function has returned, and that record is durable before the next one
starts, so a crash mid-compensation resumes with the same compensation
(at least once, deduplicable by its key), never an earlier one twice.

A compensation that exhausts its retries parks the instance as
``compensation_stuck`` with the error; `ActorSystem.resume_compensation`
retries from there, `ActorSystem.abandon_compensation` ends it failed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import trio

from storage import Txn

from ._effects import Step
from ._interfaces import ActorAPI
from ._records import Retry, describe_error, error_summary
from ._steps import StepInfo, call_once

DEFAULT_RETRY = Retry(attempts=3, backoff=1.0, max_backoff=30.0)

# Compensation functions seen in this process, for ones that cannot be
# imported by name (closures, lambdas); after a restart those need the
# process code to run again, so prefer module-level functions.
_known: dict[str, Callable[..., Any]] = {}


def qualified(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def register(actor: ActorAPI, step: Step, result: Any, *, possibly_applied: bool = False) -> None:
    """Record ``step``'s compensation (riding on the step's own result write)."""
    assert step.compensate is not None
    name = qualified(step.compensate)
    _known[name] = step.compensate
    retry = step.retry or DEFAULT_RETRY
    entry = {
        "id": step.key, "name": step.name, "fn": name, "args": list(step.args),
        "kwargs": step.kwargs, "result": result, "possibly_applied": possibly_applied,
        "retry": [retry.attempts, retry.backoff, retry.max_backoff],
    }  # fmt: skip
    comps = list(actor.record.get("compensations", []))
    comps.append(entry)
    actor.update_record(compensations=comps)


def pending(record: dict[str, Any]) -> list[dict[str, Any]]:
    done = set(record.get("compensated", []))
    return [c for c in reversed(record.get("compensations", [])) if c["id"] not in done]


def _resolve(name: str) -> Callable[..., Any]:
    found = _known.get(name)
    if found is not None:
        return found
    module, _, qualname = name.partition(":")
    try:
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise LookupError(
            f"compensation function {name} cannot be found after a restart; define it at "
            "module level so it can be imported by name"
        ) from exc
    return target


async def compensate(actor: ActorAPI, failure: dict[str, Any], end: str) -> str:
    """Run the pending compensations; the status to end with: ``end`` when
    all are done, ``"compensation_stuck"`` if one gives up."""
    txn = Txn()
    actor.put_record(txn, "running", failure=failure, failure_end=end)
    actor.become("running")
    await actor._barrier(txn)
    for comp in pending(actor.record):
        error = await _run_one(actor, comp)
        if error is not None:
            txn = Txn()
            summary = f"compensation of step {comp['name']!r} failed: {error_summary(error)}"
            actor.put_record(txn, "compensation_stuck", last_error=summary, stuck=error)
            actor.become("compensation_stuck")
            await actor._barrier(txn, durable=True)
            return "compensation_stuck"
    return end


async def _run_one(actor: ActorAPI, comp: dict[str, Any]) -> dict[str, Any] | None:
    attempts_done = actor.record.get("comp_attempts", {}).get(comp["id"], 0)
    limit, backoff, max_backoff = comp["retry"]
    retry = Retry(attempts=limit, backoff=backoff, max_backoff=max_backoff)
    failures = 0
    key = f"{comp['id']}/compensate"
    while True:
        attempts_done += 1
        txn = Txn()
        attempts = dict(actor.record.get("comp_attempts", {}))
        attempts[comp["id"]] = attempts_done
        actor.put_record(txn, "running", comp_attempts=attempts)
        await actor._barrier(txn)
        info = StepInfo(key, comp["name"], attempts_done, actor.address, comp["result"])
        try:
            fn = _resolve(comp["fn"])
            await call_once(actor, fn, tuple(comp["args"]), comp["kwargs"], None, info)
        except Exception as exc:
            failures += 1
            if failures >= retry.attempts:
                return describe_error(exc)
            await trio.sleep(retry.delay(failures, actor.system.random.random()))
            continue
        txn = Txn()
        done = list(actor.record.get("compensated", [])) + [comp["id"]]
        actor.put_record(txn, "running", compensated=done)
        await actor._barrier(txn, durable=True)
        return None
