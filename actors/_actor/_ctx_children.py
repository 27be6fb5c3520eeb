"""`ChildEffects`: the effects of ``ctx`` that start children and wait
for them: ``call``, ``spawn``, ``join`` and ``scope``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from storage import digest

from .._features._queue_state import Queue
from .._kernel import _effects as fx
from .._kernel._checks import check_scope, check_text
from .._kernel._handles import ChildHandle
from .._kernel._process import RESTART_TYPES, ProcessDef
from .._kernel._values import Restart
from ..errors import InvalidArguments
from ._ctx_core import ContextCore

__all__ = ["ChildEffects"]


P = ParamSpec("P")
R = TypeVar("R")  # a child process's result


class ChildEffects(ContextCore):
    """``ctx.call``, ``spawn``, ``join`` and ``scope`` (see `Context`)."""

    __slots__ = ()

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
        call.gate = self._queue(queue, priority)
        return self._made(call)

    def _queue(self, queue: Queue | str | None, priority: int) -> fx.StartGate | None:
        return self._live().system.gates.choose(queue, priority)

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
        spawn.gate = self._queue(queue, priority)
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
        children = actor.children
        if children is None or address not in children:
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
