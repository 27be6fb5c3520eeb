"""`ActorSystem`'s calls for schedules: the feature's public calls live with it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from .._kernel._process import ProcessDef
from ._schedules import ScheduleInfo, ScheduleService

__all__ = ["ScheduleCalls"]


class ScheduledSystem(Protocol):
    """What `ScheduleCalls` uses of the system: its schedule service."""

    @property
    def schedules(self) -> ScheduleService: ...


class ScheduleCalls:
    """`ActorSystem`'s calls for schedules: a base holding no state, so that
    the feature's public calls live with the feature."""

    __slots__ = ()

    async def schedule(
        self: ScheduledSystem,
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
        is started once, across crashes and nodes (see `actors._features._schedules`).

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
        return await self.schedules.define(
            name,
            proc,
            cron=cron,
            every=every,
            params=params,
            input=input,
            overlap=overlap,
            catch_up=catch_up,
            timezone=timezone,
        )

    async def pause_schedule(self: ScheduledSystem, name: str) -> bool:
        """Stop starting ticks of schedule ``name`` (kept in the journal).
        Returns False if there is no such schedule."""
        return await self.schedules.change(name, paused=True)

    async def resume_schedule(self: ScheduledSystem, name: str) -> bool:
        """Start ticks of a paused schedule again, from the next one due (the
        ticks while paused are not caught up). False if there is none."""
        return await self.schedules.change(name, paused=False)

    async def delete_schedule(self: ScheduledSystem, name: str) -> bool:
        """Remove schedule ``name`` (instances it started are left as they
        are). False if there was none."""
        return await self.schedules.change(name, deleted=True)

    async def list_schedules(self: ScheduledSystem) -> list[ScheduleInfo]:
        """Every schedule in the journal, by name."""
        return [
            self.schedules.info(row.key[len("schedule/") :], row.value)
            for row in await self.schedules.rows()
        ]
