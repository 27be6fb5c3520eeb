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

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import trio

from storage import MAIL_STATUSES, TERMINAL_STATUSES, Reader, Txn, digest, encode
from storage.errors import Conflict, JournalCorrupt

from .._kernel import _effects as fx, _guard, _message_txns, _tracing
from .._kernel._checks import check_name
from .._kernel._identity import bucket, bucket_prefix, generation_key
from .._kernel._interfaces import ActorAPI, SystemAPI
from .._kernel._log import LogEntry
from .._kernel._message_txns import Notice
from .._kernel._process import ProcessDef
from .._kernel._values import Signal
from ..errors import InvalidArguments, LimitExceeded
from ._sending import commit_through

__all__ = [
    "READ_AGAIN",
    "Plan",
    "Route",
    "SignalBehaviour",
    "SignalEffect",
    "SignalRouter",
    "check_identity",
    "new_signal",
]

# A commit refused for one of these read what it was built on again: a
# start in a bucket read (its generation moved), or a recipient that ended.
READ_AGAIN = frozenset({"state", "status", "missing", "incarnation"})


@attrs.frozen
class Route:
    """Where one listening process finds a signal's recipients: the bucket
    of `field` (the signal's first identity field) and the positions in
    its params of every identity field, in the signal's order."""

    template: str
    identity: tuple[str, ...]
    positions: tuple[int, ...]

    @property
    def field(self) -> str:
        """The field whose bucket holds the recipients: the first."""
        return self.identity[0]


@attrs.frozen
class Plan:
    """The recipients of one signal as read, and what the write is
    conditional on: the generation of each bucket read, and the index rows
    of instances gone or ended for good, deleted with it."""

    recipients: list[bytes]
    generations: list[tuple[str, int]]
    stale: list[str]


def routes_of(procs: Iterable[ProcessDef[..., Any]]) -> dict[str, tuple[Route, ...]]:
    """The routes of each signal name the processes ``procs`` listen to.

    Raises:
        InvalidArguments: two of them listen to one name with different
            identity fields.
    """
    found: dict[str, list[Route]] = {}
    declared: dict[str, tuple[tuple[str, ...], ProcessDef[..., Any]]] = {}
    for proc in procs:
        for signal in proc.listens:
            first = declared.setdefault(signal.name, (signal.identity, proc))
            if first[0] != signal.identity:
                raise InvalidArguments(
                    f"{first[1].template!r} and {proc.template!r} listen to {signal.name!r} "
                    f"with different identity fields ({list(first[0])} and "
                    f"{list(signal.identity)}); declare the signal once and listen to that"
                )
            positions = tuple(proc.params.index(field) for field in signal.identity)
            found.setdefault(signal.name, []).append(
                Route(proc.template, signal.identity, positions)
            )
    return {name: tuple(routes) for name, routes in found.items()}


def check_identity(signal: Any, identity: Any, what: str) -> tuple[str, ...]:
    """The values of ``identity`` in ``signal``'s field order.

    Raises:
        InvalidArguments: not a Signal with identity fields, an identity
            that is not a mapping of exactly its fields, or a value that is
            no path param (a non-empty str without "/").
    """
    if not isinstance(signal, Signal):
        raise InvalidArguments(f"{what} takes an actors.Signal, not {signal!r}")
    fields = signal.identity
    if not fields:
        raise InvalidArguments(
            f"{what}: {signal.name!r} has no identity fields, so nothing routes it by "
            "identity; declare them (Signal(name, identity=('order_id',))) or send it to "
            "an address with send"
        )
    if not isinstance(identity, Mapping):
        raise InvalidArguments(
            f"{what} takes the identity as a mapping of {signal.name!r}'s fields "
            f"{list(fields)}, like {{{fields[0]!r}: 'o-17'}}, not {identity!r}"
        )
    missing = [f for f in fields if f not in identity]
    unknown = sorted(repr(f) for f in identity if f not in fields)
    if missing or unknown:
        said = []
        if missing:
            said.append(f"missing {', '.join(repr(f) for f in missing)}")
        if unknown:
            said.append(f"unknown {', '.join(unknown)}")
        raise InvalidArguments(
            f"{what}: the identity of {signal.name!r} has exactly the fields "
            f"{list(fields)}; {' and '.join(said)}"
        )
    values = []
    for field in fields:
        value = identity[field]
        if not isinstance(value, str) or not value or "/" in value:
            raise InvalidArguments(
                f"{what}: identity field {field!r} must be a path param's value (a "
                f"non-empty str without '/'), not {value!r}"
            )
        values.append(check_name(value, f"{what}'s identity field {field!r}"))
    return tuple(values)


def check_payload(signal: Signal, payload: Any, max_payload: int) -> None:
    """Refuse, at the call, a payload no recipient could be sent.

    Raises:
        EncodeError: the codec cannot carry it (naming the path inside it).
        LimitExceeded: it encodes to more than ``max_payload`` bytes.
    """
    size = len(encode(payload, what="payload"))
    if size > max_payload:
        raise LimitExceeded(
            f"the {signal.name!r} payload encodes to {size} bytes, over the "
            f"max_payload={max_payload} limit; send a reference (an id or a path) "
            "instead, or raise open_system(max_payload=...)"
        )


def read_plan(
    r: Reader, routes: Sequence[Route], values: Sequence[str], key: str | None, careful: bool
) -> Plan:
    """The recipients of a signal with identity ``values`` along ``routes``,
    read in one snapshot (see `Plan`); with ``key``, those whose
    incarnation has had it are left out.

    Not ``careful``, every instance the index names is taken for a
    recipient without reading its record: the commit's conditions check
    that each takes mail, as for ``send_many``, and most do (a signal that
    met ended ones deleted their rows). ``careful``, after a commit refused
    for a recipient's status, each record is read: those that take no mail
    are left out, and the rows of those ended for good are deleted."""
    recipients: list[bytes] = []
    generations: list[tuple[str, int]] = []
    stale: list[str] = []
    cursor = None if key is None else _message_txns.key_cursor(key)
    for route in routes:
        name = bucket(route.template, route.field, values[0])
        gen = generation_key(name)
        # (The generation key's prefix matches it alone: bucket names have one length.)
        rows = r.states(gen, 1)
        generations.append((gen, rows[0].version if rows else 0))
        prefix = bucket_prefix(name)
        for row in r.states(prefix):
            params = row.value
            if not isinstance(params, list) or any(
                pos >= len(params) or params[pos] != value
                for pos, value in zip(route.positions, values, strict=False)
            ):
                continue
            iid = bytes.fromhex(row.key[len(prefix) :])
            if not careful:
                if cursor is None or r.cursor(iid, cursor) is None:
                    recipients.append(iid)
                continue
            try:
                instance = r.instance(iid)
            except JournalCorrupt:
                continue  # its sends fail as well; the operator sees it in `list`
            if instance is None or instance.status in TERMINAL_STATUSES:
                # (Ended for good; a new incarnation there indexes itself again.)
                stale.append(row.key)
                continue
            if instance.status not in MAIL_STATUSES or instance.process != route.template:
                continue
            if cursor is not None and r.cursor(iid, cursor) is not None:
                continue  # this incarnation had the key: nothing more for it
            recipients.append(iid)
    return Plan(recipients, generations, stale)


def signal_txn(
    plan: Plan,
    name: str,
    payload: Any,
    now: float,
    *,
    max_payload: int,
    trace: str | None,
    key: str | None,
) -> tuple[Txn, list[Notice]]:
    """The write of a signal along ``plan``: its messages, each on condition
    that the recipient takes mail, with ``key`` per recipient, on condition
    that no bucket read has changed generation (see the module docstring)."""
    txn = Txn()
    for gen, version in plan.generations:
        txn.expect_state(gen, version)
    for iid in plan.recipients:
        txn.require(iid, MAIL_STATUSES)
    notices = [
        _message_txns.add_message(
            txn, iid, name, payload, now, max_payload=max_payload, trace=trace
        )
        for iid in plan.recipients
    ]
    if key is not None:
        cursor = _message_txns.key_cursor(key)
        for iid in plan.recipients:
            txn.set_cursor(iid, cursor, 0)
    for stale in plan.stale:
        txn.delete_state(stale)
    return txn, notices


class SignalRouter:
    """How signals routed by identity reach instances: a part of
    `ActorSystem` (see the module docstring)."""

    def __init__(self, system: SystemAPI) -> None:
        self.system = system
        self.routes = routes_of(system.registry.procs.values())
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
        system = self.system
        values = self.arrange(signal, check_identity(signal, identity, "system.signal"))
        if key is not None:
            _message_txns.key_cursor(check_name(key, "signal(key=...)"))
        check_payload(signal, payload, system.max_payload)  # whoever listens

        async def commit(txn: Txn, count: int) -> list[int]:
            return await commit_through(system.journal, txn, system.router.sent_in_doubt)

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
        system = self.system
        careful = False
        while True:
            plan = await system.journal.read(lambda r: read_plan(r, routes, values, key, careful))
            if not plan.recipients:
                return 0  # nothing is kept
            txn, notices = signal_txn(
                plan,
                signal.name,
                payload,
                system.epoch_now(),
                max_payload=system.max_payload,
                trace=_tracing.traceparent(system) if system.tracing else None,
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
                system.router.route(notice.iid, results[notice.slot], notice.message)
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
