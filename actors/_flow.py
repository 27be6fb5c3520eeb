"""The public calls of queues and schedules: `FlowControl`, a base of
`ActorSystem` (the mechanisms are in `_queues` and `_schedules`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio

from storage import Journal, Txn, encode
from storage.errors import CommitOutcomeUnknown

from ._checks import check_name, check_text
from ._process import ProcessDef
from ._queues import Queue, QueueInfo, QueueService
from ._schedules import ScheduleInfo, ScheduleService, check_spec

__all__ = ["FlowControl"]


class FlowControl:
    """Queues' and schedules' half of `ActorSystem`."""

    queues: QueueService
    schedules: ScheduleService

    journal: Journal
    outages: Any  # the JournalWatch

    if TYPE_CHECKING:

        def _proc(self, proc: ProcessDef[..., Any] | str) -> ProcessDef[..., Any]: ...

        def _status_changed(self, iid: bytes) -> None: ...

        def _spawn_system_task(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def _start_flow(self, nursery: trio.Nursery) -> None:
        """Run the queue pumps and the scheduler (again after each outage)."""
        for run, what in (
            (self.queues.run, "the queue pumps"),
            (self.schedules.run, "the scheduler"),
        ):
            nursery.start_soon(self.outages.keep_running, run, what, name=f"actors: {what}")

    async def _enqueue(self, txn: Txn, queued: tuple[Queue, int], iid: bytes, address: str) -> None:
        """Commit a start transaction as a queued instance's (its waiting entry added)."""
        self.queues.enqueue(txn, queued[0], iid, address, queued[1])
        # Awaited whatever the durability: the pump poked below reads only
        # what is committed, and would otherwise miss it until the next poke.
        try:
            await self.journal.commit(txn, durable=True)
        except CommitOutcomeUnknown:  # it may be written: the pump looks once it answers
            self._spawn_system_task(self._poke_when_back, queued[0].name, iid)
            raise
        self._status_changed(iid)
        self.queues.poke(queued[0].name)

    async def _poke_when_back(self, name: str, iid: bytes) -> None:
        await self.outages.back()
        self._status_changed(iid)
        self.queues.poke(name)

    async def schedule(
        self,
        name: str,
        proc: ProcessDef[..., Any] | str,
        *,
        cron: str | None = None,
        every: float | None = None,
        params: Iterable[str] = (),
        input: dict[str, Any] | None = None,
        overlap: str = "skip",
        catch_up: int = 1,
        timezone: str = "UTC",
    ) -> ScheduleInfo:
        """Create (or update) the durable schedule ``name``: at every tick of
        ``cron`` (in ``timezone``) or every ``every`` seconds, start one
        instance of ``proc`` whose last path param is the tick's time (ISO
        8601 UTC, e.g. ``2026-01-01T03:00:00Z``); ``params`` fill the path
        params before it, ``input`` is its keyword input.

        Idempotent by name: the same call again changes nothing; a changed
        definition replaces the stored one and keeps the last tick. A tick
        is started once, across crashes and nodes (see `actors._schedules`).

        Args:
            overlap: what a tick does while the instance of the previous one
                is unfinished: ``"skip"`` it, ``"buffer_one"`` (start it when
                that one ends; one tick kept, later ones skipped) or
                ``"allow"`` (start it anyway).
            catch_up: after a downtime, how many of the ticks that fell due
                run (the latest ones, oldest first); 1 or more.

        Raises:
            UnknownProcess: ``proc`` is not registered.
            InvalidArguments: a bad cron expression, interval, policy, zone,
                or params that do not leave exactly the last path param.
            EncodeError: input the codec cannot store.
        """
        definition = self._proc(proc)
        check_name(name, "schedule's name")
        given = tuple(params)
        for param in given:
            check_text(param, f"a path param of {definition.template!r}")
        check_spec(
            definition,
            cron=cron,
            every=every,
            params=given,
            overlap=overlap,
            catch_up=catch_up,
            timezone=timezone,
        )
        definition.check_input((*given, "tick"), dict(input or {}))
        spec = {
            "process": definition.template,
            "cron": cron,
            "every": None if every is None else float(every),
            "params": list(given),
            "input": dict(input or {}),
            "overlap": overlap,
            "catch_up": catch_up,
            "timezone": timezone,
        }
        encode(spec, what="input")
        return self.schedules.info(name, await self.schedules.put(name, spec))

    async def pause_schedule(self, name: str) -> bool:
        """Stop starting ticks of schedule ``name`` (kept in the journal).
        Returns False if there is no such schedule."""
        return await self.schedules.change(name, paused=True)

    async def resume_schedule(self, name: str) -> bool:
        """Start ticks of a paused schedule again, from the next one due (the
        ticks while paused are not caught up). False if there is none."""
        return await self.schedules.change(name, paused=False)

    async def delete_schedule(self, name: str) -> bool:
        """Remove schedule ``name`` (instances it started are left as they
        are). False if there was none."""
        return await self.schedules.change(name, deleted=True)

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule in the journal, by name."""
        return [
            self.schedules.info(row.key[len("schedule/") :], row.value)
            for row in await self.schedules.rows()
        ]

    async def queue_info(self, queue: Queue | str) -> QueueInfo:
        """How deep the queue is, how many of its instances hold a slot, and
        how long its oldest waiting instance has waited (read from the
        journal, so over every node sharing it).

        Raises:
            InvalidArguments: the queue is not registered with this system.
        """
        return await self.queues.info(queue)
