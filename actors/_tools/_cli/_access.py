"""Opening the journal for reading or for writing, and finding an instance
(or those under an address) in it."""

from __future__ import annotations

import argparse
import os
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import overload

import attrs
import trio

import storage
from storage import (
    STATUS_WORDS,
    TERMINAL_STATUSES,
    InstanceRow,
    Journal,
    LMDBJournal,
    Reader,
    Txn,
    instance_id,
)
from storage.errors import JournalCorrupt

from ...errors import NotDelivered
from ._errors import CORRUPT, NOT_FOUND, USAGE, CLIError
from ._render import local_time

__all__ = [
    "Claimed",
    "PostgresAt",
    "claim",
    "claim_for_start",
    "find_instance",
    "journal_at",
    "journal_dir",
    "names_postgres",
    "not_live",
    "opening_postgres",
    "read_row",
    "reading",
    "under",
    "writing",
    "writing_at",
    "written_at",
]


def journal_dir(args: argparse.Namespace) -> Path:
    """The ``--journal`` directory, if it holds an LMDB journal (callers
    that also take a PostgreSQL URL go through `journal_at`).

    Raises:
        CLIError: no journal there.
    """
    path = Path(args.journal)
    hint = "pass the directory given to LMDBJournal(...)"
    if not path.exists():
        raise CLIError(f"no journal at {path}: the directory does not exist; {hint}", NOT_FOUND)
    if not path.is_dir():
        raise CLIError(f"no journal at {path}: it is a file; {hint}", NOT_FOUND)
    if not (path / "data.mdb").exists():
        raise CLIError(f"no journal at {path}: it holds no data.mdb; {hint}", NOT_FOUND)
    return path


@attrs.frozen
class PostgresAt:
    """A PostgreSQL journal named by ``--journal URL --schema NAME``."""

    url: str
    schema: str

    def __str__(self) -> str:
        return f"{self.url} (schema {self.schema})"


def journal_at(args: argparse.Namespace) -> Path | PostgresAt:
    """Where ``--journal`` points: an LMDB journal's directory (checked as
    `journal_dir` checks it) or a PostgreSQL URL."""
    if names_postgres(args):
        return PostgresAt(args.journal, args.schema or "actors")
    return journal_dir(args)


@overload
def reading(where: Path) -> AbstractAsyncContextManager[LMDBJournal]: ...
@overload
def reading(where: Path | PostgresAt) -> AbstractAsyncContextManager[Journal]: ...
def reading(where: Path | PostgresAt) -> AbstractAsyncContextManager[Journal]:
    """The journal opened read-only: no owner lock (LMDB) and read-only
    sessions (PostgreSQL, which also migrates nothing), so beside a running
    system too."""
    return _reading(where)


@asynccontextmanager
async def _reading(where: Path | PostgresAt) -> AsyncIterator[Journal]:
    if isinstance(where, PostgresAt):
        async with _postgres(where.url, where.schema, readonly=True) as pg:
            yield pg
        return
    journal = LMDBJournal(where, readonly=True)
    journal.check_shapes = True  # what the runtime would not read is reported corrupt
    async with _opened(journal):
        yield journal


@asynccontextmanager
async def writing(path: Path) -> AsyncIterator[LMDBJournal]:
    """The journal opened as a system would (taking the owner lock), as a
    brief holder: a system opening meanwhile waits for the write to end
    rather than being refused, as does another command's write.

    Raises:
        JournalLocked: a running system holds it (``pid`` names that system).
    """
    journal = LMDBJournal(path, brief=True)
    journal.check_shapes = True  # what the runtime would not read is reported corrupt
    async with _opened(journal):
        yield journal


@asynccontextmanager
async def _opened(journal: Journal) -> AsyncIterator[None]:
    """``journal`` open for the block; closed after it, even when the block
    is cancelled (the close drains what the command wrote)."""
    await journal.open()
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await journal.close()


@overload
def writing_at(where: Path) -> AbstractAsyncContextManager[LMDBJournal]: ...
@overload
def writing_at(where: Path | PostgresAt) -> AbstractAsyncContextManager[Journal]: ...
def writing_at(where: Path | PostgresAt) -> AbstractAsyncContextManager[Journal]:
    """The journal opened for a write, of either kind.

    LMDB: `writing` (a brief holder of the owner lock; `JournalLocked` when
    a running system holds it, which the caller then asks through its
    control socket). PostgreSQL: as a brief node of its own, under a node
    name no other process uses (`cli_node`) and its own lease, as any node
    writes: a write to a live instance claims it first (`claim`) and is
    fenced with that epoch, and once the command ends its lease is given
    back, so another node's takeover runs what it left live (within the
    takeover scan's quarter second)."""
    if isinstance(where, PostgresAt):
        return _postgres(where.url, where.schema, readonly=False, pool_size=2, node=cli_node())
    return writing(where)


def cli_node() -> str:
    """A node name for one run of the command line: its host, its pid and
    random bits, so no two runs (on one host or several) share a lease."""
    return f"cli-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


@attrs.frozen
class Claimed:
    """Who may write to an instance: this command (``epoch`` fences its
    write; None on a journal with one owner) or, ``owner``, the live node
    that runs it (the claim was refused)."""

    epoch: int | None
    owner: str | None = None

    def fence(self, txn: Txn, iid: bytes) -> None:
        """Fence ``txn`` with the claim's epoch (a no-op without one)."""
        if self.epoch is not None:
            txn.fence(iid, self.epoch)


async def claim(journal: Journal, iid: bytes) -> Claimed:
    """Claim the existing instance ``iid`` as a node does before it writes
    to it (`Journal.claim`): on a journal nodes share, this command owns it
    from now on (until it ends) unless another live node does. A journal
    with one owner (LMDB, held by the caller) claims nothing.

    Invariant: two commands that race to write to one instance never both
    hold it: the second's claim is refused while the first's lease holds,
    and a write fenced with an epoch that another claim replaced is refused
    (`Conflict`, reason ``"epoch"``)."""
    if journal.node is None:
        return Claimed(None)
    epoch = await journal.claim(iid)
    if epoch is not None:
        return Claimed(epoch)
    owner = await journal.read(lambda r: r.owner(iid))
    # (No owner named: no such instance, which a start creates as this node's.)
    return Claimed(None, owner)


async def claim_for_start(journal: Journal, txn: Txn, iid: bytes) -> Claimed:
    """Claim the existing instance ``iid`` for ``txn``, a start over it (a
    retry, a fork, a resume) that makes it live again: fenced with the
    claim; or, when another live node owns it (say the node that ran the
    failed run), unfenced, and ``txn``'s commit wakes that node
    (`Txn.wake`), which runs it once this command's lease ends (a start
    over an ended incarnation makes a new row, this command's). Either
    way the start's
    compare-and-set decides between two commands racing to write it: one
    commits, the other meets `Conflict`."""
    got = await claim(journal, iid)
    got.fence(txn, iid)
    if got.owner is not None:
        txn.wake(iid, got.owner)
    return got


def written_at(where: Path | PostgresAt) -> str:
    """How the text of a command that wrote says when the instance takes it up."""
    if isinstance(where, PostgresAt):
        return (
            "it runs on a node that runs its process: at once if one is running (its "
            "owner is woken, or another node takes it over), else when one opens the journal"
        )
    return "it runs when a system that runs its process next opens this journal"


def find_instance(r: Reader, address: str, path: Path | PostgresAt) -> InstanceRow:
    """The row at ``address``; a `CLIError` if there is none or it does not decode."""
    try:
        row = r.instance(instance_id(address))
    except JournalCorrupt as exc:
        raise CLIError(f"the record of {address!r} is corrupt: {exc}", CORRUPT) from None
    if row is None:
        raise CLIError(
            f"no instance at {address!r} in {path}; check the address "
            "('actors list' shows the addresses)",
            NOT_FOUND,
        )
    return row


def not_live(address: str, row: InstanceRow | None) -> NotDelivered:
    """Why a message to ``address`` was not stored, as `ActorSystem.send` says it."""
    if row is None:
        return NotDelivered(
            f"no instance at {address!r}; start one first or check the address",
            address=address,
            reason="unknown",
        )
    words = STATUS_WORDS.get(row.status, f"it is {row.status}")
    when = row.record.updated
    at = f" at {local_time(when)}" if when and row.status in TERMINAL_STATUSES else ""
    return NotDelivered(
        f"no live instance at {address!r} ({words}{at}); start a new one or check the address",
        address=address,
        reason=row.status,
    )


def read_row(r: Reader, iid: bytes) -> InstanceRow | None:
    """The row, or None when it is missing or does not decode."""
    try:
        return r.instance(iid)
    except JournalCorrupt:
        return None  # the status precondition still decides


# -- PostgreSQL journals named by --journal URL ------------------------------------------

_POSTGRES_URLS = ("postgresql://", "postgres://")


def names_postgres(args: argparse.Namespace) -> bool:
    """Whether ``--journal`` is a PostgreSQL journal's URL (else an LMDB
    journal's directory).

    Raises:
        CLIError: another URL, or ``--schema`` given with a directory.
    """
    if args.journal.startswith(_POSTGRES_URLS):
        return True
    if "://" in args.journal:
        raise CLIError(
            f"--journal {args.journal!r}: give an LMDB journal's directory, or a PostgreSQL "
            "journal's URL (postgresql://USER@HOST:PORT/DATABASE)",
            USAGE,
        )
    if getattr(args, "schema", None) is not None:
        raise CLIError(
            f"--schema names the schema of a PostgreSQL journal, and --journal {args.journal!r} "
            "is a directory (an LMDB journal); drop --schema, or give a postgresql:// URL",
            USAGE,
        )
    return False


@asynccontextmanager
async def opening_postgres(
    args: argparse.Namespace, *, readonly: bool, pool_size: int = 1
) -> AsyncIterator[Journal]:
    """The PostgreSQL journal at ``--journal`` (schema ``--schema``), open.

    Raises:
        CLIError: the 'postgres' extra is not installed, or a bad URL or schema.
    """
    async with _postgres(
        args.journal, args.schema or "actors", readonly=readonly, pool_size=pool_size
    ) as journal:
        yield journal


@asynccontextmanager
async def _postgres(
    url: str, schema: str, *, readonly: bool, pool_size: int = 1, node: str | None = None
) -> AsyncIterator[Journal]:
    try:
        cls = storage.PostgresJournal  # the optional 'postgres' extra
    except ImportError as exc:
        raise CLIError(
            f"a PostgreSQL journal needs the 'postgres' extra ({exc}); install it with: "
            "pip install 'trio-actors[postgres]'",
            USAGE,
        ) from None
    try:
        journal: Journal = cls(url, schema=schema, pool_size=pool_size, readonly=readonly)
    except ValueError as exc:
        raise CLIError(f"--journal/--schema: {exc}", USAGE) from None
    if node is not None:
        journal.set_node(node)  # a writer: a node of its own (see writing_at)
        journal.check_shapes = True  # what the runtime would not read is reported corrupt
    async with _opened(journal):
        yield journal


def under(address: str | None, prefix: str | None) -> bool:
    """Whether ``address`` is ``prefix`` or below it (``prefix/...``)."""
    if not prefix:
        return True
    if address is None:
        return False
    top = prefix.rstrip("/")
    return address == top or address.startswith(top + "/")
