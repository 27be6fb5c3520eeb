"""`Context`: what a process uses to touch the world. Every method is an effect.

The messages and timers are `MessageEffects`' (_ctx_messages), the children
`ChildEffects`' (_ctx_children); both stand on `ContextCore` (_ctx_core)."""

from __future__ import annotations

import datetime as _dt
import inspect
import uuid as _uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from storage import argument_digests, decode, digest, encode

from .._features._steps import step_key
from .._kernel import _effects as fx
from .._kernel._checks import check_name, check_seconds, check_text
from .._kernel._values import Retry
from ..errors import InvalidArguments
from ._ctx_children import ChildEffects
from ._ctx_messages import MessageEffects

__all__ = ["Context"]


T = TypeVar("T")  # a step function's result
V = TypeVar("V")  # what a step's validate_output returns


class Context(MessageEffects, ChildEffects):
    """The handle a process gets as its first argument.

    Effects (`wait`, `sleep`, `step`, `call`, ...) are numbered when created
    and run when awaited (alone) or passed to `first` / `all` / `settled`
    (together). Replay gives every logged effect its recorded outcome without
    running it, so a process must create effects deterministically: read time
    and randomness through ``ctx``, and make concurrency through
    ``first``/``all``/``settled`` or children, not trio tasks.

    An effect made and then dropped without being awaited (``ctx.step(f)``
    with no ``await``) raises `ContextError` in the process at its next
    effect, naming the call and where it was made; one still held when the
    process returns or continues as new raises it there.
    """

    # Its families: MessageEffects (wait, receive, reply, ask, send,
    # send_many, signal, sleep, sleep_until) and ChildEffects (call, spawn,
    # join, scope), both on ContextCore; here the rest.

    __slots__ = ()

    # -- identity ----------------------------------------------------------------

    @property
    def id(self) -> str:
        """This instance's address, e.g. ``"orders/o-17"``."""
        return self._actor.address

    @property
    def params(self) -> dict[str, str]:
        """The path params by name, e.g. ``{"order_id": "o-17"}``."""
        actor = self._actor
        return dict(zip(actor.proc.params, actor.record.params, strict=False))

    @property
    def replaying(self) -> bool:
        """True while the process is re-running recorded history (the next
        effect's outcome is in the log). Use it to keep prints or metrics
        from repeating on replay; never to decide which effects to make."""
        return self._actor.driver.replaying

    @property
    def run(self) -> int:
        """How many times this instance continued as new (or was restarted)."""
        return self._actor.run

    # -- replay-stable values ------------------------------------------------------

    def _recorded(self, kind: str, make: Callable[[], T]) -> T:
        actor = self._live()
        effect = fx.Recorded(actor.driver.next_seq(), kind)
        entry = actor.driver.logged(effect)
        if entry is not None:
            if not entry.is_outcome:  # a log the runtime never wrote: held (see Driver.replay)
                raise actor.driver.unwritten(effect, entry)
            replayed: T = entry.value  # what make() gave, as the codec stored it
            return replayed
        value = make()
        actor.writes.ride_log(effect.seq, effect.describe(value=value))
        return value

    def now(self) -> _dt.datetime:
        """The current time (UTC, timezone-aware), recorded: replay gives the same."""
        system = self._actor.system
        return _dt.datetime.fromtimestamp(self._recorded("now", system.epoch_now), tz=_dt.UTC)

    def random(self) -> float:
        """A float in [0, 1) from the system's random source, recorded."""
        system = self._actor.system
        return self._recorded("random", system.random.random)

    def uuid(self) -> _uuid.UUID:
        """A random UUID (version 4) from the system's random source, recorded."""
        system = self._actor.system
        return self._recorded(
            "uuid", lambda: _uuid.UUID(int=system.random.getrandbits(128), version=4)
        )

    # -- versioning -------------------------------------------------------------------

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the code path of patch ``patch_id``.

        Where the run executes this point for the first time, the first
        call for a patch id records a marker and gives True. Where it
        executed it before, it gives True if its history holds the marker
        here, else False (the run got here on code without the patch;
        nothing is consumed from the history, so the old effects that
        follow still match). That covers all the code an earlier
        activation ran, up to where it stopped, logged or not: a run
        suspended at its first `wait` has logged nothing and still gets
        False. The first answer holds for the rest of the run::

            if ctx.patched("fee-v2"):
                await ctx.step(charge_with_fee, order)   # new code
            else:
                await ctx.step(charge, order)            # what old histories did

        Once no history before the patch remains, drop the old branch and
        call `deprecate_patch` instead; once no history holds the marker,
        drop that call too (see README, "Changing running code").
        """
        check_name(patch_id, "ctx.patched's patch id")
        actor = self._live()
        driver = actor.driver
        found = driver.patched(patch_id)
        if found is not None:
            return found
        marker = fx.Marker(driver.next_seq(), patch_id)
        actor.writes.ride_log(marker.seq, marker.describe(value=True))
        assert driver.patches is not None  # driver.patched() made it
        driver.patches[patch_id] = True
        return True

    def deprecate_patch(self, patch_id: str) -> None:
        """Retire patch ``patch_id``, whose old branch is gone: replay skips
        its marker where a history has one, live code records none. So
        histories with and without the marker both replay."""
        check_name(patch_id, "ctx.deprecate_patch's patch id")
        self._live().driver.skip_marker(patch_id)

    # -- steps --------------------------------------------------------------------

    # For type checkers: awaiting the step gives what ``fn`` returns (awaited,
    # if ``fn`` is async), or what ``validate_output`` returns when given.
    @overload
    def step(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
        compensate: Callable[..., Any] | None = None,
        validate_input: Callable[[Any], Any] | None = None,
        validate_output: None = None,
        thread: bool = True,
        at_most_once: bool = False,
        **kwargs: Any,
    ) -> fx.Step[T]: ...

    @overload
    def step(
        self,
        fn: Callable[..., T],
        *args: Any,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
        compensate: Callable[..., Any] | None = None,
        validate_input: Callable[[Any], Any] | None = None,
        validate_output: None = None,
        thread: bool = True,
        at_most_once: bool = False,
        **kwargs: Any,
    ) -> fx.Step[T]: ...

    @overload
    def step(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
        compensate: Callable[..., Any] | None = None,
        validate_input: Callable[[Any], Any] | None = None,
        validate_output: Callable[[Any], V],
        thread: bool = True,
        at_most_once: bool = False,
        **kwargs: Any,
    ) -> fx.Step[V]: ...

    def step(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
        compensate: Callable[..., Any] | None = None,
        validate_input: Callable[[Any], Any] | None = None,
        validate_output: Callable[[Any], Any] | None = None,
        thread: bool = True,
        at_most_once: bool = False,
        **kwargs: Any,
    ) -> fx.Step[Any]:
        """A step effect: run ``fn(*args, **kwargs)`` (sync in a worker thread,
        or async) at least once and record its result exactly once.

        Args:
            name: the step's name in the log and its idempotency key
                (default: ``fn``'s qualified name).
            retry: a `Retry`; without one the step has one attempt (an exception
                fails it) and the default crash budget (3, as `Retry.crashes`).
            timeout: seconds per attempt; the last attempt timing out raises
                `StepTimeout`.
            compensate: called with the step's own arguments to undo it when
                the process fails (see the saga docs).
            validate_input / validate_output: callables whose *returned*
                value is used, so coercions apply; a validation error fails
                the step at once (`StepFailed`), without retries.
            thread: for a sync ``fn``: False runs it on the trio thread,
                without the worker-thread round trip (~100 µs). Only for
                cheap functions that never block (pure computation, an
                in-memory lookup): while it runs, every instance and task
                of the system waits. No ``timeout=`` then (nothing could
                interrupt it). Async functions always run on the trio thread.
            at_most_once: True for a step that must never run twice: an
                attempt a crash cut short then spends an attempt (without
                ``retry=`` the step fails with `StepFailed`). By default such
                an attempt runs again after recovery, under the same
                idempotency key, within the crash budget (`Retry.crashes`).

        Raises (when awaited):
            StepFailed: the last attempt failed; its message names the cause.
            EncodeError: (at the call) an argument the codec cannot store.
        """
        actor = self._live()
        if not callable(fn):
            raise InvalidArguments(f"ctx.step needs a callable, not {fn!r}")
        if retry is not None and not isinstance(retry, Retry):
            raise InvalidArguments(f"retry= takes actors.Retry(...), not {retry!r}")
        if timeout is not None:
            timeout = check_seconds(timeout, "ctx.step(timeout=...)", positive=True)
        if not isinstance(thread, bool):
            raise InvalidArguments(f"ctx.step(thread=...) takes True or False, not {thread!r}")
        if not isinstance(at_most_once, bool):
            raise InvalidArguments(
                f"ctx.step(at_most_once=...) takes True or False, not {at_most_once!r}"
            )
        if not thread and timeout is not None and not inspect.iscoroutinefunction(fn):
            raise InvalidArguments(
                "ctx.step(thread=False) runs a sync function on the trio thread, where "
                "nothing can interrupt it, so it takes no timeout=; drop timeout=, or let "
                "it run in a worker thread (thread=True, the default)"
            )
        if name is not None:
            check_name(name, "ctx.step(name=...)")
        if compensate is not None:
            # What the process code gives is what a recorded name may stand
            # for (see _compensations). ~0.6 us a step, measured with timeit
            # on a known function; a step's commits cost hundreds of us.
            actor.system.compensations.learn(compensate)
        step_name = name or getattr(fn, "__qualname__", None) or repr(fn)
        if name is None:  # (a name= was checked above)
            check_text(step_name, "the step's name (pass name=...)")
        arg_hash = digest([step_name, list(args), kwargs], what=f"arguments of step {step_name!r}")
        # Live, each argument's digest too, of the arguments as they are now
        # (see storage._digests); a replay leaves them to `Step.describe`.
        parts = None if actor.driver.replaying else argument_digests(args, kwargs)
        occurrence = actor.driver.occurrence(step_name)
        key = step_key(actor.address, actor.record.incarnation, actor.run, step_name, occurrence)
        step: fx.Step[Any] = fx.Step(
            actor.driver.next_seq(),
            step_name,
            arg_hash,
            fn,
            args,
            kwargs,
            retry=retry,
            timeout=timeout,
            compensate=compensate,
            validate_input=validate_input,
            validate_output=validate_output,
            key=key,
            thread=thread,
            at_most_once=at_most_once,
        )
        step.parts = parts
        return self._made(step)

    # -- races and joins ----------------------------------------------------------

    def first(self, **effects: fx.Effect[Any]) -> fx.First:
        """Run the effects together; done when the first one is: ``(name, value)``.

        The winner is logged with the input it consumed; losing timers are
        deleted, losing waits take nothing, losing steps are cancelled."""
        if not effects:
            raise InvalidArguments("ctx.first needs at least one effect, by name")
        names = list(effects)
        race = self._compose(lambda each: fx.First(each, names), list(effects.values()))
        return self._made(race, composite=True)

    def all(self, *effects: fx.Effect[Any]) -> fx.All:
        """Run the effects together; their values in argument order. The
        failure of the lowest-numbered failing effect is raised (the rest are
        cancelled)."""
        return self._made(
            self._compose(lambda each: fx.All(each, settled=False), [*effects]), composite=True
        )

    def settled(self, *effects: fx.Effect[Any]) -> fx.All:
        """Run the effects together; an `Outcome` for each, never raising."""
        return self._made(
            self._compose(lambda each: fx.All(each, settled=True), [*effects]), composite=True
        )

    # -- output -------------------------------------------------------------------------

    def emit(self, value: Any) -> fx.Emit:
        """Append ``value`` to this instance's stream (see `ActorSystem.stream`).

        Durable before any consumer sees it; replay never emits twice.

        Raises:
            EncodeError: (at the call) a value the codec cannot store.
        """
        seq = self._live().driver.next_seq()
        return self._made(fx.Emit(seq, digest(value, what="emitted value"), value))

    def publish(self, exports: Any) -> fx.Publish:
        """Replace this instance's exports (`Handle.exports`, `Handle.watch`).

        Durable before watchers see it; kept across restarts and continue-as-new.
        """
        seq = self._live().driver.next_seq()
        return self._made(fx.Publish(seq, digest(exports, what="exports"), exports))

    # -- the run --------------------------------------------------------------------

    def continue_as_new(self, **input: Any) -> fx.ContinueAsNew:
        """An effect that, awaited, ends this run and starts a fresh one
        under the same id with ``input``.

        The log is dropped (replay cost stays bounded); unread messages, the
        stream, cursors and exports carry over; the run's timers are deleted.
        Awaiting it never returns; it cannot go into `first`/`all`/`settled`."""
        actor = self._live()
        actor.proc.check_input(tuple(actor.record.params), input)
        # The next run gets its input as stored, never the objects of this one.
        input = decode(encode(input, what="input"))
        return self._made(fx.ContinueAsNew(actor.driver.next_seq(), input))
