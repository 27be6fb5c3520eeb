"""`Handle`: an address and the incarnation it was obtained for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Generic, Literal, TypeVar, cast

import trio

from storage import LIVE_STATUSES, TERMINAL_STATUSES, InstanceRecord, Status, instance_id

from ..errors import InstanceRemoved, ProcessCancelled, ProcessFailed
from . import _guard
from ._failures import error_summary
from ._interfaces import SystemAPI
from ._public import NoPublicConstructor

__all__ = ["Handle"]

# Where waiting on an instance ends: it finished, or its records are corrupt.
_SETTLED = TERMINAL_STATUSES | {"corrupt"}
#: What a handle says of its instance: its status, or ``"unknown"`` (not read yet).
HandleStatus = Status | Literal["unknown"]

R = TypeVar("R", covariant=True)  # the process's result

REMOTE_POLL = 0.25  # seconds between looks at an instance another node may run


async def status_changed(system: SystemAPI, event: trio.Event) -> None:
    """Wait for ``event`` (an instance's status changed here) or, on a shared
    journal, at most `REMOTE_POLL`: another node may run the instance (or
    take it over), and its changes wake nobody here."""
    if system.journal.node is None:
        await event.wait()
        return
    with trio.move_on_after(REMOTE_POLL * system.journal.poll_scale):
        await event.wait()


class Handle(Generic[R], metaclass=NoPublicConstructor):
    """A reference to a process instance, valid across restarts of the system.

    A handle is an address plus the incarnation it was obtained for: after a
    cancel and a fresh start at the same address, an old handle's `result`
    raises `ProcessCancelled`. `status` and `id` are plain reads; `result`
    and `status_changes` wait.

    For type checkers it is ``Handle[R]``, ``R`` the process function's
    result type: ``await handle.result()`` is an ``R``.
    """

    _made_by = "system.start(...) and system.get(address) give one"

    __slots__ = ("_address", "_end", "_iid", "_incarnation", "_system")

    def __init__(
        self, system: SystemAPI, iid: bytes, address: str, incarnation: int | None
    ) -> None:
        self._system = system
        self._iid = iid
        self._address = address
        self._incarnation = incarnation
        # This incarnation's end, once seen: an end is final, and it answers
        # after a cleanup removes the instance (see `_state`).
        self._end: tuple[str, InstanceRecord] | None = None

    @property
    def id(self) -> str:
        """The instance's address, e.g. ``"orders/o-17"``."""
        return self._address

    @property
    def incarnation(self) -> int:
        """The incarnation this handle was obtained for: 1 for an address's
        first start, one more for each start after it was cancelled (0 for
        a child's handle on a remote journal not read yet: see `refresh`)."""
        self._state()
        return self._incarnation or 0

    def _state(self) -> tuple[str, InstanceRecord]:
        status, record = self._system.statuses.snapshot(self._iid)
        if self._incarnation is None and record.incarnation:
            self._incarnation = record.incarnation  # a child's handle: the first it sees
        if record.incarnation == self._incarnation:
            if status in TERMINAL_STATUSES:
                self._end = (status, record)
        elif status in ("unknown", "unread") and self._end is not None:
            # Removed by a cleanup after this handle saw it end (or, on a
            # remote journal, not read since): the end it saw is final.
            return self._end
        return status, record

    @property
    def status(self) -> HandleStatus:
        """``"queued"`` (waiting in a queue), ``"running"``, ``"suspended"``,
        ``"completed"``, ``"failed"``, ``"cancelled"``, ``"compensation_stuck"``
        or ``"corrupt"``; ``"unknown"`` on a remote journal for an instance
        this system has not read yet (`refresh` reads it). ``"cancelled"``
        also when this handle's incarnation is no longer the address's:
        cancelled and replaced, or removed by a cleanup before this handle
        saw its end (`result` tells which; a handle that saw its end keeps
        it)."""
        status, record = self._state()
        if status == "unread":
            return "unknown"
        if status != "corrupt" and record.incarnation != self._incarnation:
            return "cancelled"  # this handle's incarnation was cancelled and replaced
        return cast(Status, status)  # (one of STATUSES: what was stored)

    @property
    def reason(self) -> str | None:
        """Why it was cancelled ("parent orders/o-17 completed", ...), or None."""
        return self._state()[1].reason

    @property
    def restarts(self) -> list[dict[str, Any]]:
        """Each restart so far: ``{"at": epoch, "reason": "restart 1 after ...", "count": 1}``."""
        return list(self._state()[1].restarts)

    @property
    def last_error(self) -> str | None:
        """Why the instance is stuck (e.g. a `NonDeterminismError`), or None."""
        return self._state()[1].last_error

    @property
    def stuck(self) -> str | None:
        """Why the live instance cannot run until its code or the system's
        configuration changes, in a few words (``"non-determinism at effect
        4"``, ``"process 'shipment/:id' not registered"``; `last_error` has
        the whole story and the fix); None if nothing holds it. A stuck
        instance is neither failed nor lost: it runs again once fixed code,
        or a system that registers its process, opens the journal; one
        stuck on a step's crash budget (``"crash budget spent by step
        'charge'"``, see `Retry`) once ``system.retry`` resumes it."""
        status, record = self._state()
        if record.incarnation != self._incarnation or status not in LIVE_STATUSES:
            return None
        return record.held

    async def result(self) -> R:
        """Wait for the instance to finish and return its result.

        Follows continue-as-new runs and restarts. A stuck instance (see
        `stuck`: its replay met non-determinism, or its process is not
        registered) is not finished, and this keeps waiting: code that fits,
        once deployed, resumes it, and then it finishes. To stop waiting on
        one, read `stuck` (the system also logs a warning naming the fix)
        and bound the wait, e.g. ``with trio.move_on_after(...)``.

        Raises:
            ProcessFailed: it failed; the message carries the original
                error's type and message. Also when it failed and a saga
                compensation is stuck (status ``"compensation_stuck"``): the
                message says so and names the calls that resolve it.
            ProcessCancelled: it was cancelled (or this handle's incarnation
                was), including a cancel whose compensation is stuck.
            InstanceRemoved: a cleanup removed it from the journal after
                it ended, before this handle saw its end (a handle that saw
                it, through `status` or any other read, keeps it and
                answers as before). Read results before cleaning them up.
            JournalCorrupt: its records do not decode; it names the database
                and key of the one that fails.
        """
        if _guard.stepping.address is not None:  # (process code: refused, saying why)
            _guard.refuse(
                "handle.result()",
                "to wait for a child, start it with ctx.call (or ctx.spawn, then ctx.wait "
                "for a signal it sends)",
            )
        # A loop of its own, not `status_changes`: an async generator left
        # before its end is finalized later by trio, in a task of its own.
        # Each turn reads the state once (`_state`) and, unless what it
        # reads is settled (as `status` would say it), waits once: usually
        # one wait, then one read of the end kept (`Statuses.keep_end`).
        system, iid = self._system, self._iid
        statuses, journal = system.statuses, system.journal
        while True:
            status, record = self._state()
            event = None
            if status == "unread":  # not read (a remote journal): a change may never come
                event = statuses.event(iid)  # (taken first: a change during the read sets it)
                await statuses.refresh(iid)
                status, record = self._state()
            if status != "unread" and (
                status in _SETTLED
                or status == "compensation_stuck"
                or record.incarnation != self._incarnation  # cancelled and replaced
            ):
                break
            if event is None:
                # Invariant: nothing yields between the read above and this,
                # so a change after the read sets the event taken here.
                event = statuses.event(iid)
            # (`_changed`, written out: each frame more is resumed at the wake.)
            if journal.node is None:
                await event.wait()
            else:  # another node may run it: its changes wake nobody here
                with trio.move_on_after(REMOTE_POLL * journal.poll_scale):
                    await event.wait()
            if not journal.reads_at_once:  # (a local one's reads are reads)
                await statuses.refresh(iid)
        if status == "corrupt":
            raise self._system.corruption.error(self._iid, self._address)
        if (
            record.incarnation != self._incarnation
            and self._incarnation
            and await self._system.statuses.removed(self._iid, self._incarnation)
        ):
            raise self._removed()
        if record.incarnation != self._incarnation or status == "cancelled":
            reason = record.reason or "cancelled"
            if record.incarnation != self._incarnation:
                reason = "this incarnation was cancelled and the address started afresh"
            raise ProcessCancelled(f"{self._address!r} was cancelled: {reason}", reason=reason)
        if status == "compensation_stuck":
            self._raise_stuck(record)
        if status == "failed":
            error = record.error or {}
            raise ProcessFailed(f"{self._address!r} failed: {error_summary(error)}", error=error)
        # What the process function returned, as the codec stored it.
        return cast(R, record.result)

    def _removed(self) -> InstanceRemoved:
        address, incarnation = self._address, self._incarnation or 0
        return InstanceRemoved(
            f"{address!r} (incarnation {incarnation}) was removed from the journal after it "
            "ended, by a cleanup (system.cleanup or the command line's cleanup; or, for a "
            "failed child, by a retry or fork of its parent), before this handle saw its "
            "outcome, which is gone with it; read results before cleaning them up "
            "(cleanup(older_than=...) longer than any handle waits), or keep what you need "
            "outside the journal",
            address=address,
            incarnation=incarnation,
        )

    def _raise_stuck(self, record: InstanceRecord) -> None:
        # Parked, not finished, yet what the caller waits for is decided: the
        # process ended (failed, or was cancelled) and only its undo waits
        # for an operator, so result() says so instead of waiting silently.
        failure = record.failure or {}
        address = self._address
        stuck = (
            f"its compensation is stuck ({record.last_error or 'no error recorded'}); "
            f"fix the cause and call system.resume_compensation({address!r}) to retry it, or "
            f"system.abandon_compensation({address!r}) to end it failed without the rest"
        )
        if record.failure_end == "cancelled":
            reason = record.reason or "cancelled"
            raise ProcessCancelled(f"{address!r} was cancelled: {reason}; {stuck}", reason=reason)
        raise ProcessFailed(f"{address!r} failed: {error_summary(failure)}; {stuck}", error=failure)

    @property
    def exports(self) -> Any:
        """The latest value published with ``ctx.publish`` (None before any)."""
        return self._state()[1].exports

    async def watch(self) -> AsyncIterator[Any]:
        """Yield the current exports, then each newly published value; a slow
        watcher gets the latest, not a backlog. Waits for the first publish;
        ends once the instance is finished."""
        _guard.refuse(
            "handle.watch()", "read a child's progress through signals it sends (ctx.wait)"
        )
        seen = None
        while True:
            event = self._system.statuses.event(self._iid)
            status, record = self._state()
            version = record.exports_version  # 0 before the first publish
            if version and version != seen:
                seen = version
                yield record.exports
            if status in _SETTLED:
                return
            await self._changed(event)

    async def cancel(self, *, compensate: bool = False) -> bool:
        """Cancel the instance; with ``compensate=True`` it runs its pending
        saga compensations first. See `ActorSystem.cancel`."""
        _guard.refuse(
            "handle.cancel()",
            "a child ends with its parent; to stop one earlier, send it a signal it handles",
        )
        return await self._system.cancel(self._address, compensate=compensate)

    async def status_changes(self) -> AsyncIterator[HandleStatus]:
        """Yield the current status, then each new one, ending after a
        terminal status. A slow reader sees the latest status, not a backlog.

        To leave the loop early (a ``break``, a ``return``, a cancel), wrap
        it in ``async with contextlib.aclosing(handle.status_changes()) as
        changes:``; trio finalizes an async generator left open later, with
        a ResourceWarning."""
        _guard.refuse(
            "handle.status_changes()",
            "to wait for a child, start it with ctx.call (or ctx.spawn, then ctx.wait "
            "for a signal it sends)",
        )
        last = None
        while True:
            event = self._system.statuses.event(self._iid)
            status = self.status
            if status != last:
                last = status
                yield status
            if status in _SETTLED:
                return
            await self._changed(event)

    async def _changed(self, event: trio.Event) -> None:
        """Wait for ``event`` (a status change here) or, on a shared journal,
        at most `REMOTE_POLL`, then read the journal: another node may run
        the instance (or take it over), and its changes wake nobody here."""
        await status_changed(self._system, event)
        if not self._system.journal.reads_at_once:  # (a local one's reads are reads)
            await self._system.statuses.refresh(self._iid)

    async def refresh(self) -> HandleStatus:
        """Read the instance's state from the journal (off the trio thread)
        and return its status: what `status` and the other properties give
        from then on. They read what this system holds in memory, and on a
        remote journal (PostgreSQL) an instance another node runs changes
        there only when read."""
        await self._system.statuses.refresh(self._iid)
        return self.status

    def __repr__(self) -> str:
        return f"<Handle {self._address!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Handle) and (self._address, self._incarnation) == (
            other._address,
            other._incarnation,
        )

    def __hash__(self) -> int:
        return hash((self._address, self._incarnation))


class ChildHandle(Handle[R]):
    """The handle of a child started with ``ctx.spawn``.

    Inside the parent process use only its `id` (e.g. to send it signals):
    waiting on it there would not be an effect. Outside, it is a full `Handle`.
    """

    _made_by = "ctx.spawn(...) gives one"

    __slots__ = ()

    def __init__(self, system: SystemAPI, address: str) -> None:
        iid = instance_id(address)
        # What this system knows of the child (on a remote journal, nothing
        # may be known: the handle then takes the incarnation it first sees).
        super().__init__(system, iid, address, system.statuses.snapshot(iid)[1].incarnation or None)
