"""``actors signal``: a signal routed by identity, through the running system.

Which processes listen to a signal is the application's code
(``@process(..., listens=[...])``), which the command line does not have:
so the system that holds an LMDB journal routes it (`ActorSystem.signal`),
asked through its control socket. With no system running, nothing is
written and the command says so.

On a PostgreSQL journal the command routes it itself, as a node does
(`actors._features._signals`: the identity index, one conditional commit, read again
when a start or an end raced it), along the processes of the modules
given with ``--import`` that listen to it. Its messages are sends: nothing
is claimed, and the commit notifies the nodes that run the recipients.
"""

from __future__ import annotations

import argparse
from typing import Any

from storage.errors import Conflict, JournalLocked

from ...errors import ActorError
from .._admin import Route, route_signal, signal_routes
from ._access import PostgresAt, journal_at, writing_at
from ._arguments import definitions, json_payload
from ._errors import OK, USAGE, CLIError
from ._remote import owner, through_system
from ._render import emit

__all__ = ["add_signal_arguments", "signal"]


def add_signal_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``actors signal``."""
    p.add_argument("signal", help="the signal's name, as the processes listen to it")
    p.add_argument(
        "payload",
        nargs="?",
        metavar="JSON",
        help="the payload as JSON ('-' reads stdin; default null)",
    )
    p.add_argument(
        "--identity",
        action="append",
        required=True,
        metavar="FIELD=VALUE",
        help="an identity field and its value (order_id=o-17); once per field",
    )
    p.add_argument(
        "--key",
        metavar="KEY",
        help="an idempotency key: an incarnation that has had it gets nothing more",
    )


def _identity(pairs: list[str]) -> dict[str, str]:
    identity: dict[str, str] = {}
    for pair in pairs:
        field, sep, value = pair.partition("=")
        if not sep or not field:
            raise CLIError(f"--identity takes FIELD=VALUE (order_id=o-17), not {pair!r}", USAGE)
        if field in identity:
            raise CLIError(f"--identity gives {field!r} twice; give each field once", USAGE)
        identity[field] = value
    return identity


async def signal(args: argparse.Namespace) -> int:
    """``actors signal``: put a signal in the mailbox of every live instance
    that listens to it and has the identity given."""
    path = journal_at(args)
    identity = _identity(args.identity)
    payload = json_payload(args.payload)
    key = args.key
    if key is not None and not key:
        raise CLIError("--key takes a non-empty key, e.g. a request id", USAGE)
    if isinstance(path, PostgresAt):
        routes = _routes(args, identity)
        async with writing_at(path) as journal:
            try:
                reached = await route_signal(journal, routes, args.signal, identity, payload, key)
            except Conflict as exc:
                raise CLIError(f"not signalled: {exc}; try again") from None
        doc = {"signal": args.signal, "identity": identity, "payload": payload, "reached": reached}
        emit(
            args,
            doc,
            lambda: f"signalled {args.signal!r} {identity}: {reached} instance(s) reached",
        )
        return OK
    try:
        async with writing_at(path):
            pass
    except JournalLocked as held:
        fields: dict[str, Any] = {"signal": args.signal, "identity": identity, "payload": payload}
        if key is not None:
            fields["key"] = key
        reached = await through_system(
            path,
            held,
            "signal",
            doing=f"signal {args.signal!r}",
            instead="signal",
            **fields,
        )
        by = owner(held)
        doc = {"signal": args.signal, "identity": identity, "payload": payload, "reached": reached}
        emit(
            args,
            doc,
            lambda: (
                f"signalled {args.signal!r} {identity} through {by}: {reached} instance(s) reached"
            ),
        )
        return OK
    raise CLIError(
        f"no system holds {path}: which processes listen to {args.signal!r} is the "
        "application's code, so a running system routes a signal; open it (its control "
        "socket serves this command) and run this again",
        USAGE,
    )


def _routes(args: argparse.Namespace, identity: dict[str, str]) -> tuple[Route, ...]:
    """The routes of ``args.signal`` along the ``--import``ed processes that
    listen to it; a `CLIError` if none does or ``identity`` has other fields."""
    procs = [p for found in definitions(args.imports).values() for p in found]
    try:
        routes = signal_routes(procs, args.signal)
    except ActorError as exc:
        raise CLIError(str(exc), USAGE) from None
    if not routes:
        raise CLIError(
            f"no process of the --import'ed modules ({', '.join(args.imports) or 'none'}) "
            f"listens to {args.signal!r}: which processes do is the application's code; "
            "pass --import MODULE for each module that defines one (listens=[...])",
            USAGE,
        )
    if sorted(routes[0].identity) != sorted(identity):
        raise CLIError(
            f"{args.signal!r} is listened to with the identity fields "
            f"{list(routes[0].identity)}; give exactly those with --identity",
            USAGE,
        )
    return routes
