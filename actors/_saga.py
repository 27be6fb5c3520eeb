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

Finding a compensation again: a compensation runs in whatever program
resumes the instance, so it is recorded by name (``module:qualname``) and by
the file that defines it. A program run as a script names its module
``__main__``, and the same file imported later has its own name; so a name
that does not lead to a function from that file is looked for in the module
loaded here from the same file (the module with the process definition,
typically). A compensation that cannot be found parks the instance at once,
with the cause: a closure or lambda (gone with the program that made it), a
module that cannot be imported, or a module without that name.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import trio

from storage import InstanceRecord, Txn

from . import _tracing
from ._effects import Step
from ._failures import describe_error, error_summary
from ._interfaces import ActorAPI
from ._records import Retry
from ._steps import StepInfo, call_once

DEFAULT_RETRY = Retry(attempts=3, backoff=1.0, max_backoff=30.0)

# Compensation functions seen in this process, by recorded name: used as
# they are while this process runs (closures and lambdas included); after a
# restart only a module-level function can be found again (see resolve).
_known: dict[str, Callable[..., Any]] = {}
_real_paths: dict[str, str] = {}  # a file as code objects name it -> its real path


def qualified(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def source_file(fn: Callable[..., Any]) -> str | None:
    """The real path of the file that defines ``fn``, if it has one."""
    code = getattr(fn, "__code__", None)
    path = getattr(code, "co_filename", None)
    if not path or path.startswith("<"):
        module = sys.modules.get(getattr(fn, "__module__", None) or "")
        path = getattr(module, "__file__", None)
    if not path:
        return None
    real = _real_paths.get(path)
    if real is None:
        real = _real_paths[path] = os.path.realpath(path)
    return real


def register(
    actor: ActorAPI, step: Step[Any], result: Any, *, possibly_applied: bool = False
) -> None:
    """Record ``step``'s compensation (riding on the step's own result write)."""
    assert step.compensate is not None
    name = qualified(step.compensate)
    _known[name] = step.compensate
    retry = step.retry or DEFAULT_RETRY
    entry = {
        "id": step.key,
        "name": step.name,
        "fn": name,
        "file": source_file(step.compensate),
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


def _module_file(module: ModuleType) -> str | None:
    path = getattr(module, "__file__", None)
    return os.path.realpath(path) if isinstance(path, str) else None


def _lookup(module: ModuleType, qualname: str) -> Callable[..., Any]:
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    found: Callable[..., Any] = target  # a compensation is a function
    return found


def _same_file(file: str | None, actor: ActorAPI) -> ModuleType | None:
    """The module loaded here from ``file``: the process definition's own
    module first (a compensation usually sits beside its process), then any."""
    if file is None:
        return None
    beside = sys.modules.get(actor.proc.fn.__module__)
    for module in [beside, *list(sys.modules.values())]:
        if isinstance(module, ModuleType) and _module_file(module) == file:
            return module
    return None


def resolve(actor: ActorAPI, comp: dict[str, Any]) -> Callable[..., Any]:
    """The function a recorded compensation names, in this program.

    Raises:
        LookupError: it cannot be found; the message names the cause and
            what to do.
    """
    name, file = comp["fn"], comp.get("file")
    found = _known.get(name)
    if found is not None:
        return found
    module_name, _, qualname = name.partition(":")
    resume = f"then call system.resume_compensation({actor.address!r})"
    if not all(part.isidentifier() for part in [*module_name.split("."), *qualname.split(".")]):
        raise LookupError(
            f"compensation {name} was a closure, lambda or other "
            "unnamed callable, which exists only while the program that made it runs; "
            "undo the step by hand and abandon_compensation, and pass a module-level "
            "function as compensate= in the code"
        )
    module = sys.modules.get(module_name)
    if module is not None and file is not None and _module_file(module) != file:
        module = None  # e.g. __main__ is another program now
    if module is None:
        module = _same_file(file, actor)
    where = f" ({file})" if file else ""
    if module is None:
        if module_name == "__main__":
            raise LookupError(
                f"compensation {name} was recorded by a program run "
                f"as a script{where}, and no module loaded here comes from that file: import "
                f"that file's module before open_system (or run it as the script again), {resume}"
            )
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - any import failure is the cause to report
            raise LookupError(
                f"compensation {name}: module {module_name!r}"
                f"{where} cannot be imported ({type(exc).__name__}: {exc}); make it importable "
                f"in the program that resumes the instance, {resume}"
            ) from exc
    try:
        return _lookup(module, qualname)
    except AttributeError as exc:
        raise LookupError(
            f"compensation {name}: module {module.__name__!r}"
            f"{where} has no {qualname!r} (renamed or removed since the step ran?); "
            f"restore it under that name, {resume}"
        ) from exc


async def compensate(actor: ActorAPI, failure: dict[str, Any], end: str) -> str:
    """Run the pending compensations; the status to end with: ``end`` when
    all are done, ``"compensation_stuck"`` if one gives up."""
    txn = Txn()
    actor.writes.put_record(txn, "running", failure=failure, failure_end=end)
    actor.become("running")
    await actor.writes.barrier(txn)
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
        done = list(actor.record.compensated) + [comp["id"]]
        actor.writes.put_record(txn, "running", compensated=done)
        await actor.writes.barrier(txn, durable=True)
        return None
