"""Emitted streams with durable consumer cursors, and published exports.

``ctx.emit`` appends to the instance's stream in the same transaction that
logs the effect, and is durable before any consumer sees it, so replay never
emits twice. A consumer reads from its own cursor, kept in the journal:

- a value counts as consumed once the consumer asks for the next one, or
  leaves the ``async with`` block without an exception (``break`` included);
- leaving with an exception leaves the value it was handling unconsumed;
- reconnecting (in this run or after a restart) continues right after the
  last consumed value.

Cursor moves ride on the next commit while the consumer iterates, and are
made durable when it leaves the block: a crash mid-iteration can repeat
values consumed since the last durable cursor (at-least-once), never skip one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

from storage import TERMINAL_STATUSES, Txn, decode, encode, instance_id
from storage.errors import JournalCorrupt

from .._kernel import _effects as fx
from .._kernel._checks import check_name
from .._kernel._handles import status_changed
from .._kernel._interfaces import ActorAPI, SystemAPI
from .._kernel._log import LogEntry
from .._kernel._values import StreamFrom
from ..errors import InvalidArguments, NotDelivered

_BATCH = 256


class EmitBehaviour(fx.Behaviour):
    @staticmethod
    def start(actor: ActorAPI, effect: fx.Emit, started: LogEntry | None) -> None:
        actor.start_task(_write, effect, _stage_emit)

    # abandon: nothing; an emit that lost a race still completes its write


class PublishBehaviour(fx.Behaviour):
    @staticmethod
    def start(actor: ActorAPI, effect: fx.Publish, started: LogEntry | None) -> None:
        actor.start_task(_write, effect, _stage_publish)

    # abandon: nothing; a publish that lost a race still completes its write


def _stage_emit(actor: ActorAPI, effect: fx.Emit, txn: Txn) -> Callable[[], None] | None:
    txn.append_stream(actor.iid, effect.payload)
    return None


def _stage_publish(actor: ActorAPI, effect: fx.Publish, txn: Txn) -> Callable[[], None]:
    # Watchers get the stored exports, never the process's own object.
    exports = decode(encode(effect.payload, what="exports"))
    version = actor.writes.publish(txn, exports)
    return lambda: actor.writes.published_durably(version, exports)


async def _write(
    actor: ActorAPI, effect: Any, stage: Callable[..., Callable[[], None] | None]
) -> None:
    """Write an emit or a publish: ``stage`` puts its own part in the
    transaction (and says what to do once it is durable), with its log entry."""
    try:
        entry = effect.describe(value=None)
        txn = Txn()
        durable = stage(actor, effect, txn)
        txn.put_log(actor.iid, actor.run, effect.seq, entry.to_stored())
        await actor.writes.barrier(txn)
        if durable is not None:
            durable()
        actor.finish(effect, None, None, None)
        actor.system.statuses.changed(actor.iid)  # wakes consumers and watchers
    finally:
        actor.task_finished()


class Stream:
    """A consumer's view of an instance's stream; use with ``async with``
    and ``async for``. Made by `ActorSystem.stream`."""

    def __init__(self, system: SystemAPI, address: str, consumer: str, from_: StreamFrom) -> None:
        if from_ not in ("start", "latest"):
            raise InvalidArguments(f"from_ must be 'start' or 'latest', not {from_!r}")
        # Invariant: a consumer's name holds no control character (check_name),
        # so it never takes a send key's cursor (`_message_txns.KEY_PREFIX` + key).
        check_name(consumer, "the stream's consumer")
        if len(consumer.encode()) > 200:
            raise InvalidArguments(
                f"consumer must be a name of at most 200 bytes, not {consumer!r}; "
                "use a shorter name"
            )
        check_name(address, "the stream's address")
        self._system = system
        self.address = address
        self.consumer = consumer
        self._from = from_
        self._iid = instance_id(address)
        self._buffer: deque[tuple[int, Any]] = deque()
        self._next = 0  # index of the next value to read from the journal
        self._current: int | None = None  # index of the value being handled
        self._consumed = 0  # every value before this index is consumed
        self._unyielded = 0  # values handed out since this task last yielded here

    async def __aenter__(self) -> Stream:
        iid, consumer = self._iid, self.consumer

        def read(r: Any) -> tuple[Any, int | None, int]:
            return r.instance(iid), r.cursors(iid).get(consumer), r.stream_length(iid)

        try:
            row, cursor, length = await self._system.journal.read(read)
        except JournalCorrupt as exc:
            await self._system.corruption.records_damaged(iid, self.address, exc)
            raise
        if row is None:
            raise NotDelivered(
                f"no instance at {self.address!r} to stream from; check the address",
                address=self.address,
                reason="unknown",
            )
        cached = self._system.cursors.get((iid, consumer))
        if cursor is None and cached is None:
            cursor = 0 if self._from == "start" else length
        self._consumed = self._next = max(cursor or 0, cached or 0)
        return self

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self._current is not None:
            self._move(self._current + 1)
            self._current = None
        system = self._system
        while True:
            if self._buffer:
                index, value = self._buffer.popleft()
                self._current = index
                self._unyielded += 1
                return value
            if self._unyielded >= _BATCH:
                # A consumer draining a long backlog from a journal that reads
                # without yielding blocks the other tasks for one batch at most.
                self._unyielded = 0
                await trio.lowlevel.checkpoint()
            event = system.statuses.event(self._iid)
            start, iid = self._next, self._iid
            remote = not system.journal.reads_at_once
            try:
                # (On a remote journal its status comes in the same read:
                # the trio thread reads nothing itself.)
                rows, length, row = await system.journal.read(
                    lambda r: (
                        r.stream(iid, start, _BATCH),
                        r.stream_length(iid),
                        r.instance(iid) if remote else None,
                    )
                )
            except JournalCorrupt as exc:
                await system.corruption.records_damaged(iid, self.address, exc)
                raise
            if rows:
                self._buffer.extend(rows)
                self._next = rows[-1][0] + 1
                continue
            if self._next >= length:
                if remote:
                    status = "unknown" if row is None else row.status
                else:
                    status = system.statuses.snapshot(iid)[0]  # a local read, or memory
                if status in TERMINAL_STATUSES or status == "unknown":
                    raise StopAsyncIteration
            # On a shared journal another node may run the instance: its
            # emits wake nobody here, so this reads again now and then.
            await status_changed(system, event)
            self._unyielded = 0

    def _move(self, position: int) -> None:
        if position <= self._consumed:
            return
        self._consumed = position
        self._system.cursors[(self._iid, self.consumer)] = position
        txn = Txn()
        txn.set_cursor(self._iid, self.consumer, position)
        self._system.journal.submit(txn)

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self._current is not None:
            self._move(self._current + 1)
        self._current = None
        txn = Txn()
        txn.set_cursor(self._iid, self.consumer, self._consumed)
        with trio.CancelScope(shield=True):
            await self._system.journal.commit(txn, durable=True)
