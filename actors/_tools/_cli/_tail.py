"""``actors tail``: print a stream from a consumer's cursor, and move the
cursor when no system holds the journal (at-least-once, as
`ActorSystem.stream`); ``actors consumers``: the cursors, and forgetting one.

On a PostgreSQL journal the cursor is moved (or deleted) as a node's
stream moves it: a write of the cursor alone, with no claim of the
instance (its owner never writes consumers' cursors, only the readers do),
so beside the nodes that run it."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from storage import TERMINAL_STATUSES, Journal, Reader, Txn, instance_id
from storage.errors import JournalLocked

from .._admin import user_cursors
from ._access import PostgresAt, find_instance, journal_at, reading, writing_at
from ._errors import INTERRUPTED, NOT_FOUND, OK, CLIError, held_error
from ._render import compact, emit, jsonable, plural, table

__all__ = ["consumers", "tail"]

_BATCH = 256  # stream values read per transaction


@attrs.define
class _Tail:
    """Where a tail is: the next index to print and what the last read saw."""

    args: argparse.Namespace
    path: Path | PostgresAt
    iid: bytes
    position: int | None = None  # next index to print; None until first read
    cursor_before: int | None = None
    status: str | None = None
    length: int = 0
    printed: list[dict[str, Any]] = attrs.field(factory=list)

    def start(self, cursor: int | None) -> int:
        if cursor is not None:
            return cursor
        return 0 if self.args.from_ == "start" else self.length

    def read(self, r: Reader, *, from_cursor: bool) -> list[tuple[int, Any]]:
        row = r.instance(self.iid)
        if row is None:
            if self.position is None:
                raise CLIError(
                    f"no instance at {self.args.address!r} in {self.path}; check the address",
                    NOT_FOUND,
                )
            self.status = None  # cleaned up meanwhile
            return []
        self.status, self.length = row.status, r.stream_length(self.iid)
        cursor = r.cursors(self.iid).get(self.args.consumer)
        if self.position is None:
            self.cursor_before = cursor
        if from_cursor or self.position is None:
            self.position = self.start(cursor)
        return r.stream(self.iid, self.position, _BATCH)

    def show(self, values: list[tuple[int, Any]]) -> None:
        for index, value in values:
            if self.args.json and self.args.follow:
                print(json.dumps({"index": index, "value": jsonable(value)}, ensure_ascii=False))
            elif self.args.json:
                self.printed.append({"index": index, "value": value})
            else:
                print(f"{index:>6}  {compact(value, 1 << 20)}")
        sys.stdout.flush()
        if values:
            self.position = values[-1][0] + 1


async def tail(args: argparse.Namespace) -> int:
    """``actors tail``: print a stream from a consumer's cursor (``--follow`` to keep on)."""
    if not args.follow:
        return await _tail_loop(args, trio.Event())
    # Ctrl-C ends a follow between polls, never between printing values and
    # recording that they were consumed.
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for _ in signals:
                    stop.set()

            nursery.start_soon(watch)
            code = await _tail_loop(args, stop)
            nursery.cancel_scope.cancel()
    return INTERRUPTED if stop.is_set() else code


async def _tail_loop(args: argparse.Namespace, stop: trio.Event) -> int:
    path = journal_at(args)
    if isinstance(path, PostgresAt) and not args.peek:
        # One brief node for the whole tail, not one per value read.
        async with writing_at(path) as journal:
            return await _tail_through(args, stop, path, journal)
    return await _tail_through(args, stop, path, None)


@asynccontextmanager
async def _writer(path: Path | PostgresAt, held: Journal | None) -> AsyncIterator[Journal]:
    """``held`` (a PostgreSQL journal opened for the whole tail), else the
    LMDB journal opened for this one write (`writing_at`)."""
    if held is not None:
        yield held
        return
    async with writing_at(path) as journal:
        yield journal


async def _tail_through(
    args: argparse.Namespace, stop: trio.Event, path: Path | PostgresAt, held: Journal | None
) -> int:
    tail = _Tail(args, path, instance_id(args.address))
    advancing = not args.peek
    first = True
    while not stop.is_set():
        if advancing and (first or await _tail_has_new(tail, held)):
            try:
                async with _writer(path, held) as journal:
                    with journal.reader() as r:
                        values = tail.read(r, from_cursor=True)
                    tail.show(values)
                    # A value printed counts as consumed; a new consumer is recorded.
                    if tail.position is not None and (
                        values or (first and tail.cursor_before is None)
                    ):
                        txn = Txn()
                        txn.set_cursor(tail.iid, args.consumer, tail.position)
                        await journal.commit(txn, durable=True)
            except JournalLocked as exc:
                advancing = False
                pid = f" (pid {exc.pid})" if exc.pid else ""
                print(
                    f"actors: the journal is owned by a running system{pid}: printing from the "
                    f"cursor of consumer {args.consumer!r} without moving it (read through "
                    "the application, system.stream(...), to consume)",
                    file=sys.stderr,
                )
                continue
        elif not advancing:
            async with reading(path) as journal:
                with journal.reader() as r:
                    values = tail.read(r, from_cursor=False)
            tail.show(values)
        first = False
        assert tail.position is not None
        if tail.position < tail.length and tail.status is not None:
            continue  # more than one batch waiting
        if not args.follow or tail.status is None or tail.status in TERMINAL_STATUSES:
            break
        with trio.move_on_after(args.interval):
            await stop.wait()
    if args.json and not args.follow:
        doc = {
            "address": args.address,
            "consumer": args.consumer,
            "read_only": not advancing,
            "cursor_before": tail.cursor_before,
            "cursor_after": tail.position,
            "length": tail.length,
            "status": tail.status,
            "values": tail.printed,
        }
        print(json.dumps(jsonable(doc), indent=2, ensure_ascii=False))
    elif not args.json and not args.follow:
        moved = "moved to" if advancing else "left at"
        before = tail.cursor_before if tail.cursor_before is not None else "(new)"
        after = tail.position if advancing else before
        print(
            f"actors: consumer {args.consumer!r}: cursor {before}, {moved} {after} of "
            f"{tail.length} values",
            file=sys.stderr,
        )
    if tail.status is None and tail.position is not None:
        print(f"actors: {args.address!r} was removed from the journal", file=sys.stderr)
    return OK


async def _tail_has_new(tail: _Tail, held: Journal | None) -> bool:
    """Peek without the owner lock (or through ``held``, the PostgreSQL
    journal the tail writes to): are there values past the position?"""
    async with reading(tail.path) if held is None else _writer(tail.path, held) as journal:
        with journal.reader() as r:
            row = r.instance(tail.iid)
            tail.status = row.status if row is not None else None
            tail.length = r.stream_length(tail.iid)
    return tail.position is not None and tail.length > tail.position


async def consumers(args: argparse.Namespace) -> int:
    """``actors consumers``: the cursors on an instance's stream (``--delete`` one)."""
    path = journal_at(args)
    iid = instance_id(args.address)
    async with reading(path) as journal:
        with journal.reader() as r:
            row = find_instance(r, args.address, path)
            length, cursors = r.stream_length(iid), r.cursors(iid)
    cursors = user_cursors(cursors)
    if args.delete is not None:
        return await _delete_consumer(args, path, iid, cursors)
    doc: dict[str, Any] = {
        "address": row.address,
        "status": row.status,
        "length": length,
        "consumers": {
            name: {"cursor": pos, "unread": max(0, length - pos)}
            for name, pos in sorted(cursors.items())
        },
    }

    def render() -> str:
        lines = [
            f"{row.address}: a stream of {plural(length, 'value')}, "
            f"{plural(len(cursors), 'consumer')}"
        ]
        cells = [[name, str(c["cursor"]), str(c["unread"])] for name, c in doc["consumers"].items()]
        if cells:
            lines += table(["CONSUMER", "CURSOR", "UNREAD"], cells, indent="  ")
        return "\n".join(lines)

    emit(args, doc, render)
    return OK


async def _delete_consumer(
    args: argparse.Namespace, path: Path | PostgresAt, iid: bytes, cursors: dict[str, int]
) -> int:
    name = args.delete
    if name not in cursors:
        known = ", ".join(sorted(cursors)) or "none"
        raise CLIError(
            f"no consumer {name!r} on {args.address!r} (its consumers: {known})", NOT_FOUND
        )
    try:
        # (On PostgreSQL, a node whose stream has this consumer open keeps
        # its cursor in memory and writes it back as it reads on.)
        async with writing_at(path) as journal:
            txn = Txn()
            txn.delete_cursor(iid, name)
            await journal.commit(txn, durable=True)
    except JournalLocked as exc:
        # A running system keeps the cursors of open streams in memory, and
        # would write this one back.
        assert isinstance(path, Path)  # (a running system holds an LMDB journal only)
        raise held_error(
            path, exc.pid, f"delete consumer {name!r}", "close its stream", served=True
        ) from None
    doc = {"deleted": name, "address": args.address, "cursor": cursors[name]}
    emit(
        args,
        doc,
        lambda: (
            f"deleted consumer {name!r} of {args.address} (its cursor was "
            f"{cursors[name]}); that name starts afresh next time"
        ),
    )
    return OK
