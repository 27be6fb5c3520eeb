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

Cron expressions are parsed and iterated by ``cronsim``, in the schedule's
time zone (``zoneinfo``); interval ticks fall on whole multiples of the
interval since the Unix epoch, so every node computes the same ones.

Interval ticks are counted in whole microseconds, never in float seconds:
the interval is taken to its nearest microsecond (``step``) and tick ``n``
is exactly ``n * step`` microseconds after the epoch. A time compared with
ticks (the last tick handled, the clock) is first taken to its nearest
microsecond, exactly (`_micros`), and a tick's float seconds give back that
tick: a float epoch before the year 2242 is within half a microsecond of
the time it stands for. So the tick after the last one handled is strictly after it,
whatever the interval; in floats, ``floor(n * every / every)`` can be
``n - 1`` and hand the same tick out again.

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
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import attrs
import cronsim
import trio

from storage import UNFINISHED_STATUSES, Txn, encode, instance_id
from storage.errors import (
    ActorError,
    CommitOutcomeUnknown,
    Conflict,
    JournalClosed,
    JournalCorrupt,
    JournalFull,
)

from .._kernel._checks import check_name, check_text
from .._kernel._interfaces import SystemAPI
from .._kernel._process import ProcessDef
from ..errors import InvalidArguments

__all__ = ["OVERLAP_POLICIES", "ScheduleCalls", "ScheduleInfo", "ScheduleService"]

OVERLAP_POLICIES = ("skip", "buffer_one", "allow")
log = logging.getLogger("actors.schedules")

POLL_SHARED = 1.0  # seconds between looks on a shared journal (other nodes' changes)
RETRY = 60.0  # seconds before a schedule whose tick failed to start tries again
MICROS = 1_000_000  # interval ticks are counted in whole microseconds


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


def _micros(epoch: float) -> int:
    """``epoch`` seconds as the nearest whole number of microseconds, computed
    exactly (from the float's ratio of integers, not a float product)."""
    num, den = float(epoch).as_integer_ratio()
    return (2 * num * MICROS + den) // (2 * den)


def _step(every: float) -> int:
    """The interval ``every`` in whole microseconds (at least one;
    `check_spec` refuses intervals shorter than that)."""
    return max(1, _micros(every))


def tick_text(epoch: float) -> str:
    """A tick's time as its path param: ISO 8601 UTC to the second (``...Z``),
    with milliseconds when the tick falls between seconds and microseconds
    when it falls between milliseconds."""
    seconds, micros = divmod(_micros(epoch), MICROS)
    moment = _dt.datetime.fromtimestamp(seconds, _dt.UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if micros % 1000:
        return f"{text}.{micros:06d}Z"
    return f"{text}.{micros // 1000:03d}Z" if micros else f"{text}Z"


def ticks_after(spec: dict[str, Any], after: float) -> Iterator[float]:
    """The schedule's tick times (epoch seconds) strictly after ``after``
    (for an interval, ``after`` taken to the microsecond)."""
    every = spec.get("every")
    if every is not None:
        step = _step(every)
        # Invariant: n * step > after in microseconds, so the tick handled
        # last (``after``) is never handed out again.
        n = _micros(after) // step + 1
        while True:
            yield n * step / MICROS  # int / int: the float nearest the tick
            n += 1
    zone = zoneinfo.ZoneInfo(spec["timezone"])
    start = _dt.datetime.fromtimestamp(math.floor(after), zone)
    for moment in cronsim.CronSim(spec["cron"], start):
        value = moment.timestamp()
        if value > after:
            yield value


def due_ticks(spec: dict[str, Any], after: float, now: float, keep: int) -> list[float]:
    """The latest ``keep`` ticks in ``(after, now]``, oldest first; found from
    ``now`` backwards, so a long downtime costs no walk over every tick."""
    every = spec.get("every")
    if every is not None:
        step = _step(every)
        first = _micros(after) // step + 1  # the same count as ticks_after's
        latest = _micros(now) // step  # a clock at a tick's float has reached it
        count = max(0, latest - first + 1)
        return [(latest - k) * step / MICROS for k in reversed(range(min(keep, count)))]
    zone = zoneinfo.ZoneInfo(spec["timezone"])
    found: list[float] = []
    # cronsim's reverse walk gives ticks strictly before its start.
    for moment in cronsim.CronSim(
        spec["cron"], _dt.datetime.fromtimestamp(math.floor(now) + 1, zone), reverse=True
    ):
        value = moment.timestamp()
        if value <= after or len(found) >= keep:
            break
        found.append(value)
    return found[::-1]


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
    if every is not None and _micros(every) < 1:
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

    def __init__(self, system: SystemAPI) -> None:
        self.system = system
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
        self.system.statuses.unwatch(iid, self.status_changed)
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
        definition = self.system.registry.definition(proc)
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
        return await self.system.journal.read(lambda r: r.states("schedule/"))

    async def put(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Create the schedule, or change its definition (keeping its last
        tick and pause state). Idempotent."""
        key = schedule_key(name)
        while True:
            rows = await self.system.journal.read(lambda r: r.states(key))
            found = next((row for row in rows if row.key == key), None)
            now = self.system.epoch_now()
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
                await self.system.journal.commit(txn)
            except Conflict:
                continue
            self.poke()
            return stored

    async def change(self, name: str, **fields: Any) -> bool:
        """Set ``fields`` of a schedule (pause, resume); False if there is none.
        Deleting is ``change(name, deleted=True)``."""
        key = schedule_key(name)
        while True:
            rows = await self.system.journal.read(lambda r: r.states(key))
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
                    fields = dict(fields, last=max(found.value["last"], self.system.epoch_now()))
                txn.put_state(key, dict(found.value, **fields))
            try:
                await self.system.journal.commit(txn)
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
        system = self.system
        while True:
            self._wake = wake = trio.Event()
            soonest = math.inf
            try:
                rows = await self.rows()
            except JournalCorrupt as exc:
                log.error("the schedules cannot be read (%s); trying again in %s s", exc, RETRY)
                rows, soonest = [], system.epoch_now() + RETRY
            while self._unsure:
                system.registry.activate(self._unsure.pop())  # nothing on disk: nothing to do
            for row in rows:
                name = row.key[len("schedule/") :]
                failed_version, until = self._failed.get(name, (None, 0.0))
                if failed_version == row.version and until > system.epoch_now():
                    soonest = min(soonest, until)
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
                    due = system.epoch_now() + RETRY
                    self._failed[name] = (row.version, due)
                soonest = min(soonest, due)
            if system.journal.shared:
                soonest = min(soonest, system.epoch_now() + POLL_SHARED * system.journal.poll_scale)
            if soonest == math.inf:
                await wake.wait()
            else:
                with trio.move_on_at(system.trio_time(soonest)):
                    await wake.wait()

    async def _handle(self, name: str, version: int, spec: dict[str, Any]) -> float:
        """Start what is due of one schedule; return when to look again
        (epoch seconds; inf: only on a change)."""
        system = self.system
        if spec["paused"] or spec["process"] not in system.registry.procs:
            return math.inf
        now = system.epoch_now()
        proc = system.registry.procs[spec["process"]]
        latest = spec.get("latest")
        live = False
        if latest is not None:
            iid = instance_id(latest)
            actor = system.registry.live.get(iid)
            if actor is not None and actor.loaded:
                status = actor.status
            else:  # read off the trio thread: a remote journal's read is a round trip
                try:
                    row = await system.journal.read(lambda r: r.instance(iid))
                    status = "unknown" if row is None else row.status
                except JournalCorrupt:  # it will not run again: no overlap with it
                    status = "corrupt"
            live = status in UNFINISHED_STATUSES
            if live and spec["overlap"] != "allow":
                system.statuses.watch(iid, self.status_changed)
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
        await self.system.journal.commit(txn)

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
            _, created = await self.system.lifecycle.start(
                proc, params, dict(spec["input"]), None, extra=record
            )
        except CommitOutcomeUnknown:
            self._unsure.add(instance_id(address))  # run() activates it, if it was written
            raise
        if not created:  # it exists already (started before a crash): record the tick alone
            txn = Txn()
            record(txn)
            await self.system.journal.commit(txn)


class ScheduledSystem(SystemAPI, Protocol):
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
