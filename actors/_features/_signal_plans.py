"""Who a signal routed by identity reaches, and the transaction that
reaches them (see `_signals` for the whole story).

`routes_of` finds, once per system, the listening processes and where the
signal's identity fields sit among their path params; `read_plan` reads the
recipients of one signal in one snapshot, through the identity index; and
`signal_txn` writes its messages on the conditions that make a signal reach
every instance that exists when it commits (`Plan`, `READ_AGAIN`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from storage import MAIL_STATUSES, TERMINAL_STATUSES, Reader, Txn, encode
from storage.errors import JournalCorrupt

from .._kernel import _message_txns
from .._kernel._checks import check_name
from .._kernel._identity import bucket, bucket_prefix, generation_key
from .._kernel._message_txns import Notice
from .._kernel._process import ProcessDef
from .._kernel._values import Signal
from ..errors import InvalidArguments, LimitExceeded

__all__ = [
    "READ_AGAIN",
    "Plan",
    "Route",
    "check_identity",
    "check_payload",
    "read_plan",
    "routes_of",
    "signal_txn",
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
