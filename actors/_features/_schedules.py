"""Schedules: start an instance of a process at every tick of a cron
expression or an interval, durably, once per tick.

A schedule is a state row ``schedule/<name>`` (`storage._states`): its
definition, whether it is paused, the last tick handled and the address of
the last instance it started. Each tick starts one instance whose last path
param is the tick's time in ISO 8601 UTC (``2026-01-01T03:00:00Z``), so the
tick's address is known before it starts.

Invariant: a tick is started in the same transaction that moves the
schedule's ``last`` past it, on condition that the row is still at the
version read (a compare-and-set). So a crash before that commit leaves the
tick to be handled again, a crash after it leaves it done, and of two nodes
handling one tick only one commits: a tick never starts twice.

Cron expressions and intervals tick as `_schedule_ticks` computes, the
same on every node.

The scheduler runs under `JournalWatch.keep_running`: when the journal says
to try again later (full, its disk full, its server away) the scheduler
lets the error go there, which logs it and runs the scheduler again with
backoff, from what was committed. A tick whose commit's outcome is unknown
(`CommitOutcomeUnknown`) is brought into memory on the next look if it was
written.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import zoneinfo
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs
import cronsim
import trio

from storage import UNFINISHED_STATUSES, Journal, Txn, encode, instance_id
from storage.errors import (
    ActorError,
    CommitOutcomeUnknown,
    Conflict,
    JournalClosed,
    JournalCorrupt,
    JournalFull,
)

from .._kernel._checks import check_name, check_text
from .._kernel._interfaces import ActorAPI
from .._kernel._process import ProcessDef
from ..errors import InvalidArguments
from ._schedule_ticks import due_ticks, tick_text, ticks_after, to_micros

__all__ = ["OVERLAP_POLICIES", "ScheduleInfo", "ScheduleService"]

OVERLAP_POLICIES = ("skip", "buffer_one", "allow")
log = logging.getLogger("actors.schedules")

POLL_SHARED = 1.0  # seconds between looks on a shared journal (other nodes' changes)
RETRY = 60.0  # seconds before a schedule whose tick failed to start tries again


@attrs.frozen
class ScheduleInfo:
    """A schedule as stored: its definition, ``paused``, the last tick handled
    (``last_tick``, ISO 8601 UTC), the address of the last instance it started
    (``last_started``, or None) and the next tick due (``next_tick``)."""

    name: str
    process: str
    cron: str | None
    every: float | None
    params: tuple[str, ...]
    input: dict[str, Any]
    overlap: str
    catch_up: int
    timezone: str
    paused: bool
    last_tick: str | None
    last_started: str | None
    next_tick: str | None


def schedule_key(name: str) -> str:
    return f"schedule/{name}"


def check_spec(
    proc: ProcessDef[..., Any],
    *,
    cron: str | None,
    every: float | None,
    params: tuple[str, ...],
    overlap: str,
    catch_up: int,
    timezone: str,
) -> None:
    """Raise `InvalidArguments` (saying what to pass) for a bad schedule."""
    if (cron is None) == (every is None):
        raise InvalidArguments("schedule takes one of cron='0 3 * * *' or every=seconds")
    if cron is not None:
        try:
            cronsim.CronSim(cron, _dt.datetime.now(_dt.UTC))
        except (cronsim.CronSimError, TypeError, ValueError) as exc:
            raise InvalidArguments(
                f"cron={cron!r} is not a cron expression ({exc}); e.g. '0 3 * * *' for 03:00 daily"
            ) from None
    if every is not None and (
        isinstance(every, bool) or not isinstance(every, (int, float)) or not 0 < every < math.inf
    ):
        raise InvalidArguments(f"every= takes positive seconds, not {every!r}")
    if every is not None and to_micros(every) < 1:
        raise InvalidArguments(
            f"every= takes at least 0.000001 seconds (ticks are counted in whole "
            f"microseconds), not {every!r}"
        )
    if overlap not in OVERLAP_POLICIES:
        raise InvalidArguments(f"overlap= takes one of {OVERLAP_POLICIES}, not {overlap!r}")
    if isinstance(catch_up, bool) or not isinstance(catch_up, int) or catch_up < 1:
        raise InvalidArguments(
            f"catch_up= takes a whole number, 1 or more (how many of the ticks due at once "
            f"after a downtime run, the latest ones), not {catch_up!r}"
        )
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidArguments(
            f"timezone={timezone!r} is not an IANA zone name like 'Europe/Paris'"
        ) from None
    if len(params) + 1 != len(proc.params):
        raise InvalidArguments(
            f"{proc.template!r} has {len(proc.params)} path param(s); a schedule fills all "
            f"but the last with params= (got {len(params)}) and the last with the tick's time"
        )
    try:  # the rule every address follows, checked now rather than at each tick
        proc.resolve(*params, tick_text(0.0))
    except InvalidArguments as exc:
        raise InvalidArguments(f"params={list(params)!r} do not fit: {exc}") from None


class ScheduleService:
    """The schedules of one system: definitions in the journal, one task
    that starts each tick."""

    what = "the scheduler"  # as a `Service`

    def __init__(
        self,
        journal: Journal,
        *,
        procs: Mapping[str, ProcessDef[..., Any]],
        live: Mapping[bytes, ActorAPI],
        definition: Callable[[ProcessDef[..., Any] | str], ProcessDef[..., Any]],
        activate: Callable[[bytes], None],
        watch: Callable[[bytes, Callable[[bytes], None]], None],
        unwatch: Callable[[bytes, Callable[[bytes], None]], None],
        start_instance: Callable[..., Awaitable[tuple[object, bool]]],
        epoch_now: Callable[[], float],
        trio_time: Callable[[float], float],
    ) -> None:
        self.journal = journal
        # Of the registry: the processes, the instances in memory (read
        # only), `Registry.definition` and `Registry.activate`.
        self.procs, self.live = procs, live
        self.definition, self.activate = definition, activate
        # `Statuses.watch` and `unwatch` (see `status_changed`); `Lifecycle.start`.
        self.watch, self.unwatch, self.start_instance = watch, unwatch, start_instance
        self.epoch_now, self.trio_time = epoch_now, trio_time  # the system's clock
        self._wake = trio.Event()
        # name -> (version, epoch): a schedule whose tick failed to start
        # waits until then, unless its definition changes meanwhile
        self._failed: dict[str, tuple[int, float]] = {}
        # ticks' instances whose start's commit had an unknown outcome: the
        # next look brings each into memory if it was written
        self._unsure: set[bytes] = set()

    def poke(self) -> None:
        self._wake.set()

    def status_changed(self, iid: bytes) -> None:
        """Hook: the status of a last started instance that a buffered tick
        waits for changed (see `_handle`, which watches it again if it
        still runs); the tick may start now."""
        self.unwatch(iid, self.status_changed)
        self._wake.set()

    async def define(
        self,
        name: str,
        proc: ProcessDef[..., Any] | str,
        *,
        cron: str | None,
        every: float | None,
        params: Iterable[str],
        input: dict[str, Any] | None,
        overlap: str,
        catch_up: int,
        timezone: str,
    ) -> ScheduleInfo:
        """The body of `ActorSystem.schedule`."""
        definition = self.definition(proc)
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
        return self.info(name, await self.put(name, spec))

    async def rows(self) -> list[Any]:
        return await self.journal.read(lambda r: r.states("schedule/"))

    async def put(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Create the schedule, or change its definition (keeping its last
        tick and pause state). Idempotent."""
        key = schedule_key(name)
        while True:
            rows = await self.journal.read(lambda r: r.states(key))
            found = next((row for row in rows if row.key == key), None)
            now = self.epoch_now()
            if found is None:
                stored = dict(spec, paused=False, last=now, latest=None, pending=None)
            else:
                stored = dict(found.value, **spec)
                if stored == found.value:
                    return stored
            txn = Txn()
            txn.expect_state(key, 0 if found is None else found.version)
            txn.put_state(key, stored)
            try:
                await self.journal.commit(txn)
            except Conflict:
                continue
            self.poke()
            return stored

    async def change(self, name: str, **fields: Any) -> bool:
        """Set ``fields`` of a schedule (pause, resume); False if there is none.
        Deleting is ``change(name, deleted=True)``."""
        key = schedule_key(name)
        while True:
            rows = await self.journal.read(lambda r: r.states(key))
            found = next((row for row in rows if row.key == key), None)
            if found is None:
                return False
            txn = Txn()
            txn.expect_state(key, found.version)
            if fields.get("deleted"):
                txn.delete_state(key)
            else:
                if fields.get("paused") is False and found.value["paused"]:
                    # Resumed: the ticks while paused are not caught up.
                    fields = dict(fields, last=max(found.value["last"], self.epoch_now()))
                txn.put_state(key, dict(found.value, **fields))
            try:
                await self.journal.commit(txn)
            except Conflict:
                continue
            self.poke()
            return True

    def info(self, name: str, value: dict[str, Any]) -> ScheduleInfo:
        following = None
        if not value["paused"]:
            following = tick_text(next(ticks_after(value, value["last"])))
        return ScheduleInfo(
            name=name,
            process=value["process"],
            cron=value.get("cron"),
            every=value.get("every"),
            params=tuple(value["params"]),
            input=value["input"],
            overlap=value["overlap"],
            catch_up=value["catch_up"],
            timezone=value["timezone"],
            paused=value["paused"],
            last_tick=value.get("last_tick"),
            last_started=value.get("latest"),
            next_tick=following,
        )

    async def run(self) -> None:
        """Start ticks as they fall due, until the system closes."""
        while True:
            self._wake = wake = trio.Event()
            soonest = math.inf
            try:
                rows = await self.rows()
            except JournalCorrupt as exc:
                log.error("the schedules cannot be read (%s); trying again in %s s", exc, RETRY)
                rows, soonest = [], self.epoch_now() + RETRY
            while self._unsure:
                self.activate(self._unsure.pop())  # nothing on disk: nothing to do
            for row in rows:
                name = row.key[len("schedule/") :]
                waiting = self._failed.get(name)
                if (
                    waiting is not None
                    and waiting[0] == row.version
                    and waiting[1] > self.epoch_now()
                ):
                    soonest = min(soonest, waiting[1])
                    continue  # it failed lately and is unchanged: wait it out
                self._failed.pop(name, None)
                try:
                    due = await self._handle(name, row.version, row.value)
                except Conflict:
                    due = 0.0  # changed meanwhile (another node, a pause): look again
                except (JournalClosed, JournalFull):
                    # Try again later (JournalUnavailable, JournalFull) or closing:
                    # keep_running runs this again once the journal answers, or
                    # with backoff, from what the rows say was committed.
                    raise
                except (ActorError, ValueError) as exc:
                    # Say, the process's code changed and the stored input no
                    # longer fits: this schedule waits, the others go on.
                    log.error(
                        "schedule %r could not start its tick (%s); it tries again in %s s",
                        name,
                        exc,
                        RETRY,
                        extra={"actors_schedule": name},
                    )
                    due = self.epoch_now() + RETRY
                    self._failed[name] = (row.version, due)
                soonest = min(soonest, due)
            if self.journal.shared:
                soonest = min(soonest, self.epoch_now() + POLL_SHARED * self.journal.poll_scale)
            if soonest == math.inf:
                await wake.wait()
            else:
                with trio.move_on_at(self.trio_time(soonest)):
                    await wake.wait()

    async def _handle(self, name: str, version: int, spec: dict[str, Any]) -> float:
        """Start what is due of one schedule; return when to look again
        (epoch seconds; inf: only on a change)."""
        if spec["paused"] or spec["process"] not in self.procs:
            return math.inf
        now = self.epoch_now()
        proc = self.procs[spec["process"]]
        latest = spec.get("latest")
        live = False
        if latest is not None:
            iid = instance_id(latest)
            actor = self.live.get(iid)
            if actor is not None and actor.loaded:
                status = actor.status
            else:  # read off the trio thread: a remote journal's read is a round trip
                try:
                    row = await self.journal.read(lambda r: r.instance(iid))
                    status = "unknown" if row is None else row.status
                except JournalCorrupt:  # it will not run again: no overlap with it
                    status = "corrupt"
            live = status in UNFINISHED_STATUSES
            if live and spec["overlap"] != "allow":
                self.watch(iid, self.status_changed)
        pending = spec.get("pending")
        if pending is not None and not live:  # the buffered tick starts now
            await self._start_tick(name, version, spec, proc, pending, pending=None)
            return now
        due = due_ticks(spec, spec["last"], now, spec["catch_up"])  # older ones are passed over
        if not due:
            return next(ticks_after(spec, spec["last"]))
        tick = due[0]
        if live and spec["overlap"] == "skip":
            await self._advance(name, version, spec, last=tick)
            return now
        if live and spec["overlap"] == "buffer_one":
            # One buffered: the first one waiting is kept, later ones skipped.
            await self._advance(name, version, spec, last=tick, pending=pending or tick)
            return now
        await self._start_tick(name, version, spec, proc, tick)
        return now  # look again at once: more may be due

    async def _advance(self, name: str, version: int, spec: dict[str, Any], **fields: Any) -> None:
        txn = Txn()
        key = schedule_key(name)
        txn.expect_state(key, version)
        last = fields.get("last")
        stored = dict(spec, **fields)
        if last is not None:
            stored["last_tick"] = tick_text(last)
        txn.put_state(key, stored)
        await self.journal.commit(txn)

    async def _start_tick(
        self,
        name: str,
        version: int,
        spec: dict[str, Any],
        proc: ProcessDef[..., Any],
        tick: float,
        **fields: Any,
    ) -> None:
        """Start the instance of ``tick`` in the transaction that records it."""
        key = schedule_key(name)
        params = (*spec["params"], tick_text(tick))
        address = proc.resolve(*params)
        stored = dict(spec, latest=address, **fields)
        if "pending" not in fields:
            stored["last"] = tick
            stored["last_tick"] = tick_text(tick)

        def record(txn: Txn) -> None:
            txn.expect_state(key, version)
            txn.put_state(key, stored)

        try:
            _, created = await self.start_instance(
                proc, params, dict(spec["input"]), None, extra=record
            )
        except CommitOutcomeUnknown:
            self._unsure.add(instance_id(address))  # run() activates it, if it was written
            raise
        if not created:  # it exists already (started before a crash): record the tick alone
            txn = Txn()
            record(txn)
            await self.journal.commit(txn)
