"""Running steps: attempts, retries with backoff, timeouts, idempotency keys.

A step runs its function at least once and records its result exactly once.
Before each attempt its start (attempt number, idempotency key) is made
durable, so after a crash the step continues with the next attempt, and the
external system can deduplicate on the key.

A crash is not a step failure. An attempt that a crash (or a lost lease)
cut short raised nothing: it runs again after recovery under the same key,
outside the exception budget (``Retry.attempts``, 1 without ``retry=``).
Crashes have a budget of their own (``Retry.crashes``, `CRASHES` without
``retry=``): a step that keeps taking its process down is not run again
past it, and its instance is parked stuck (never failed: the step may have
done nothing wrong) with a WARNING naming the step, until an operator's
``system.retry`` forgives the crashes (`_crashes`). A step made with
``at_most_once=True`` keeps the stricter rule: an attempt cut short is
spent like a failed one, and a step resumed with its attempts spent fails
with `StepFailed` without running again. Closing the system is not a crash:
the attempt it cuts short is recorded as such and counts in neither budget.

Sync functions run in a worker thread (never blocking the trio loop), at
most ``max_sync_steps`` at once; a queued step's timeout starts only when
it runs.
"""

from __future__ import annotations

import contextvars
import inspect
from inspect import CO_COROUTINE
from types import FunctionType
from typing import Any

import attrs
import trio

from storage import AutojumpHold, Txn, decode, encode
from storage.errors import Conflict, EncodeError

from .._kernel import _reports, _tracing
from .._kernel._effects import Behaviour, Step
from .._kernel._failures import ErrorRecord
from .._kernel._interfaces import ActorAPI
from .._kernel._log import LogEntry
from .._kernel._values import CRASHES
from ..errors import ActorError, ContextError, StepFailed

__all__ = ["StepBehaviour", "StepInfo", "current_step", "run_step", "step_key"]


@attrs.frozen(slots=True)
class StepInfo:
    """What a step's function can learn about the attempt running it.

    ``key`` is the idempotency key,
    ``<id>/<incarnation>/<run>/<step name>/<occurrence>``, e.g.
    ``orders/o-17/2/0/charge_card/1`` (``.../compensate`` appended for a
    compensation). ``incarnation`` counts the fresh starts of the address
    (1 for the first; a start after a cancel makes the next), ``run`` the
    continue-as-new runs and supervisor restarts within the incarnation,
    ``occurrence`` the calls of that step name within the run (from 1). The
    key is persisted with the first attempt's start and reused from there:
    stable across retries and restarts of the system, and never shared by
    two incarnations, runs or occurrences, so the external system can
    deduplicate on it. ``attempt`` counts from 1 and keeps counting across
    restarts (an attempt a crash cut short counts, though it spends no
    exception budget: see `Retry.crashes`). ``forward_result`` is, in a
    compensation, the recorded result of the step it undoes.
    """

    key: str
    name: str
    attempt: int
    instance: str
    forward_result: Any = None


def step_key(address: str, incarnation: int, run: int, name: str, occurrence: int) -> str:
    """The idempotency key of a step (format: see `StepInfo`)."""
    return f"{address}/{incarnation}/{run}/{name}/{occurrence}"


_current: contextvars.ContextVar[StepInfo] = contextvars.ContextVar("actors_step")


async def _check_lease(actor: ActorAPI) -> None:
    """On a shared journal, before a step's body runs: if this node's lease
    lapsed since it claimed the instance (it was frozen, or its lease
    connection was cut), claim it again. Another node that took it over
    keeps it: the body is left to that node (this raises what a failed
    fence raises, so the actor lets go); else the instance goes on here
    under the new claim, never stranded on a node that no longer runs it.

    The check is in memory (the heartbeat keeps the lease term) unless the
    lease lapsed; it narrows the window in which two nodes run one step
    body, it cannot close it: a node frozen right after it still runs the
    body when it wakes (see README's limits)."""
    system = actor.system
    if system.journal.node is None or system.nodes.trusted(actor.iid):
        return
    epoch = await system.journal.claim(actor.iid)
    system.nodes.claimed(actor.iid, epoch)
    if epoch is None:
        raise Conflict(
            f"{actor.address}: this node's lease lapsed and another node took the instance "
            "over; the step's body is left to it",
            reason="epoch",
        )
    actor.claimed_again(epoch)


def current_step() -> StepInfo:
    """The `StepInfo` of the step whose function is running.

    Raises:
        ContextError: called outside a step's function.
    """
    try:
        return _current.get()
    except LookupError:
        raise ContextError(
            "actors.current_step() is only available inside a function run by ctx.step"
        ) from None


async def call_once(
    actor: ActorAPI,
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: float | None,
    info: StepInfo,
    thread: bool = True,
) -> Any:
    """Run one attempt of ``fn`` with ``info`` as `current_step`, under
    ``timeout``; a sync ``fn`` in a worker thread, or with ``thread=False``
    on the trio thread (no timeout then: nothing can interrupt it)."""
    token = _current.set(info)
    try:
        is_async = _is_async(fn)
        if not thread and not is_async:
            # Inline: the event loop waits for it, as for any sync code in a task.
            return _call_sync(fn, args, kwargs)
        if is_async:
            if timeout is None:
                return await fn(*args, **kwargs)
            with trio.fail_after(timeout):
                return await fn(*args, **kwargs)
        limiter = actor.system.step_limiter
        try:
            # A free token is taken without the checkpoint `acquire` makes:
            # the thread's own start below is one, and a step's every
            # suspension resumes each frame of the instance's task.
            limiter.acquire_nowait()
        except trio.WouldBlock:
            await limiter.acquire()
        try:
            hold = AutojumpHold.current()
            if hold is not None:
                hold.acquire()
            try:
                with trio.fail_after(timeout if timeout is not None else float("inf")):
                    return await trio.to_thread.run_sync(
                        _call_sync,
                        fn,
                        args,
                        kwargs,
                        abandon_on_cancel=True,
                        limiter=actor.system.thread_limiter,
                    )
            finally:
                if hold is not None:
                    hold.release()
        finally:
            limiter.release()
    finally:
        _current.reset(token)


def _is_async(fn: Any) -> bool:
    """`inspect.iscoroutinefunction`, answered at once for an ``async def``
    function (its code's flag, which is what inspect reads for it)."""
    if type(fn) is FunctionType and fn.__code__.co_flags & CO_COROUTINE:
        return True
    return inspect.iscoroutinefunction(fn)


def _call_sync(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()
        raise ContextError(
            f"step function {fn!r} returned an awaitable from a sync call; make it "
            "'async def' so the runtime awaits it"
        )
    return result


class StepBehaviour(Behaviour):
    @staticmethod
    def start(actor: ActorAPI, step: Step[Any], started: LogEntry | None) -> None:
        actor.start_task(run_step, step, started)

    @staticmethod
    def abandon(actor: ActorAPI, step: Step[Any]) -> None:
        if step.scope is not None:
            step.scope.cancel()


async def run_step(actor: ActorAPI, step: Step[Any], started: LogEntry | None) -> None:
    """Run a live step to its recorded outcome (a task in the actor's nursery).

    Two budgets, counted from the started record. Exceptions:
    ``retry.attempts`` (1 without ``retry=``) attempts that raise. Crashes:
    an attempt that never finished (the process stopped during it: killed,
    out of memory, a lost lease) raised nothing, so it runs again under the
    same key, and ``retry.crashes`` (`CRASHES` without ``retry=``) of them
    may; a step resumed past that is not run again: the instance is parked
    stuck (`Arrivals.park`), for an operator's ``system.retry``
    (`_crashes`). With ``at_most_once`` there is no crash budget: an
    unfinished attempt is spent like a failed one, and a step resumed with
    its attempts spent fails with `StepFailed` without running again. An
    attempt cut short by closing the system counts in neither: the close
    records it (``c``), and the step runs again on the next open.
    """
    retry = step.retry
    limit = retry.attempts if retry is not None else 1
    # The started record: attempts started, failures recorded, attempts cut
    # short by a close of the system or forgiven by an operator's retry
    # (closed). Invariant: every started attempt that is neither a recorded
    # failure nor closed was interrupted by a crash, so
    # crashed = attempt - failures - closed.
    attempt = (started.attempt or 0) if started is not None else 0
    failures = (started.failures or 0) if started is not None else 0
    closed = 0
    if started is not None:
        # A record written before crashes were counted has no closed count:
        # its unfinished attempts are taken as closes, as they were then.
        closed = started.closed if started.closed is not None else attempt - failures
        if started.key:
            # The key persisted with the first attempt stays the key, even if
            # the code that derives it changed since.
            step.key = started.key
    record: LogEntry | None = None
    in_attempt = False
    try:
        with trio.CancelScope() as scope:
            step.scope = scope
            if started:
                if step.at_most_once:
                    if attempt - closed >= limit:
                        _finish_spent(actor, step, attempt, failures, closed, limit)
                        return
                else:
                    budget = retry.crashes if retry is not None else CRASHES
                    crashed = attempt - failures - closed
                    if crashed > budget:
                        _park(actor, step, crashed, budget)
                        return
            args, kwargs = step.args, step.kwargs
            if step.validate_input is not None:
                try:
                    args, kwargs = _validated_input(step, args, kwargs)
                except Exception as exc:
                    _finish_failed(actor, step, exc, attempt, "input validation")
                    return
            while True:
                attempt += 1
                # A fresh entry (not attrs.evolve of another: three times the
                # cost, on every attempt of every step).
                record = step.describe(
                    attempt=attempt, failures=failures, closed=closed, key=step.key
                )
                in_attempt = True
                # Awaited whatever the journal's durability: the attempt (and
                # the take it follows) is written before its side effect runs,
                # so a replay after a lost write never puts other work at this
                # step, and one idempotency key names one piece of work.
                await actor.writes.barrier(_log_txn(actor, step.seq, record), durable=True)
                if actor.system.journal.node is not None:  # (a single owner has no lease)
                    await _check_lease(actor)
                info = StepInfo(step.key, step.name, attempt, actor.address)
                timed_out = False
                try:
                    # (Tracing off, the usual case, costs no call.)
                    tracing = actor.system.tracing
                    with _tracing.step_span(actor, info) if tracing else _tracing.NO_SPAN:
                        value = await call_once(
                            actor, step.fn, args, kwargs, step.timeout, info, step.thread
                        )
                except trio.TooSlowError as exc:
                    timed_out = True
                    cause: BaseException = exc
                except Exception as exc:
                    cause = exc
                else:
                    in_attempt = False
                    if step.validate_output is not None:
                        try:
                            value = step.validate_output(value)
                        except Exception as exc:
                            _finish_failed(actor, step, exc, attempt, "output validation")
                            return
                    try:
                        # The process gets what a replay reads from the log,
                        # never the step function's own object.
                        value = decode(encode(value, what=f"result of step {step.name!r}"))
                    except EncodeError as exc:
                        _finish_failed(actor, step, exc, attempt, "result encoding")
                        return
                    # The attempt's entry, with its result. The result rides
                    # on the next write: the process's next barrier,
                    # suspension or end makes it durable.
                    outcome = step.describe(
                        value=value, attempt=attempt, failures=failures, closed=closed, key=step.key
                    )
                    if step.compensate is not None:  # (most steps have none: no call)
                        actor.register_compensation(step, value)
                    actor.finish(step, value, None, outcome)
                    return
                in_attempt = False
                failures += 1
                retryable = retry is not None and not isinstance(cause, retry.non_retryable)
                spent = attempt - closed if step.at_most_once else failures
                if not retryable or spent >= limit:
                    _finish_failed(actor, step, cause, attempt, None, timed_out)
                    return
                assert retry is not None
                # The failure rides on the next commit: a crash during the
                # backoff after it is durable finds it a failure, not a crash.
                record = attrs.evolve(record, failures=failures)
                actor.writes.ride_log(step.seq, record)
                await trio.sleep(retry.delay(failures, actor.system.random.random()))
    except trio.Cancelled:
        if actor.system.closing and record is not None and step in actor.live:
            # Closing is not a crash: what this attempt left unfinished is
            # not spent (a failure waiting out its backoff stays counted).
            shut = attrs.evolve(
                record, failures=failures, closed=closed + 1 if in_attempt else closed
            )
            actor.writes.ride_log(step.seq, shut)
            actor.writes.flush()
        raise
    finally:
        step.scope = None
        actor.task_finished()


def _park(actor: ActorAPI, step: Step[Any], crashed: int, budget: int) -> None:
    """Keep ``step`` from running again, its instance stuck: crashes cut
    short more of its attempts than its crash budget allows. The step stays
    unfinished in the log, so a resumed instance runs it again."""
    summary = (
        f"step {step.name!r} of {actor.address!r} was cut short by a crash {crashed} "
        f"time(s), past its crash budget of {budget} (the process stopped during it: "
        "killed, out of memory, a native crash, a lost lease); it is not run again, so "
        "that a step that takes its host down does not do so for ever. Find why, fix "
        f"it, and resume the instance with system.retry({actor.address!r}) (CLI: retry "
        f"ADDRESS beside the running system): the step runs again under its key "
        f"{step.key!r}. A larger budget: retry=actors.Retry(crashes=...)"
    )
    actor.arrivals.park(ActorError(summary), _reports.held_crashed(step.name))


def _log_txn(actor: ActorAPI, seq: int, entry: LogEntry) -> Txn:
    txn = Txn()
    txn.put_log(actor.iid, actor.run, seq, entry.to_stored())
    return txn


def _validated_input(
    step: Step[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    assert step.validate_input is not None
    if kwargs or len(args) != 1:
        checked = step.validate_input({"args": list(args), "kwargs": kwargs})
        return tuple(checked.get("args", args)), dict(checked.get("kwargs", kwargs))
    return (step.validate_input(args[0]),), kwargs


def _finish_failed(
    actor: ActorAPI,
    step: Step[Any],
    cause: BaseException,
    attempt: int,
    stage: str | None,
    timed_out: bool = False,
) -> None:
    described = ErrorRecord.of(cause)
    if timed_out:
        summary = (
            f"step {step.name!r} timed out after {step.timeout} s on attempt {attempt} "
            f"(of {actor.address!r})"
        )
    else:
        what = f"{stage} failed" if stage else f"failed on attempt {attempt}"
        summary = f"step {step.name!r} {what} (of {actor.address!r}): {described.summed_up()}"
    record = attrs.evolve(
        described, timeout=True if timed_out else None, summary=summary, stage=stage or None
    )
    error = record.to_stored()
    exc = record.exception()
    entry = step.describe(attempt=attempt, key=step.key, error=error)
    exc.__cause__ = cause
    actor.finish(step, None, exc, entry)


def _finish_spent(
    actor: ActorAPI,
    step: Step[Any],
    attempt: int,
    failures: int,
    closed: int,
    limit: int,
) -> None:
    """Fail a resumed ``at_most_once`` step whose attempts were spent, the
    last ones by crashes."""
    spent = attempt - closed
    crashed = spent - failures
    which = (
        f"attempt {attempt} of {limit}"
        if not closed
        else (
            f"attempt {attempt} ({spent} of {limit} counted; {closed} cut short by closing "
            "the system do not count)"
        )
    )
    summary = (
        f"step {step.name!r} of {actor.address!r} spent its attempts: {which} was "
        f"interrupted by a crash, and {crashed} of the {spent} attempt(s) spent did not "
        "finish (the process stopped during them: killed, out of memory, a crash); it is "
        "not run again (the step was made with at_most_once=True). Make the step survive "
        "its input, or allow more attempts with retry=actors.Retry(attempts=...)"
    )
    error = ErrorRecord(
        type="actors.errors.StepFailed",
        message=summary,
        traceback="",
        summary=summary,
        crashed=crashed,
        attempts=spent,
    ).to_stored()
    # It may have applied before the process went down: undo it too.
    actor.register_compensation(step, None, possibly_applied=True)
    entry = step.describe(attempt=attempt, key=step.key, error=error)
    actor.finish(step, None, StepFailed(summary, error=error), entry)
