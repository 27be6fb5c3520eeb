"""Request/reply: `ActorSystem.ask`, ``ctx.ask`` and ``ctx.reply``.

The ask is a mailbox message like any other, with one more element: the
ask ``[ask id, reply-to address, asker's node]`` (see `_transactions`). Taking
it with ``receive``/``wait`` records the ask in the wait's log entry, so
the process knows what it took after a restart as well as before.

The reply is an effect in the replier's log. Its log entry and the reply's
delivery are written in one transaction, so a restart between the take and
the reply replays the take and runs the reply once, and a restart after the
reply replays it without sending it again. Where the reply goes depends on
who asked:

- ``ctx.ask`` (an instance asked): the reply is a system message
  (``\\x00reply <ask id>``) to the asker's mailbox, which its ``Ask`` effect
  waits for like any wait; another node's asker is woken by the journal's
  mail notice, as for any message.
- `ActorSystem.ask` (a caller outside any instance): the asker's system
  keeps a waiter per ask. On its own node (and always on a single-owner
  journal) the reply is handed to that waiter once it is durable in the
  replier's log; nothing else is written. For an asker on another node, the
  reply is a message under the ask's own id (``\\x00ask <ask id>``, no
  instance record) and the commit wakes that node (`storage.Txn.wake`),
  whose waiter reads it and deletes it.

An instance that ends without replying answers each ask it took and did not
reply to, and each still unread, with "ended without replying" in the
transaction that records its end (so does a cancel written on disk, by a
system, `at_disk_end`, or by the CLI, `_ask_forms.answer_offline`); a run
that continues as new or is restarted answers the asks it took. The asker
raises `NotDelivered`. A system asker also reads the instance's status
every `CHECK_EVERY` seconds while it waits, so an end it was not told of (a
notice lost with a connection) still ends its wait.

The ask's effects, its asker's stored form (the message's *extra*, which
the kernel carries unread) and what needs no service are in `_ask_forms`;
the kernel names no ask. What needs the service is handed it as the
system is wired (`_system._wiring`): `ReplyBehaviour` is an instance made
with it, and the run-end hooks are bound to it.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import trio

from storage import UNFINISHED_STATUSES, Txn, instance_id
from storage.errors import Conflict, JournalClosed

from .._kernel import _effects as fx, _guard, _message_txns
from .._kernel._checks import check_seconds
from .._kernel._failures import ErrorRecord
from .._kernel._hooks import After
from .._kernel._interfaces import ActorAPI, SystemAPI
from .._kernel._log import LogEntry
from .._kernel._mailbox import StoredMessage
from .._kernel._values import Signal
from ..errors import AskTimeout, InvalidArguments
from ._ask_forms import (
    BOX_PREFIX,
    REPLY_PREFIX,
    Ask,
    Asker,
    Reply,
    ended,
    reply_outcome,
    unanswered_on_disk,
)
from ._sending import not_delivered, refused_status

__all__ = [
    "CHECK_EVERY",
    "AskBehaviour",
    "Asks",
    "ReplyBehaviour",
    "at_disk_end",
    "at_run_end",
    "no_reply",
]

CHECK_EVERY = 1.0  # seconds between a system asker's reads of the instance's status
_Done = Callable[[], object] | None  # what `Asks.hand` calls once it has handed a reply


class _Pending:
    """One system ask being waited for. (No ``__init__``, a call less an
    ask: `Asks.ask` sets ``event`` and ``since``, the rest start as here.)"""

    event: trio.Event  # set at the reply, or by _watch: time to look
    since: float  # trio time, when the ask began
    payload: dict[str, Any] | None = None  # {"v": value} or {"ended": status}
    handed = False  # the payload came by `Asks.hand`: nothing under the box


class Asks:
    """The system's asks in flight (`ActorSystem.ask`), by ask id."""

    def __init__(self, system: SystemAPI) -> None:
        self.system = system
        self._pending: dict[str, _Pending] = {}  # by ask id
        # The reply boxes' instance ids, on a shared journal only (another
        # node's reply is noticed by its box): box -> ask id. On one node a
        # reply is handed by ask id, and the box's id is never computed.
        self._boxes: dict[bytes, str] = {}
        # Ask ids: a random prefix of this system's, then a count (unique
        # across nodes and reopens, without a random draw per ask).
        self._prefix = uuid.uuid4().hex[:20]
        self._count = itertools.count(1)
        self._watching = False  # the watch task runs (see _watch)

    async def ask(
        self, address: str, signal: Signal, payload: Any = None, *, timeout: float | None = None
    ) -> Any:
        """The body of `ActorSystem.ask`: check the arguments, send (durably)
        and wait for the reply."""
        if _guard.stepping.address is not None:
            _guard.refuse("system.ask()", "ask from the process with ctx.ask, which is recorded")
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"ask takes an actors.Signal, not {signal!r}")
        system = self.system
        router = system.router
        iid = router.address_iid(address, "ask's address")
        if timeout is not None:
            timeout = check_seconds(timeout, "ask(timeout=...)")
        ask_id = f"{self._prefix}.{next(self._count)}"
        box_address = BOX_PREFIX + ask_id
        pending = self._pending[ask_id] = _Pending()
        pending.event = trio.Event()
        pending.since = trio.current_time()
        shared = system.journal.shared
        box = b""  # (read by nothing on a journal with one owner)
        if shared:
            box = instance_id(box_address)
            self._boxes[box] = ask_id
        if not self._watching and not system.registry.closing:
            self._watching = True
            system.registry.spawn_system_task(self._watch)
        try:
            extra = Asker.stored(ask_id, box_address, system.journal.node)  # the message's extra
            await router.send_iid(iid, address, signal, payload, extra=extra)
            if timeout is None:
                await pending.event.wait()  # (`_wait`'s first wait: most asks need no other)
                reply = pending.payload
                reply = reply if reply is not None else await self._wait(pending, box, iid)
                return reply["v"] if "v" in reply else _result(reply, address)
            with trio.move_on_after(timeout):
                return _result(await self._wait(pending, box, iid), address)
            raise AskTimeout(
                f"no reply from {address!r} to {signal.name!r} within {timeout} s; the "
                "message stays in its mailbox (it may still be taken); ask again with the "
                "same request, or raise timeout=",
                address=address,
                timeout=timeout or 0.0,
            )
        finally:
            del self._pending[ask_id]
            if shared:
                del self._boxes[box]
                if not pending.handed:
                    # A reply from another node may sit under the box (or come later).
                    txn = Txn()
                    txn.delete_instance(box)
                    self.system.journal.submit(txn)  # best effort; nothing waits on it

    async def _wait(self, pending: _Pending, box: bytes, iid: bytes) -> dict[str, Any]:
        shared = self.system.journal.shared

        def read(r: Any) -> tuple[Any, Any]:
            return (r.mailbox(box) if shared else ()), r.instance(iid)

        while True:
            await pending.event.wait()  # a reply, or _watch: time to look
            if pending.payload is not None:
                return pending.payload
            pending.event = trio.Event()
            mail, row = await self.system.journal.read(read)
            if pending.payload is not None:
                return pending.payload
            for _, message in mail:
                reply = StoredMessage.from_stored(message).payload
                if isinstance(reply, dict):
                    return reply
            if row is None:
                return {"ended": "unknown"}
            if row.status not in UNFINISHED_STATUSES:
                return {"ended": row.status}

    async def _watch(self) -> None:
        """While asks wait: every `CHECK_EVERY` seconds, wake those waiting
        that long, to read what the journal says (one task for all of them,
        rather than a deadline per ask). At the system's close, end every
        wait with `JournalClosed`."""
        closed = True
        try:
            while self._pending:
                await trio.sleep(CHECK_EVERY)
                now = trio.current_time()
                for pending in list(self._pending.values()):
                    if now - pending.since >= CHECK_EVERY:
                        pending.event.set()
            closed = False
        finally:
            self._watching = False
            if closed:
                for pending in self._pending.values():
                    if pending.payload is None:
                        pending.payload = {"closed": True}
                        pending.event.set()

    def hand(
        self, ask_id: str, payload: dict[str, Any], _: object = None, *, done: _Done = None
    ) -> None:
        """A reply to system ask ``ask_id`` of this node is durable: give it
        to its waiter, then call ``done`` (the reply is done). (A
        transaction's ``then`` as it is: its results are ignored.)

        ``payload`` is the waiter's own: ``{"v": value}`` with the value a
        copy decoded from what the replier recorded (`MessageEffects.reply`
        makes it), never the replier's object; else ``{"ended": status}``."""
        pending = self._pending.get(ask_id)
        if pending is not None and pending.payload is None:
            pending.payload = payload
            pending.handed = True
            pending.event.set()
        if done is not None:
            done()

    def noticed(self, iid: bytes) -> bool:
        """Another node wrote a reply under ``iid``: True if it is an ask of
        this node (its waiter reads it), False if ``iid`` is not one."""
        ask_id = self._boxes.get(iid)
        pending = None if ask_id is None else self._pending.get(ask_id)
        if pending is None:
            return False
        pending.event.set()
        return True

    def answer(
        self, txn: Txn, ask: list[Any], payload: dict[str, Any], done: _Done = None
    ) -> After:
        """Write the answer ``payload`` to asker ``ask`` (its stored form,
        `_ask_forms.Asker`) into ``txn``; returns what to run once ``txn``
        has committed (handing it to a waiter of this node, or routing the
        message to a live asker), which calls ``done`` last."""
        ask_id, reply_to, node = Asker.fields(ask)
        system = self.system
        if reply_to.startswith(BOX_PREFIX):
            if node is None or node == system.node:
                # The asker is this system's (or gone with an earlier one): the
                # reply is in the replier's log; nothing more to write. (`hand`
                # calls ``done`` itself: no frame between, on a reply's hot path.)
                return partial(self.hand, ask_id, payload, done=done)
            box = instance_id(reply_to)
            _message_txns.add_message(txn, box, REPLY_PREFIX + ask_id, payload, system.epoch_now())
            txn.wake(box, node)
            return _nothing if done is None else partial(_then, _nothing, done)
        notice = _message_txns.add_message(
            txn, instance_id(reply_to), REPLY_PREFIX + ask_id, payload, system.epoch_now()
        )
        after = partial(system.router.route, notice)
        return after if done is None else partial(_then, after, done)


def _result(payload: dict[str, Any], address: str) -> Any:
    if "v" in payload:
        return payload["v"]
    if "closed" in payload:
        raise JournalClosed(
            f"the system closed while an ask of {address!r} waited for its reply; the ask "
            "stays in the mailbox: ask again once the system is open"
        )
    status = payload.get("ended", "ended")
    raise ended(address, status)


# -- the replier's side -------------------------------------------------------------


def _nothing(results: list[int]) -> None:
    pass


def _then(after: After, done: Callable[[], object], results: list[int]) -> None:
    after(results)
    done()


class ReplyBehaviour(fx.Behaviour):
    """How a ``ctx.reply`` runs live: one made per system, with its `Asks`
    (`_system._wiring`). The actor calls its methods as it calls a class's
    static ones, ``behaviour.start(actor, leaf, started)``."""

    def __init__(self, asks: Asks) -> None:
        self.asks = asks

    def start(  # type: ignore[override]  # (an instance's method: see the class)
        self, actor: ActorAPI, reply: Reply, started: LogEntry | None
    ) -> None:
        """Begin a live ``ctx.reply``: a recorded no-op for a message that
        was sent, not asked; else the reply's log entry is committed with
        its answer (`Asks.answer`), then the answer delivered and the reply
        done.

        With no fence, with no task: the commit is submitted, and the
        journal, as it commits, hands the answer to its asker and completes
        the reply (`storage.Txn.then`), which wakes the instance; asker and
        replier then run in one scheduling round. A commit that fails is a
        lost write (`Stalls.write_lost`): the instance is loaded again, and
        its replay takes the ask again and replies again."""
        ask = reply.ask
        if ask is None:
            actor.finish(reply, None, None, reply.describe(value=None))  # rides on the next commit
            return
        txn = Txn()
        txn.put_log(actor.iid, actor.run, reply.seq, reply.describe(value=None).to_stored())
        answered = {"v": reply.payload}
        if actor.fenced:
            # (A fence that fails is a `Conflict`, which no lost write reports:
            # the reply is awaited, in a task, so the instance hears of it.)
            actor.start_task(_reply_task, reply, txn, self.asks.answer(txn, ask, answered))
        else:
            done = partial(actor.finish, reply, None)  # its entry is written
            actor.writes.submit(txn, self.asks.answer(txn, ask, answered, done))


async def _reply_task(actor: ActorAPI, reply: Reply, txn: Txn, after: After) -> None:
    try:
        # The answer goes to its asker as soon as it commits, before this
        # task resumes: asker and replier then run in one scheduling round.
        await actor.writes.barrier(txn, then=after)
        actor.finish(reply, None)  # its entry is written
    finally:
        actor.task_finished()


def no_reply(
    asks: Asks, actor: ActorAPI, txn: Txn, status: str, unread: Iterable[list[Any]]
) -> list[After]:
    """Into ``txn`` (the end of ``actor``'s run): "ended without replying"
    for every ask it took and did not answer, and every ask still ``unread``
    (askers' stored forms, the messages' extras)."""
    owed = {ask[0]: ask for ask in unread}
    owed.update(actor.driver.owed or {})
    actor.driver.owed = None
    return [asks.answer(txn, ask, {"ended": status}) for ask in owed.values()]


def at_run_end(asks: Asks, actor: ActorAPI, txn: Txn, status: str, *, unread: bool) -> list[After]:
    """Every ask the run took and did not answer, and (with ``unread``, the
    instance ends) every ask still unread, hears that it ended without a
    reply. (A run-end hook, bound to ``asks`` by the wiring.)"""
    extras = actor.mailbox.extras
    waiting = extras.values() if unread and extras else ()
    if not waiting and not actor.driver.owed:
        return []
    return no_reply(asks, actor, txn, status, waiting)


def at_disk_end(
    asks: Asks,
    system: SystemAPI,
    txn: Txn,
    status: str,
    log: dict[int, LogEntry],
    mail: Iterable[tuple[int, Any]],
) -> list[After]:
    """`at_run_end` for an instance ended on disk (a disk-end hook, bound
    to ``asks`` by the wiring)."""
    owed = unanswered_on_disk(log, mail)
    return [asks.answer(txn, ask, {"ended": status}) for ask in owed]


# -- the asking instance's side ----------------------------------------------------------


class AskBehaviour(fx.Behaviour):
    @staticmethod
    def start(actor: ActorAPI, ask: Ask, started: LogEntry | None) -> None:
        """Run a live ``ctx.ask``: send it (once: its log entry rides with
        the message), then wait for the reply like a wait."""
        if started is not None:  # sent in an earlier activation of this run
            actor.arrivals.add_wait(ask)
            return
        actor.start_task(_send_ask, ask)

    @staticmethod
    def abandon(actor: ActorAPI, ask: Ask) -> None:
        actor.arrivals.remove_wait(ask)  # a late reply stays unread

    @staticmethod
    def take(actor: ActorAPI, ask: Ask, signal: Signal, seq: int, payload: Any) -> None:
        actor.finish(ask, *reply_outcome(ask, payload, seq))  # (its reply message)


async def _send_ask(actor: ActorAPI, ask: Ask) -> None:
    system = actor.system
    try:
        # What the process did before (a take, a recorded value) is durable
        # first: the ask must never be sent by a run that a crash rewinds.
        await actor.writes.barrier()
        txn, notice = _message_txns.send_txn(
            instance_id(ask.address),
            ask.signal.name,
            ask.payload,
            system.epoch_now(),
            max_payload=system.max_payload,
            extra=Asker.stored(ask.ask_id, actor.address, None),
        )
        txn.put_log(actor.iid, actor.run, ask.seq, ask.describe().to_stored())
        txn.chain = actor.iid  # after its barrier's writes, or not at all (storage.Chain)
        txn.in_doubt = system.router.sent_in_doubt
        if actor.fenced:
            txn.fence(actor.iid, actor.epoch)
        try:
            results = await system.journal.commit(txn)
        except Conflict as exc:
            if exc.reason == "epoch":
                raise
            error = not_delivered(ask.address, refused_status(exc), doing=" to ask")
            actor.finish(
                ask, None, error, ask.describe(error=ErrorRecord.undelivered(error).to_stored())
            )
            return
        system.router.route(notice, results)
        if ask in actor.live:
            actor.arrivals.add_wait(ask)
    finally:
        actor.task_finished()
