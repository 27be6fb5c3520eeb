"""`Context`: what a process uses to touch the world. Every method is an effect."""

from __future__ import annotations

import datetime as _dt
import inspect
import sys
import uuid as _uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ParamSpec, TypeVar, cast, overload

from storage import argument_digests, decode, digest, encode

from .._features import _asks, _sends, _signals
from .._features._steps import step_key
from .._kernel import _effects as fx
from .._kernel._checks import check_deadline, check_name, check_scope, check_seconds, check_text
from .._kernel._handles import ChildHandle
from .._kernel._interfaces import ActorAPI
from .._kernel._process import RESTART_TYPES, ProcessDef
from .._kernel._records import Queue, Restart, Retry, Signal
from ..errors import AskTimeout, ContextError, InvalidArguments

__all__ = ["Context"]


P = ParamSpec("P")
R = TypeVar("R")  # a child process's result
T = TypeVar("T")  # a step function's result
V = TypeVar("V")  # what a step's validate_output returns
E = TypeVar("E", bound=fx.Effect[Any])  # an effect made for the process
C = TypeVar("C", bound=fx.Composite[Any])  # a composite made for the process


class Context:
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

    __slots__ = ("_actor",)

    def __init__(self, actor: ActorAPI) -> None:
        self._actor = actor

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

    def _live(self) -> ActorAPI:
        actor = self._actor
        if actor.done:
            raise ContextError(
                f"the ctx of {actor.address!r} was used after its process ended; "
                "use ctx only inside the process function"
            )
        return actor

    # Called last by each method that gives the process an effect to await,
    # directly (the caller's caller is the code that made the effect).

    def _made(self, effect: E, *, composite: bool = False) -> E:
        """Hand ``effect`` to the process: the driver tracks it until it is
        awaited (a ``composite``'s children are the composite's from now on)."""
        # Where it was made, cheaply: the code and the instruction offset;
        # the line is looked up only if the effect is never awaited.
        frame = sys._getframe(2)
        effect.made_in = frame.f_code
        effect.made_at = frame.f_lasti
        driver = self._actor.driver
        if driver.seq <= driver.last:  # (its last leaf's outcome is logged)
            effect.logged = True
        if composite:
            driver.joined(cast("fx.Composite[Any]", effect))
        else:
            driver.made(effect)
        return effect

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

    # -- waiting ------------------------------------------------------------------

    def wait(self, signal: Signal) -> fx.Wait[Any]:
        """An effect that gives the payload of the oldest message of ``signal``.

        Messages that arrived earlier and match are taken first; others stay
        in the mailbox."""
        if type(signal) is not Signal:  # (a subclass goes the long way too)
            _check_signals((signal,))
        actor = self._actor
        if actor.done:
            self._live()  # raises
        effect: fx.Wait[Any] = fx.Wait(actor.driver.next_seq(), (signal,), False)
        return self._made(effect)  # pair=False: the payload

    def receive(self, *signals: Signal) -> fx.Wait[tuple[Signal, Any]]:
        """An effect that gives the oldest message of any of ``signals`` as
        ``(signal, payload)``. As `wait`, await it alone or race it::

            which, got = await ctx.first(msg=ctx.receive(paid, status),
                                         late=ctx.sleep(3600))
            if which == "msg":
                signal, payload = got

        Logged as `wait` logs (the signal taken with the payload), so
        replay gives the same pair.
        """
        if not signals:
            raise InvalidArguments("ctx.receive needs at least one Signal")
        _check_signals(signals)
        effect: fx.Wait[tuple[Signal, Any]]
        effect = fx.Wait(self._live().driver.next_seq(), signals, True)  # pair=True
        return self._made(effect)

    # -- request and reply ------------------------------------------------------------

    def reply(self, value: Any = None) -> fx.Reply:
        """An effect that answers the message this process took most recently
        (by ``receive``/``wait``) with ``value``, if it was asked
        (`ActorSystem.ask`, ``ctx.ask``); for a message that was sent, not
        asked (or was answered already), a recorded no-op. So one process
        serves both.

        Recorded in this process's log in one commit with the answer's
        delivery: a restart before it replays the take and replies once; a
        restart after it never replies again.

        Raises:
            EncodeError: (at the call) a value the codec cannot store.
        """
        actor = self._live()
        driver = actor.driver
        ask = driver.taken
        if ask is not None and not driver.answered(ask):
            ask = None  # answered already: the first reply stands
        return self._made(fx.Reply(driver.next_seq(), digest(value, what="reply"), value, ask))

    def ask(
        self, address: str, signal: Signal, payload: Any = None, *, timeout: float | None = None
    ) -> fx.Effect[Any]:
        """An effect that sends ``signal`` to the instance at ``address`` as
        an ask and gives the value its process replies with (``ctx.reply``);
        durable: the send and the reply are recorded in this process's log,
        so a restart neither sends it twice nor loses the reply. Await it
        alone, or pass it to `first`/`all`/`settled`.

        Raises:
            NotDelivered: (when awaited) no live instance at ``address``, or
                it ended without replying.
            AskTimeout: (when awaited) no reply within ``timeout`` seconds
                (a durable timer).
            EncodeError: (at the call) a payload the codec cannot store.
        """
        actor = self._live()
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"ctx.ask takes an actors.Signal, not {signal!r}")
        check_name(address, "ctx.ask's address")
        if timeout is not None:
            timeout = check_seconds(timeout, "ctx.ask(timeout=...)")
        seq = actor.driver.next_seq()
        ask_id = _asks.ask_id_of(actor.address, actor.record.incarnation, actor.run, seq)
        arg_hash = digest([address, signal.name, payload], what=f"payload of ask {signal.name!r}")
        effect = fx.Ask(seq, arg_hash, address, signal, payload, ask_id)
        if timeout is None:
            return self._made(effect)
        within = timeout

        def reply_or_timeout(outcome: tuple[str, Any]) -> Any:
            which, value = outcome
            if which == "timeout":
                raise AskTimeout(
                    f"no reply from {address!r} to {signal.name!r} within {within} s; a "
                    "late reply is dropped; ask again or raise timeout=",
                    address=address,
                    timeout=within,
                )
            return value

        race = self._made(
            fx.First([effect, self.sleep(timeout)], ["reply", "timeout"]), composite=True
        )
        shown = f"ctx.ask({address!r}, {signal.name}, timeout={timeout!r})"
        return self._made(fx.Then(race, reply_or_timeout, shown), composite=True)

    def send(
        self, address: str, signal: Signal, payload: Any = None, *, key: str | None = None
    ) -> fx.Send:
        """Send ``signal`` with ``payload`` to the mailbox of the instance at
        ``address`` (this one's own included), durably and once.

        The message is written in one commit with this effect's log entry
        (and what the process did before it): a restart neither sends it
        twice nor loses it. Returning means "stored", not "processed"; the
        receiver gets the payload as encoded, never this object. Messages
        from one process to one address arrive in the order sent. A send
        runs where it is awaited, never in a race (`send_many` sends
        several in one commit).

        Args:
            key: as for `ActorSystem.send`: a key the receiving incarnation
                has had already stores nothing and the send returns normally.

        Raises:
            NotDelivered: no instance at ``address`` takes mail (there is
                none, or it finished, was cancelled or is parked; a queued
                one takes it); nothing is stored. Recorded: a replay raises
                it again and sends nothing.
            EncodeError: (at the call) a payload the codec cannot store,
                naming the path inside it; nothing is stored.
            LimitExceeded: (at the call) a payload over ``max_payload``, or a
                key over 200 bytes of UTF-8.
            InvalidArguments: (at the call) not a Signal, or an address or
                key that is not a non-empty name without control characters.
        """
        return self._made(_sends.new_send(self._live(), address, signal, payload, key))

    def send_many(self, messages: Iterable[tuple[str, Signal, Any]]) -> Awaitable[None]:
        """Send many messages, ``(address, signal, payload)`` each, in one
        commit with this effect's log entry: all of them are stored, or none.

        As `send`, without keys; messages to one address keep their order.
        No messages: nothing is sent or recorded.

        Raises:
            NotDelivered: an address takes no mail (it names the first
                such, in the batch's order); nothing is stored.
                Recorded, as for `send`.
            EncodeError, LimitExceeded: (at the call) a payload the codec
                cannot store (a note names its position); nothing is stored.
            InvalidArguments: (at the call) an item that is not
                ``(address, Signal, payload)``.
        """
        effect = _sends.new_send_many(self._live(), messages)
        if effect is None:  # (no messages: nothing to send or record)
            return _nothing()
        return self._made(effect)

    def signal(
        self,
        signal: Signal,
        identity: Mapping[str, str],
        payload: Any = None,
        *,
        key: str | None = None,
    ) -> Awaitable[int]:
        """Signal every instance that listens to ``signal`` and has
        ``identity``, as `ActorSystem.signal` does, durably and once.

        The messages are written in one commit with this effect's log
        entry, which records how many instances they reached: a replay
        gives that count and signals nothing again. Like a send, it takes
        effect where it is awaited, never in a race.

        Returns:
            How many instances it reached (0 when none: nothing is stored).

        Raises:
            InvalidArguments, EncodeError, LimitExceeded: (at the call) as
                for `ActorSystem.signal`; nothing is stored.
        """
        effect = self._made(_signals.new_signal(self._live(), signal, identity, payload, key))
        # (A kind of send, which gives None; this one gives its count.)
        return cast("Awaitable[int]", effect)

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

    def sleep(self, seconds: float) -> fx.Timer:
        """A durable timer effect, done ``seconds`` from when it starts.

        Raises:
            InvalidArguments: (at the call) ``seconds`` is not a finite
                number from 0 to `MAX_SECONDS` (1,000 years).
        """
        seconds = check_seconds(seconds, "ctx.sleep")
        return self._made(fx.Timer(self._live().driver.next_seq(), digest(seconds), seconds, None))

    def sleep_until(self, when: _dt.datetime) -> fx.Timer:
        """A durable timer effect, done at ``when`` (an aware datetime; one
        in the past is done at once).

        Raises:
            InvalidArguments: (at the call) ``when`` is not a timezone-aware
                datetime with a point in time.
        """
        until = check_deadline(when, "ctx.sleep_until")
        return self._made(fx.Timer(self._live().driver.next_seq(), digest(until), None, until))

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

    # -- children -------------------------------------------------------------------

    def _child(
        self, proc: ProcessDef[..., Any] | str, params: tuple[Any, ...], input: dict[str, Any]
    ) -> tuple[ProcessDef[..., Any], str, bytes]:
        actor = self._live()
        definition = actor.system.registry.definition(proc)
        for param in params:
            if isinstance(param, str):
                check_text(param, "a path param")
        own = definition.resolve(*params)
        definition.check_input(params, input)
        address = f"{actor.address}/{own}"
        return definition, address, digest([definition.template, list(params), input], what="input")

    # For type checkers: the result is what the child returns; without
    # queue= or priority= (a ParamSpec takes no keywords beside it), the
    # params and input must also fit the child's function.
    @overload
    def call(self, proc: ProcessDef[P, R], *params: P.args, **input: P.kwargs) -> fx.Call[R]: ...

    @overload
    def call(
        self,
        proc: ProcessDef[..., R],
        *params: str,
        queue: Queue | str | None,
        priority: int = 0,
        **input: Any,
    ) -> fx.Call[R]: ...

    @overload
    def call(
        self,
        proc: ProcessDef[..., R],
        *params: str,
        queue: Queue | str | None = None,
        priority: int,
        **input: Any,
    ) -> fx.Call[R]: ...

    @overload
    def call(
        self,
        proc: str,
        *params: str,
        queue: Queue | str | None = None,
        priority: int = 0,
        **input: Any,
    ) -> fx.Call[Any]: ...

    def call(  # type: ignore[misc]  # @process refuses these keywords as input
        self,
        proc: ProcessDef[..., Any] | str,
        *params: Any,
        queue: Queue | str | None = None,
        priority: int = 0,
        **input: Any,
    ) -> fx.Call[Any]:
        """An awaited child: start ``proc`` at ``<this id>/<its path>`` and
        give its result.

        The child is a full instance (its own mailbox; signals reach it by
        its address). It ends with this process at the latest. With
        ``queue=`` (a registered `Queue` or its name) it waits ``"queued"``
        for a slot, in ``priority`` then FIFO order.

        Raises (when awaited):
            ChildFailed: the child failed or was cancelled; carries its error.
        """
        definition, address, arg_hash = self._child(proc, params, input)
        call: fx.Call[Any]
        call = fx.Call(self._actor.driver.next_seq(), arg_hash, definition, params, input, address)
        call.queue = self._queue(queue, priority)
        return self._made(call)

    def _queue(self, queue: Queue | str | None, priority: int) -> tuple[Queue, int] | None:
        chosen: tuple[Queue, int] | None = self._live().system.queues.choose(queue, priority)
        return chosen

    @overload
    def spawn(
        self,
        proc: ProcessDef[..., R],
        *params: str,
        restart: Restart = "transient",
        queue: Queue | str | None = None,
        priority: int = 0,
        **input: Any,
    ) -> fx.Spawn[ChildHandle[R]]: ...

    @overload
    def spawn(
        self,
        proc: str,
        *params: str,
        restart: Restart = "transient",
        queue: Queue | str | None = None,
        priority: int = 0,
        **input: Any,
    ) -> fx.Spawn[ChildHandle[Any]]: ...

    def spawn(
        self,
        proc: ProcessDef[..., Any] | str,
        *params: str,
        restart: Restart = "transient",
        queue: Queue | str | None = None,
        priority: int = 0,
        **input: Any,
    ) -> fx.Spawn[ChildHandle[Any]]:
        """A detached, supervised child; awaiting it gives a `ChildHandle` once
        the child exists. Spawning at an existing child's address gives that
        child.

        Args:
            restart: ``"transient"`` (restarted after a crash, the default),
                ``"permanent"`` (restarted whenever it ends) or
                ``"temporary"`` (never restarted), within this process's
                supervision limits (see `process`).
            queue, priority: as for `call`: the child waits for a slot.
        """
        if restart not in RESTART_TYPES:
            raise InvalidArguments(f"restart must be one of {RESTART_TYPES}, not {restart!r}")
        definition, address, arg_hash = self._child(proc, params, input)
        spawn: fx.Spawn[ChildHandle[Any]] = fx.Spawn(
            self._actor.driver.next_seq(), arg_hash, definition, params, input, address, restart
        )
        spawn.queue = self._queue(queue, priority)
        return self._made(spawn)

    def join(self, child: ChildHandle[R] | str) -> fx.Join[R]:
        """An effect that waits for a child this run spawned to end for good
        and gives its result; usable alone or in `first`/`all`/`settled`.

        A supervised restart of the child is not its end: the join waits
        through it. Replay gives the same outcome. While it waits, this
        instance stays in memory.

        Raises:
            ChildFailed: (awaited) the child failed or was cancelled, or its
                address was cancelled and started afresh (the join is for
                the incarnation spawned).
            InvalidArguments: (at the call) ``child`` is not a handle or
                address of a child this run spawned (``ctx.spawn``).
        """
        if isinstance(child, ChildHandle):
            address, incarnation = child.id, child.incarnation or None
        elif isinstance(child, str):
            address, incarnation = child, None
        else:
            raise InvalidArguments(
                f"ctx.join takes the ChildHandle ctx.spawn gave (or its address), not {child!r}"
            )
        actor = self._live()
        if address not in actor.children:
            raise InvalidArguments(
                f"ctx.join takes a child this run spawned; {address!r} is not one (spawn it "
                "with ctx.spawn first, or wait for another instance with a signal it sends)"
            )
        arg_hash = digest(address, what="join")
        return self._made(fx.Join(actor.driver.next_seq(), arg_hash, address, incarnation))

    @overload
    def scope(
        self,
        items: Any,
        proc: ProcessDef[..., R],
        key: Callable[[Any], Any] | None = None,
        input: Callable[[Any], dict[str, Any]] | None = None,
        *,
        queue: Queue | str | None = None,
        priority: int = 0,
    ) -> fx.Effect[dict[Any, R]]: ...

    @overload
    def scope(
        self,
        items: Any,
        proc: str,
        key: Callable[[Any], Any] | None = None,
        input: Callable[[Any], dict[str, Any]] | None = None,
        *,
        queue: Queue | str | None = None,
        priority: int = 0,
    ) -> fx.Effect[dict[Any, Any]]: ...

    def scope(
        self,
        items: Any,
        proc: ProcessDef[..., Any] | str,
        key: Callable[[Any], Any] | None = None,
        input: Callable[[Any], dict[str, Any]] | None = None,
        *,
        queue: Queue | str | None = None,
        priority: int = 0,
    ) -> fx.Effect[dict[Any, Any]]:
        """An effect: one awaited child per item, run concurrently:
        ``{key(item): result}``.

        A tuple item fills the child's path params; anything else fills its
        single path param. ``input(item)`` (optional) gives the child's
        keyword input; ``key`` defaults to the item itself. With ``queue=``
        the children wait for its slots (``priority`` as for `call`), so a
        fan-out runs only as many at once as the queue allows.

        Raises:
            InvalidArguments: duplicate keys (before anything starts).
            LimitExceeded: more than 1000 items (before anything starts).
            ChildFailed: (when awaited) the first child failure; its
                siblings are cancelled.
        """
        items, keys = check_scope(items, key)
        calls: list[fx.Effect[Any]] = []
        try:
            for item in items:
                calls.append(
                    self.call(
                        proc,
                        *(item if isinstance(item, tuple) else (item,)),
                        queue=queue,
                        priority=priority,
                        **(input(item) if input is not None else {}),
                    )
                )
        except BaseException:
            self._actor.driver.unmade(calls)  # the process never gets them
            raise
        joined = self._made(fx.All(calls, settled=False), composite=True)
        return self._made(
            fx.Then(joined, lambda values: dict(zip(keys, values, strict=True)), "ctx.scope(...)"),
            composite=True,
        )

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

    def _compose(self, make: Callable[[list[fx.Effect[Any]]], C], children: list[Any]) -> C:
        """``make(children)``, once they are known to be effects; if it
        raises, the process no longer holds them as unawaited."""
        try:
            _check_effects(children)
            return make(children)
        except BaseException:
            self._actor.driver.unmade(children)  # refused: the process has them no more
            raise

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


def _check_signals(signals: tuple[Signal, ...]) -> None:
    for signal in signals:
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"expected an actors.Signal, got {signal!r}")


def _check_effects(effects: Any) -> None:
    for effect in effects:
        if not isinstance(effect, fx.Effect):
            raise InvalidArguments(
                f"ctx.first/all/settled take effects (ctx.wait(...), ctx.sleep(...), "
                f"ctx.step(...), ...), got {effect!r}"
            )
        if effect.ends_run:
            raise InvalidArguments(
                "ctx.continue_as_new(...) ends the run, so it races and joins nothing: "
                "await it alone"
            )
        if isinstance(effect, fx.Send):  # (SendMany and ctx.signal's too)
            # A send is written with its log entry whatever a race decides,
            # so a replay could pick another winner than the live run did.
            raise InvalidArguments(
                "ctx.send(...), ctx.send_many(...) and ctx.signal(...) take effect where "
                "they are awaited, so they race and join nothing: await them alone"
            )


async def _nothing() -> None:
    """What ``ctx.send_many([])`` awaits: nothing is sent or recorded."""
