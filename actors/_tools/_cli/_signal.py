"""``actors signal``: a signal routed by identity, through the running system.

Which processes listen to a signal is the application's code
(``@process(..., listens=[...])``), which the command line does not have:
so the system that holds the journal routes it (`ActorSystem.signal`),
asked through its control socket. With no system running, nothing is
written and the command says so.
"""

from __future__ import annotations

import argparse
from typing import Any

from storage.errors import JournalLocked

from ._access import journal_dir, writing
from ._errors import OK, USAGE, CLIError
from ._remote import owner, through_system
from ._render import emit
from ._write import _payload

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
    path = journal_dir(args)
    identity = _identity(args.identity)
    payload = _payload(args.payload)
    key = args.key
    if key is not None and not key:
        raise CLIError("--key takes a non-empty key, e.g. a request id", USAGE)
    try:
        async with writing(path):
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
