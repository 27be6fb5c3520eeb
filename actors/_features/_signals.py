"""Signals routed by identity: ``system.signal`` and ``ctx.signal``.

A `Signal` declared with identity fields (``Signal("orders.shipped",
identity=("order_id",))``) is emitted with their values (``{"order_id":
"o-17"}``) and becomes one mailbox message in every instance that exists,
has not ended (it takes mail: `MAIL_STATUSES`), is of a process that
listens to it (``@process(..., listens=[shipped])``), and whose path
params of those names have those values. The emitter names no address.

Finding the recipients reads no instance that is not one: per listening
process, the bucket of the identity index (`_identity`) for the signal's
first field and its value is one range read, and each row found is
checked (its other identity fields, its status). The cost of a signal is
O(listening processes + instances found), whatever else the journal holds.

Writing them reuses the transactions of ``send_many``: the messages
(`_message_txns.add_message`), each on condition that its instance still takes
mail, with a keyed signal's key per recipient (as a keyed ``send`` writes
it), all in one transaction, on condition that no bucket read has seen a
start since (`Txn.expect_state` on its generation row). A start that
commits between the read and the commit fails that condition: the signal
reads again, so every instance either gets the signal or was started
after it (see docs/guarantees.md). An instance that ended meanwhile fails
its condition the same way. Once committed, each message is handed over as
a send's is (`Router.route`): to the instance live here, by activating
it, or (another node's) by the commit's own mail notice.

``ctx.signal`` is an effect (`SignalEffect`): run live, its log entry (the
count) is in the transaction with the messages, so a replay answers it
from the log and sends nothing again; a crash before the commit leaves
neither, and the replay signals live, once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import trio

from storage import Journal, Txn, digest
from storage.errors import Conflict

from .._kernel import _effects as fx, _guard, _message_txns, _tracing
from .._kernel._checks import check_name
from .._kernel._interfaces import ActorAPI
from .._kernel._log import LogEntry
from .._kernel._process import ProcessDef
from .._kernel._values import Signal
from ..errors import InvalidArguments
from ._sending import Router
from ._signal_plans import (
    READ_AGAIN,
    Route,
    check_identity,
    check_payload,
    read_plan,
    routes_of,
    signal_txn,
)

__all__ = ["SignalBehaviour", "SignalEffect", "SignalRouter", "new_signal"]


class SignalRouter:
    """How signals routed by identity reach instances: a part of
    `ActorSystem` (see the module docstring)."""

    def __init__(
        self,
        journal: Journal,
        procs: Mapping[str, ProcessDef[..., Any]],
        router: Router,
        epoch_now: Callable[[], float],
        max_payload: int,
        tracing: bool,
    ) -> None:
        self.journal = journal
        self.router = router  # hands what a commit wrote to the instances in memory
        self.epoch_now = epoch_now  # the system's clock (`ActorSystem.epoch_now`)
        self.max_payload = max_payload
        self.tracing = tracing  # (read by `_tracing.traceparent`, as the system's)
        self.routes = routes_of(procs.values())
        # Invariant: at most one keyed signal per key reads and writes at a
        # time in this system (as `KeyedSends` for sends).
        self._keyed: dict[str, trio.Event] = {}

    def arrange(self, signal: Signal, values: tuple[str, ...]) -> tuple[str, ...]:
        """``values``, given in ``signal``'s field order, in the order of the
        fields the listening processes declared (`deliver` takes them so).

        Raises:
            InvalidArguments: they listen to that name with other fields.
        """
        routes = self.routes.get(signal.name)
        if routes is None or routes[0].identity == signal.identity:
            return values
        declared = routes[0].identity
        if sorted(declared) != sorted(signal.identity):
            raise InvalidArguments(
                f"{signal.name!r} is signalled with the identity fields "
                f"{list(signal.identity)}, but {routes[0].template!r} listens to it with "
                f"{list(declared)}; signal it with the Signal the processes listen to"
            )
        given = dict(zip(signal.identity, values, strict=False))  # (same fields, another order)
        return tuple(given[field] for field in declared)

    async def signal(
        self, signal: Signal, identity: Any, payload: Any = None, *, key: str | None = None
    ) -> int:
        """The body of `ActorSystem.signal`."""
        _guard.refuse(
            "system.signal()", "signal from the process with ctx.signal, which is recorded"
        )
        values = self.arrange(signal, check_identity(signal, identity, "system.signal"))
        if key is not None:
            _message_txns.key_cursor(check_name(key, "signal(key=...)"))
        check_payload(signal, payload, self.max_payload)  # whoever listens

        async def commit(txn: Txn, count: int) -> list[int]:
            txn.in_doubt = self.router.sent_in_doubt
            return await self.journal.commit(txn)

        return await self.deliver(signal, values, payload, key, commit)

    async def deliver(
        self,
        signal: Signal,
        values: tuple[str, ...],
        payload: Any,
        key: str | None,
        commit: Callable[[Txn, int], Awaitable[list[int]]],
    ) -> int:
        """Route one signal: read its recipients, write their messages with
        ``commit(txn, count)``, hand them over; again if the commit was
        refused for what it read. Returns how many instances it reached."""
        routes = self.routes.get(signal.name, ())
        if not routes:
            return 0
        if key is None:
            return await self._deliver(routes, signal, values, payload, None, commit)
        while (writing := self._keyed.get(key)) is not None:
            await writing.wait()
        self._keyed[key] = done = trio.Event()
        try:
            return await self._deliver(routes, signal, values, payload, key, commit)
        finally:
            del self._keyed[key]
            done.set()

    async def _deliver(
        self,
        routes: Sequence[Route],
        signal: Signal,
        values: tuple[str, ...],
        payload: Any,
        key: str | None,
        commit: Callable[[Txn, int], Awaitable[list[int]]],
    ) -> int:
        careful = False
        while True:
            plan = await self.journal.read(lambda r: read_plan(r, routes, values, key, careful))
            if not plan.recipients:
                return 0  # nothing is kept
            txn, notices = signal_txn(
                plan,
                signal.name,
                payload,
                self.epoch_now(),
                max_payload=self.max_payload,
                trace=_tracing.traceparent(self) if self.tracing else None,
                key=key,
            )
            try:
                results = await commit(txn, len(plan.recipients))
            except Conflict as exc:
                if exc.reason in READ_AGAIN:
                    # A start since the read, or a recipient that takes no
                    # mail (now, or since long: its record is read next).
                    careful = careful or exc.reason != "state"
                    await trio.lowlevel.checkpoint()
                    continue
                raise
            for notice in notices:
                self.router.route(notice, results)
            return len(notices)


# -- ctx.signal -------------------------------------------------------------------------


class SignalEffect(fx.Send):
    """``ctx.signal``: messages routed by identity, written in one
    transaction with this effect's log entry, whose value is their count."""

    __slots__ = ("payload", "signal", "values")
    kind = "signal"

    def __init__(
        self,
        seq: int,
        hash: bytes,
        signal: Signal,
        values: tuple[str, ...],
        payload: Any,
        key: str | None,
    ) -> None:
        fx.Send.__init__(self, seq, signal.name, hash, (), key, None)
        self.signal = signal
        self.values = values
        self.payload = payload


def new_signal(
    actor: ActorAPI, signal: Any, identity: Any, payload: Any, key: str | None
) -> SignalEffect:
    """The effect of ``ctx.signal(signal, identity, payload, key=key)``.

    Raises:
        InvalidArguments: see `check_identity` and `SignalRouter.arrange`; a
            key that is not a name.
        LimitExceeded: a key over `_message_txns.MAX_KEY_BYTES`, a payload over
            ``max_payload``.
        EncodeError: a payload the codec cannot carry, naming the path in it.
    """
    values = check_identity(signal, identity, "ctx.signal")
    if key is not None:
        _message_txns.key_cursor(check_name(key, "ctx.signal(key=...)"))
    check_payload(signal, payload, actor.system.max_payload)
    arg_hash = digest([signal.name, list(values), payload, key], what="signal")
    values = actor.system.signals.arrange(signal, values)
    return SignalEffect(actor.driver.next_seq(), arg_hash, signal, values, payload, key)


class SignalBehaviour(fx.Behaviour):
    @staticmethod
    def start(actor: ActorAPI, effect: SignalEffect, started: LogEntry | None) -> None:
        actor.start_task(_run, effect)


async def _run(actor: ActorAPI, effect: SignalEffect) -> None:
    try:
        # What the process wrote before commits first, in its order (its
        # writes are one chain): a signal refused for a start or an end
        # since its read is built again, and must not take them with it.
        actor.writes.flush()

        async def commit(txn: Txn, count: int) -> list[int]:
            # Invariant: the messages and the effect's log entry (the count)
            # are written in one transaction, so a replay finds the entry
            # exactly when the messages were stored.
            txn.put_log(actor.iid, actor.run, effect.seq, effect.describe(value=count).to_stored())
            return await actor.writes.barrier(txn)

        system = actor.system
        count = await system.signals.deliver(
            effect.signal, effect.values, effect.payload, effect.key, commit
        )
        if count:
            actor.finish(effect, count)  # its entry is written
        else:  # nothing was written: the entry rides on the next commit
            actor.finish(effect, 0, None, effect.describe(value=0))
    finally:
        actor.task_finished()
