"""``export`` and ``import``: an instance's history, to a file and back.

``export ADDRESS`` prints the history of the instance at ADDRESS and its
descendants (the format of `actors._tools._history`, documented in
docs/histories.md) to stdout, or to ``--output FILE``, which it makes (or
truncates) with mode 0600 whatever the umask: a history holds every
payload and result of its instances. It reads as ``show``
does: read-only, beside a running system too.

``import FILE`` writes a history's instances into the journal, in one
transaction, with the transaction `actors._tools._history.import_txn` builds for
`actors.testing.import_history` too; the instances run when a system that
runs their processes next opens the journal. A ``--journal`` directory
that does not exist yet is made into a new journal (the one to debug in).
It refuses an address where an instance is (exit 1) unless ``--replace``,
and a journal that a running system holds (exit 4): that system would not
see the change, and its control socket offers no import.

Both take ``--journal postgresql://USER@HOST:PORT/DATABASE`` (with
``--schema``, default ``actors``) as well as an LMDB journal's directory.
A PostgreSQL journal is shared by its nodes: an import there runs once a
node recovers or activates the instance (a running node does not know of
it before).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from storage.errors import Conflict, EncodeError, JournalLocked

from ...errors import AlreadyStarted, HistoryFormatError, NotDelivered
from .. import _admin
from ._access import journal_dir, names_postgres, opening_postgres, reading, writing
from ._errors import CORRUPT, HELD, NOT_FOUND, OK, REFUSED, CLIError
from ._render import emit, plural

__all__ = ["add_history_arguments", "export", "import_"]


def add_history_arguments(
    export_p: argparse.ArgumentParser, import_p: argparse.ArgumentParser
) -> None:
    """The ``export`` and ``import`` commands' own options."""
    export_p.add_argument(
        "address",
        help="the instance's address, e.g. orders/o-17 ('actors "
        "list' shows them); its descendants come with it",
    )
    export_p.add_argument(
        "--output", "-o", metavar="FILE", help="write the history to FILE (default: stdout)"
    )
    import_p.add_argument("file", metavar="FILE", help="a history file ('-' reads stdin)")
    import_p.add_argument(
        "--replace",
        action="store_true",
        help="put each instance in place of the one at its address, instead of refusing",
    )


async def export(args: argparse.Namespace) -> int:
    """``actors export``: the history of one instance (and its descendants)."""
    try:
        if names_postgres(args):
            async with opening_postgres(args, readonly=True) as journal:
                history = await _admin.read_history(journal, args.address)
        else:
            path = journal_dir(args)
            async with reading(path) as lmdb:
                history = await _admin.read_history(lmdb, args.address)
    except NotDelivered as exc:
        raise CLIError(str(exc), NOT_FOUND) from None
    if args.output is None:
        # A terminal gets JSON escapes for everything past ASCII (C1 controls,
        # bidi overrides), as every other command escapes what it prints; a
        # pipe or a file gets the bytes as they are.
        data = _admin.dumps(history, ascii_only=sys.stdout.isatty())
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return OK
    data = _admin.dumps(history)
    try:
        _write_private(args.output, data)
    except OSError as exc:
        raise CLIError(f"cannot write {args.output}: {exc}") from None
    print(
        f"exported {args.address} ({plural(len(history.instances), 'instance')}) to {args.output}",
        file=sys.stderr,
    )
    return OK


def _write_private(name: str, data: bytes) -> None:
    """Write ``data`` to file ``name``, readable and writable by its owner
    only (0600), whatever the umask, and whether or not the file was there:
    a history holds every payload and result of its instances.

    Invariant: the file is 0600 before any byte of ``data`` is in it."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o600)
    with open(fd, "wb", closefd=True) as file:
        os.fchmod(fd, 0o600)  # a file that was there keeps its mode through O_CREAT
        file.write(data)


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _read_file(name: str) -> _admin.History:
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise CLIError(f"cannot read {name}: {exc}", NOT_FOUND) from None
    try:
        return _admin.loads(data)
    except HistoryFormatError as exc:
        raise CLIError(f"{name}: {exc}", CORRUPT) from None


async def import_(args: argparse.Namespace) -> int:
    """``actors import``: a history's instances, into this journal."""
    history = _read_file(args.file)
    created = False
    try:
        if names_postgres(args):
            async with opening_postgres(args, readonly=False) as journal:
                await _admin.import_history(journal, history, replace=args.replace)
        else:
            path = Path(args.journal)
            created = not path.exists()  # noqa: ASYNC240 - one stat; a new journal, made for the import
            if not created:
                path = journal_dir(args)
            try:
                async with writing(path) as lmdb:
                    await _admin.import_history(lmdb, history, replace=args.replace)
            except JournalLocked as exc:
                owner = f" (pid {exc.pid})" if exc.pid else ""
                raise CLIError(
                    f"cannot import into {path}: a running system{owner} holds it, and would "
                    "not see instances written behind its back (its control socket offers no "
                    "import); stop it, import, and open it again, or import into another "
                    "journal",
                    HELD,
                ) from None
    except AlreadyStarted as exc:
        raise CLIError(str(exc), REFUSED) from None
    except Conflict as exc:
        raise CLIError(f"not imported: the journal changed meanwhile ({exc}); try again") from None
    except EncodeError as exc:
        raise CLIError(
            f"not imported: the history holds a value of a class this process has not "
            f"imported; pass --import MODULE for the module that defines it ({exc})"
        ) from None
    addresses = [one.address for one in history.instances]
    made = f" into a new journal at {args.journal}" if created else ""
    doc = {
        "imported": True,
        "addresses": addresses,
        "replaced": args.replace,
        "created": created,
        "statuses": {one.address: one.status for one in history.instances},
    }

    def render() -> str:
        head = (
            f"imported {plural(len(addresses), 'instance')} from {args.file}{made}; they run "
            "when a system that runs their processes next opens this journal:"
        )
        lines = [head]
        lines += [f"  {one.address}  ({one.status})" for one in history.instances]
        return "\n".join(lines)

    emit(args, doc, render)
    return OK
