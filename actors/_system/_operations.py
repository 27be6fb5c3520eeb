"""The calls an operator makes: `Operations`, the part of `ActorSystem`'s
public methods that finds, reads, repairs and stops instances (get, lookup,
query, cleanup, cancel, retry, fork, a mailbox's messages, stuck
compensations), and routes a signal by identity (``actors signal`` asks a
running system for it through the control socket).

`Operations` holds no state: it is a base of `ActorSystem` that keeps these
calls and their contracts out of `_system`, so that the facade there holds
what an application calls. Each method is typed on `OperatedSystem`, what
it uses of the system; the work is done by the modules named in each
(`_retry`, `_fork`, `_mail`, `_drop`) and by the system's `Upkeep` part
(`_upkeep`). The command line and the web inspector make the same calls
through `actors._tools._admin`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Protocol

from storage import TERMINAL_STATUSES
from storage.errors import JournalCorrupt

from .._features._signals import SignalRouter
from .._kernel import _guard
from .._kernel._handles import Handle
from .._kernel._interfaces import SystemAPI
from .._kernel._process import ProcessDef
from .._kernel._values import InstanceInfo, Signal
from . import _drop, _fork, _mail, _retry
from ._status_watch import Statuses
from ._upkeep import Upkeep

__all__ = ["OperatedSystem", "Operations"]


class OperatedSystem(SystemAPI, Protocol):
    """What `Operations` uses of the system: the runtime's view of it, its
    `Upkeep` part, its statuses and its signal router."""

    @property
    def upkeep(self) -> Upkeep: ...

    @property
    def statuses(self) -> Statuses: ...

    @property
    def signals(self) -> SignalRouter: ...


class Operations:
    """The operator's calls of `ActorSystem` (see the module docstring)."""

    __slots__ = ()

    async def cancel(self: OperatedSystem, address: str, *, compensate: bool = False) -> bool:
        """Cancel the instance at ``address`` (and its live children, first).

        A cancel wins over a restart: an instance that crashes as the cancel
        comes, or is waiting out its restart delay, ends cancelled and does
        not run again.

        Saga compensations run on a cancel only when asked: by default a
        cancelled instance's registered compensations never run (they run
        when it fails). With ``compensate=True`` (or for a process defined
        with ``compensate_on_cancel=True``) it runs its pending
        compensations first, newest first, as after a failure: the cancel is
        recorded before the first one starts, so a restart of the system
        meanwhile finishes them (each that returned is not run again), and
        it ends cancelled after the last. Its children are cancelled as usual.

        Args:
            address: the instance's address.
            compensate: run its pending compensations before it ends.

        Returns True once it is recorded as cancelled (after its
        compensations, if it ran them; also when another cancel of it was
        under way); False if there was nothing live to cancel (it had ended,
        or ended otherwise meanwhile, e.g. failed past its restart limit),
        or a compensation gave up and parked it ``compensation_stuck``. A
        cancelled address can be started afresh.

        Raises:
            JournalCorrupt: the instance's records do not decode; the error
                names the database and key of the one that fails.
            UnknownProcess: ``compensate=True``, and its process is not
                registered by this system, which cannot run them (nothing is
                written).
        """
        _guard.refuse(
            "system.cancel()", "cancel from a step (ctx.step), or let the child end with its parent"
        )
        iid = self.router.address_iid(address, "cancel's address")
        if self.statuses.snapshot(iid)[0] == "corrupt":
            raise self.corruption.error(iid, address)
        return await self.lifecycle.cancel_iid(
            iid, address, "cancelled by system.cancel", compensate=compensate
        )

    async def retry(
        self: OperatedSystem, address: str, *, input: dict[str, Any] | None = None
    ) -> Handle[Any]:
        """Run a failed (or cancelled) instance again: a new incarnation at
        ``address`` with the params and input it had (or ``input``), running.

        An instance stuck because a step's crash budget is spent
        (`Retry.crashes`; `Handle.stuck` says so) is resumed instead, as
        the same incarnation: the crashes are forgiven and the step runs
        again under its idempotency key (see `actors._features._crashes`).

        A compare-and-set, like every start: of two retries of one
        incarnation (here or on another node) one commits, and the other
        returns its handle. On this system a retry called while another of
        the same address is under way (from that one's call to its return)
        waits for it and returns its handle, whatever the journal's speed;
        if that one raised, it tries on its own. One called after that one
        returned finds the new incarnation live or ended and is refused, as
        a retry of any live or completed instance is. Retries at once of an
        instance stuck on a crash budget resume it once. The replaced
        incarnation's record is kept for
        ``actors show ADDRESS --incarnation N`` until cleanup; failed
        children it named start afresh when the new run calls them (see
        `actors._system._retry`).

        Returns:
            The handle of the new incarnation, once it is durably recorded.

        Raises:
            InvalidArguments: it is live (and not stuck on a crash budget),
                queued, compensation_stuck or completed, or a child (retry
                its parent); or ``input`` does not fit the process (or is
                given for an instance stuck on a crash budget).
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
            UnknownProcess: its process is not registered with this system.
            JournalCorrupt: its records do not decode.
        """
        return await _retry.retry(self, address, input)

    async def fork(
        self: OperatedSystem,
        address: str,
        *,
        from_effect: int | None = None,
        after_step: str | None = None,
        to: str | None = None,
        input: dict[str, Any] | None = None,
    ) -> Handle[Any]:
        """Run an ended instance again from a point in its log: a new
        incarnation (at ``address``, or at ``to``) whose run keeps the first
        ``from_effect`` positions of the source's last run, replayed and
        never run again (a payment step before the fork point is not
        charged twice), and runs the rest on the current code.

        ``after_step="charge_card"`` forks just after the first step of that
        name with an outcome (it is kept). A compare-and-set, like every
        start: of two forks or starts of one address, one commits.

        What becomes of the rest (see `actors._system._fork` for all of it):
        children that the discarded part made were cancelled when the source
        ended, and the fork removes them (their records kept in their
        address's history), so the new run starts them afresh if it calls
        them again; children of the kept part stay as they are. Compensations
        the kept steps registered are kept (not run); a kept step whose
        compensation already ran refuses the fork. Timers the discarded part
        armed are gone with the source's run. Stream values the discarded
        part emitted are dropped; earlier ones are kept. Messages the
        discarded part took are put back in the mailbox, ahead of the
        source's unread ones, except those dropped to the dead letters.
        The replaced record (the source, or an ended instance at ``to``) is
        kept for ``actors show ADDRESS --incarnation N`` until cleanup.

        Returns:
            The handle of the new incarnation, once it is durably recorded.

        Raises:
            InvalidArguments: the source is live, queued or
                compensation_stuck, or a child (fork its parent); the fork
                point is past the end of its log, or has no step of that
                name; the kept part does not replay on the current code;
                ``to`` is live or completed, or another process's address;
                ``input`` does not fit the process.
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
            UnknownProcess: its process is not registered with this system.
            JournalCorrupt: its records do not decode.
        """
        return await _fork.fork(
            self,
            address,
            from_effect=from_effect,
            after_step_name=after_step,
            to=to,
            input=input,
        )

    async def mail(self: OperatedSystem, address: str) -> list[_mail.Message]:
        """The unread messages of the instance at ``address``, oldest first,
        as stored (each with ``.id``, ``.signal``, ``.payload``, ``.sent``).

        Raises:
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
        """
        return await _mail.mail(self, address)

    async def poison(self: OperatedSystem, address: str) -> _mail.Message | None:
        """The message a failed instance was handling when it failed (the
        latest its last run took: for one that crashed past its restart
        limit, the message of the last crash), read from its run's log,
        which stays with it until cleanup; None if it is not failed, took
        none, or failed at a later effect that a crash cut short (an
        ``at_most_once`` step: the crash failed it, not the message).
        ``actors show`` names it; `drop_message` takes its id.

        Raises:
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
        """
        return await _mail.poison(self, address)

    async def dropped(self: OperatedSystem, address: str) -> list[_mail.DeadLetter]:
        """The messages dropped from the instances at ``address``
        (`drop_message`), oldest first; kept until the cleanup that removes
        the instance.

        Raises:
            NotDelivered: no instance at ``address`` (none was, or a cleanup
                removed it), as `mail` raises."""
        return await _mail.dropped(self, address)

    async def drop_message(
        self: OperatedSystem, address: str, message_id: int, *, incarnation: int | None = None
    ) -> _mail.Message:
        """Move an unread message (or the message a failed instance was
        handling when it failed) to the address's dead letters, in one
        transaction: the instance never takes it (on any node: see
        `actors._system._drop`), and a fork or retry does not put it back. Kept for
        `dropped` and ``actors mail --dropped`` until cleanup.

        Args:
            message_id: the message's id (`Message.id`).
            incarnation: the incarnation it was listed in
                (`Message.incarnation`): then refused if the address holds
                another one now, since a retry or fork numbers the mail it
                carries anew (without it, the current incarnation's #id).

        Returns:
            The message dropped.

        Raises:
            InvalidArguments: there is no such unread message (or it was
                dropped already, or taken meanwhile); or the address holds
                another incarnation than the one given or first read; or,
                on a journal shared by several nodes, another live node
                runs the instance (drop it on that node).
            NotDelivered: no instance at ``address`` (reason ``"unknown"``).
        """
        return await _drop.drop_message(self, address, message_id, incarnation)

    def get(self: OperatedSystem, address: str) -> Handle[Any] | None:
        """The handle of the instance at ``address``, live, passivated or
        finished; None if there is none.

        On a remote journal (PostgreSQL) an instance this system holds
        nothing of in memory is read on the trio thread, one round trip that
        every task waits for: there, prefer ``await system.lookup(address)``."""
        iid = self.router.address_iid(address, "get's address")
        incarnation = self.statuses.held(iid)
        if incarnation is None:
            try:
                with self.journal.reader() as r:
                    incarnation = self.statuses.found(iid, r.instance(iid))
            except JournalCorrupt:
                incarnation = 0  # its handle reads "corrupt"
        return None if incarnation is None else Handle._create(self, iid, address, incarnation)

    async def lookup(self: OperatedSystem, address: str) -> Handle[Any] | None:
        """`get`, reading the journal off the trio thread: the way to find an
        instance on a remote journal without stalling the other tasks."""
        iid = self.router.address_iid(address, "lookup's address")
        incarnation = self.statuses.held(iid)
        if incarnation is None:
            try:
                row = await self.journal.read(lambda r: r.instance(iid))
            except JournalCorrupt:
                incarnation = 0
            else:
                incarnation = self.statuses.found(iid, row)
        return None if incarnation is None else Handle._create(self, iid, address, incarnation)

    def query(
        self: OperatedSystem,
        status: str | None = None,
        process: ProcessDef[..., Any] | str | None = None,
    ) -> AsyncIterator[InstanceInfo]:
        """Iterate instances (live and on disk) with that status and process.

        Args:
            status: one of the statuses, or None for any.
            process: a definition or its template, or None for any.
        """
        return self.upkeep.query(status, process)

    async def resume_compensation(self: OperatedSystem, address: str) -> bool:
        """Retry the compensation of a ``compensation_stuck`` instance from
        where it stopped. Returns False if it is not stuck."""
        return await self.upkeep.resume_compensation(address)

    async def abandon_compensation(self: OperatedSystem, address: str) -> bool:
        """End a ``compensation_stuck`` instance as failed, keeping its record
        (which compensations ran, which did not, and why). Returns False if
        it is not stuck."""
        return await self.upkeep.abandon_compensation(address)

    async def cleanup(
        self: OperatedSystem,
        older_than: float,
        statuses: Iterable[str] = tuple(sorted(TERMINAL_STATUSES)),
    ) -> int:
        """Remove finished instances last updated more than ``older_than``
        seconds ago, with every record they own (log, mailbox, stream,
        cursors, timers, index entries). Returns how many were removed.

        A child is removed only together with its parent (in the same
        cleanup, which then removes both), or once no instance is at its
        parent's address: as long as its parent is there, in any status, a
        ``ctx.join`` of it, or a retry or fork of the parent that meets it
        again, may need its outcome (a completed child gives its recorded
        result instead of running again). So a completed child of a live or
        failed parent stays until its parent goes.

        A `Handle` of an instance a cleanup removed gives the outcome it
        had already seen; otherwise its `Handle.result` raises
        `InstanceRemoved`: read results before cleaning them up.

        Raises:
            InvalidArguments: a status that is not finished (running,
                suspended and parked instances are never cleaned up).
        """
        return await self.upkeep.cleanup(older_than, statuses)

    async def signal(
        self: OperatedSystem,
        signal: Signal,
        identity: Mapping[str, str],
        payload: Any = None,
        *,
        key: str | None = None,
    ) -> int:
        """Put ``signal`` with ``payload`` in the mailbox of every instance
        that listens to it and has the identity given, in one durable commit.

        The recipients are the instances that exist and have not ended
        (running, suspended or queued) of every process declared with
        ``listens=[signal]`` whose path params named by the signal's
        identity fields equal ``identity``'s values: with
        ``Signal("orders.shipped", identity=("order_id",))``, ``{"order_id":
        "o-17"}`` reaches ``orders/o-17`` and every ``parcels/o-17/:parcel``
        if both listen. They are found through the journal's identity
        index, never by a scan. Each reads it with ``ctx.wait`` or
        ``ctx.receive`` as any other message; one that arrives before the
        instance waits stays in its mailbox. An instance whose start
        commits concurrently either gets it or was started after it.

        Args:
            identity: a mapping with exactly the signal's identity fields.
            key: as for `send`, per recipient: an incarnation that has had
                the key gets nothing more.

        Returns:
            How many instances it reached (0 when none: nothing is stored).

        Raises:
            InvalidArguments: a signal without identity fields, an identity
                with a field missing or unknown, or a value that is no path
                param; a key that is not a name. Nothing is stored.
            EncodeError, LimitExceeded: a payload the codec cannot store, or
                over ``max_payload``; a key over 200 bytes. Nothing is stored.
        """
        return await self.signals.signal(signal, identity, payload, key=key)
