"""The deterministic simulation behind `actors.testing.simulate`: one seed
fixes the scheduler's order, the clock, the journal's commits and faults,
and where hosts crash (see `simulate`)."""

from __future__ import annotations

import math
import random as _random
import uuid as _uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import trio
import trio.testing

from storage import (
    Durability,
    JournalFaults,
    SimulatedJournal,
    SimulatedNode,
    Txn,
    WriteLog,
    simulated_nodes,
)

from .._kernel._process import ProcessDef
from .._system._facade import ActorSystem
from .._system._open import open_system

__all__ = ["TEST_EPOCH", "Simulation", "SimulationHung", "SimulationReport", "simulate"]

#: The wall-clock epoch that virtual time 0 maps to in `open_test_system`.
TEST_EPOCH = 1_800_000_000.0


def _virtual_wall() -> float:
    return TEST_EPOCH + trio.current_time()


@attrs.frozen
class SimulationReport:
    """What `simulate` saw: the digest of the run's journal writes, and a trace.

    Two runs of one seed, with the same code and workload, give the same
    ``digest`` (of every transaction written, byte for byte, in order, and
    of every fault and crash). ``failure`` is what ended the run early (an
    invariant a check found broken, or an error of the runtime), or None.
    ``trace`` holds the last journal commits, faults, crashes and notes;
    ``schedule`` the names of the last tasks trio's scheduler ran.
    """

    seed: int
    digest: str
    commits: int
    writes: int
    crashes: int
    seconds: float
    trace: tuple[str, ...]
    schedule: tuple[str, ...]
    failure: BaseException | None = None

    @property
    def ok(self) -> bool:
        """Whether the run ended without a failure."""
        return self.failure is None

    def explain(self) -> str:
        """The failure (if any), then the trace and the last scheduler picks."""
        lines = [
            f"seed {self.seed}: {self.commits} commits, {self.writes} transactions written, "
            f"{self.crashes} crash(es), {self.seconds:.3f} virtual seconds, digest {self.digest}"
        ]
        if self.failure is not None:
            lines.append(f"failure: {type(self.failure).__name__}: {self.failure}")
        lines.append("last journal events (virtual time, newest last):")
        lines += [f"  {line}" for line in self.trace]
        lines.append("last scheduler picks: " + ", ".join(self.schedule))
        return "\n".join(lines)


class Simulation:
    """What a workload sees of a run of `simulate`.

    ``system`` is the system of the host's current life (a new one after
    each crash; ``life`` counts them from 0); ``random`` is the workload's
    own random source, derived from the seed; ``journal`` the
    `storage.SimulatedJournal` every life shares.
    """

    def __init__(
        self,
        seed: int,
        journal: SimulatedJournal,
        clock: trio.testing.MockClock,
        journals: list[SimulatedJournal] | None = None,
    ) -> None:
        self.seed = seed
        self.random = _random.Random(f"{seed}:workload")
        self.journal = journal
        #: every node's journal (one, unless ``simulate(nodes=K)``)
        self.journals = journals or [journal]
        self.life = 0
        self.crashes = 0
        self._clock = clock
        self._system: ActorSystem | None = None
        self._systems: list[ActorSystem | None] = [None] * len(self.journals)
        self._pick = _random.Random(f"{seed}:nodes")

    @property
    def system(self) -> ActorSystem:
        """The running system of this life; with several nodes, one of
        them, drawn at each use (a client talks to any node).

        Raises:
            RuntimeError: between lives (no system runs).
        """
        if len(self.journals) > 1:
            up = [system for system in self._systems if system is not None]
            if up:
                return self._pick.choice(up)
        elif self._system is not None:
            return self._system
        raise RuntimeError("no system runs now: the host is down between two lives")

    @property
    def lost_unawaited(self) -> int:
        """Writes the journals lost after acknowledging them (see
        `storage.SimulatedJournal.lost_unawaited`)."""
        return sum(journal.lost_unawaited for journal in self.journals)

    @property
    def stale_writes(self) -> list[str]:
        """Writes, with several nodes, to an instance another node owned,
        not fenced by the writer's claim (`storage.Cluster.stale`): a node
        that lost an instance (its lease lapsed) wrote to it. None, ever."""
        cluster = getattr(self.journal, "cluster", None)
        return list(cluster.stale) if cluster is not None else []

    def on_write(self, watcher: Callable[[Txn], None]) -> None:
        """Call ``watcher`` with each transaction the journal writes from now
        on, in order, over every life and node (what a crash loses before it
        is written is never passed): a check of a history the journal does
        not keep, such as the times a queue admitted its instances. Adding
        the same watcher again changes nothing."""
        watchers = self.journal.log.watchers
        if watcher not in watchers:
            watchers.append(watcher)

    def jump(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` at once (a clock jump)."""
        self.journal.log.event(f"clock jumps {seconds:.3f} s")
        self._clock.jump(seconds)

    def note(self, text: str) -> None:
        """Add ``text`` to the trace (the digest leaves notes out)."""
        self.journal.log.note(text)


class SimulationHung(Exception):
    """A simulated run went past its ``limit`` of virtual time."""


def simulate(
    processes: Iterable[ProcessDef[..., Any]],
    workload: Callable[[Simulation], Awaitable[None]],
    *,
    seed: int,
    crashes: int = 2,
    crash_within: int = 300,
    faults: JournalFaults | None = None,
    durability: Durability = "sync",
    settle: float = 600.0,
    check: Callable[[Simulation], Awaitable[None]] | None = None,
    trace: int = 40,
    nodes: int = 1,
    lapses: int = 0,
    limit: float | None = None,
    **options: Any,
) -> SimulationReport:
    """Run ``workload`` against a system of ``processes`` in a deterministic
    simulation: one seed fixes the order in which trio runs tasks, the
    clock, the journal's commits and faults, and where the host crashes.

    The run is its own ``trio.run`` on a ``MockClock`` (autojump at once:
    timers of days pass in milliseconds), with trio's scheduler made
    deterministic and seeded, on a `storage.SimulatedJournal`. Sync steps
    run on the trio thread (as with ``thread=False``) and take no virtual
    time; ``uuid.uuid4`` gives seeded values inside the run. The host
    crashes (0 to ``crashes`` times) at a commit the seed picks among the
    next ``crash_within``, before or after that commit is written: the
    system and every task of that life are gone, the journal keeps what was
    committed, and a new system opens on it; ``workload(sim)`` is called
    again for each life (keep its progress in its own state, and carry on).
    Once the workload returns, the host runs ``settle`` virtual seconds
    with faults and crashes still armed, then ``settle`` more without them,
    and then ``check(sim)`` is called with the last system still open.

    Two runs of a seed write the same bytes, in one process or in two
    (whatever their ``PYTHONHASHSEED``: the runtime wakes instances that
    fall due together in a fixed order). Threads, real time and real I/O in
    the workload or its steps are outside the simulation: use
    ``trio.sleep`` for time, not ``time``.

    Args:
        processes: the definitions the system runs.
        workload: ``async def workload(sim)``: drives ``sim.system`` as
            clients would; raise to report a broken expectation.
        seed: what the whole run is a function of.
        crashes: the most host crashes in the run.
        crash_within: how many commits ahead a crash may be placed.
        faults: the journal's faults (`JournalFaults`; default: none).
        durability: the journal's (``"sync"`` or ``"async"``).
        settle: virtual seconds to settle, twice (see above).
        check: ``async def check(sim)``, run at the end; raise to fail.
        trace: how many journal events and scheduler picks to keep.
        nodes: how many nodes share the journal (`storage.SimulatedNode`,
            with PostgreSQL's leases, claims, fencing and mail notices).
            With more than one, a crash is one node's: its lease ends, the
            other nodes take its instances over, and it opens again; the
            workload is cancelled and called again at each crash, as with
            one node, and ``sim.system`` is any node's system.
        lapses: with several nodes, how many times a node's lease lapses
            while it runs on, unknowing (frozen past its lease, then
            resumed: `storage.SimulatedNode.lapse`), for up to 10 s each,
            in the first minute or so; ``sim.stale_writes`` lists any
            write it then made to an instance it had lost.
        limit: virtual seconds the whole run may take (None: no bound);
            past them it fails with `SimulationHung`.
        **options: passed to `open_system` (``queues``, ``passivate_after``, ...).

    Returns:
        A `SimulationReport`; its ``failure`` is what the workload, the
        check or the runtime raised (outside a crash), else None.
    """
    processes = list(processes)
    clock = trio.testing.MockClock(autojump_threshold=0)
    log = WriteLog(keep=trace)
    journal: SimulatedJournal
    if nodes > 1:
        journals: list[SimulatedJournal] = list(
            simulated_nodes(
                _random.Random(f"{seed}:journal"),
                [f"n{i}" for i in range(nodes)],
                faults=faults if faults is not None else JournalFaults(),
                durability=durability,
                log=log,
            )
        )
        journal = journals[0]
    else:
        journal = SimulatedJournal(
            _random.Random(f"{seed}:journal"),
            faults=faults if faults is not None else JournalFaults(),
            durability=durability,
            log=log,
        )
        journals = [journal]
    sim = Simulation(seed, journal, clock, journals)
    picks = _Picks(trace)
    plan = _random.Random(f"{seed}:crashes")
    failure: BaseException | None = None
    root: list[trio.lowlevel.Task] = []

    async def main() -> None:
        with trio.move_on_after(math.inf if limit is None else limit) as bounded:
            await run()
        if bounded.cancelled_caught:
            raise SimulationHung(
                f"seed {seed}: the run went past {limit:g} virtual seconds without "
                "ending (a workload call that never returns, a lost wake-up)"
            )

    async def run() -> None:
        if nodes > 1:
            task = trio.lowlevel.current_root_task()
            assert task is not None
            root.append(task)
            await _cluster(
                sim,
                processes,
                workload,
                check,
                settle,
                plan,
                crashes,
                crash_within,
                lapses,
                options,
            )
            return
        task = trio.lowlevel.current_root_task()
        assert task is not None
        root.append(task)
        planned = plan.randint(0, crashes)
        calm = journal.faults.quiet()
        while True:
            if sim.crashes < planned:
                journal.crash_at = log.commits + plan.randint(1, crash_within)
                journal.crash_after_write = plan.random() < 0.5
            await _live(sim, processes, workload, check, settle, calm, options)
            if not journal.crashed:
                return
            sim.crashes += 1
            sim.life += 1
            journal.recover()

    with _deterministic(seed, root):
        try:
            trio.run(main, clock=clock, instruments=[picks])
        except Exception as exc:  # noqa: BLE001 - reported, with the trace
            failure = exc
    return SimulationReport(
        seed=seed,
        digest=log.hexdigest(),
        commits=log.commits,
        writes=log.writes,
        crashes=sim.crashes,
        seconds=clock.current_time(),
        trace=tuple(log.recent),
        schedule=tuple(picks.picks),
        failure=failure,
    )


async def _live(
    sim: Simulation,
    processes: list[ProcessDef[..., Any]],
    workload: Callable[[Simulation], Awaitable[None]],
    check: Callable[[Simulation], Awaitable[None]] | None,
    settle: float,
    calm: JournalFaults,
    options: dict[str, Any],
) -> None:
    """One life of the host: open a system, run the workload, settle, check;
    return early (quietly) if the host crashes."""
    journal = sim.journal
    with trio.CancelScope() as host, _hosted(journal, host.cancel):
        try:
            async with open_system(
                journal,
                processes,
                _random.Random(f"{sim.seed}:system:{sim.life}"),
                now=_virtual_wall,
                control=False,
                **options,
            ) as system:
                sim._system = system
                await workload(sim)
                await trio.sleep(settle)
                journal.crash_at = None  # the run settles without faults from here
                journal.faults = calm
                await trio.sleep(settle)
                if check is not None:
                    await check(sim)
        finally:
            sim._system = None


@contextmanager
def _hosted(journal: SimulatedJournal, died: Callable[[], None]) -> Iterator[None]:
    """A host's life on ``journal``: ``died()`` when it crashes; what a
    dying host raised (its writes refused, its tasks cancelled) dies with it."""
    journal.on_crash = died
    try:
        yield
    except BaseException as exc:
        if not journal.crashed or isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
    finally:
        journal.on_crash = None


async def _cluster(
    sim: Simulation,
    processes: list[ProcessDef[..., Any]],
    workload: Callable[[Simulation], Awaitable[None]],
    check: Callable[[Simulation], Awaitable[None]] | None,
    settle: float,
    plan: _random.Random,
    crashes: int,
    crash_within: int,
    lapses: int,
    options: dict[str, Any],
) -> None:
    """Several nodes on one store: each runs until the end, opening again
    after each of its crashes; the workload runs as in `registry.live`, called
    again after each crash of any node, once every node is up."""
    journals = sim.journals
    calm = journals[0].faults.quiet()
    over = trio.Event()  # the run has been checked: every node closes
    up = [trio.Event() for _ in journals]
    crashed = trio.Event()  # a node crashed in this life of the workload

    async def node(i: int) -> None:
        journal = journals[i]
        life = 0
        while not over.is_set():
            with trio.CancelScope() as host:

                def died(host: trio.CancelScope = host) -> None:
                    up[i] = trio.Event()  # (at once: the next life waits for it to open)
                    host.cancel()
                    crashed.set()

                with _hosted(journal, died):
                    try:
                        async with open_system(
                            journal,
                            processes,
                            _random.Random(f"{sim.seed}:system:{i}:{life}"),
                            now=_virtual_wall,
                            control=False,
                            node=journal.node,
                            **options,
                        ) as system:
                            sim._systems[i] = system
                            up[i].set()
                            await over.wait()
                    finally:
                        sim._systems[i] = None
            if journal.crashed:
                sim.crashes += 1
                life += 1
                await trio.sleep(plan.uniform(0.0, 2.0))  # down a while, then restarted
                journal.recover()

    async def lapsing() -> None:
        chance = _random.Random(f"{sim.seed}:lapses")  # (apart: other draws stay)
        for _ in range(lapses):
            await trio.sleep(chance.uniform(0.0, 30.0))
            journal = journals[chance.randrange(len(journals))]
            assert isinstance(journal, SimulatedNode)
            journal.lapse()
            await trio.sleep(chance.uniform(0.5, 10.0))
            journal.resume()

    async with trio.open_nursery() as nursery:
        for i in range(len(journals)):
            nursery.start_soon(node, i)
        nursery.start_soon(lapsing)
        planned = plan.randint(0, crashes)
        while True:
            for event in list(up):
                await event.wait()
            crashed = trio.Event()
            if sim.crashes < planned:
                victim = journals[plan.randrange(len(journals))]
                victim.crash_at = victim.log.commits + plan.randint(1, crash_within)
                victim.crash_after_write = plan.random() < 0.5
            with trio.CancelScope() as life:

                async def watch(life: trio.CancelScope = life) -> None:
                    await crashed.wait()
                    life.cancel()

                async with trio.open_nursery() as watching:
                    watching.start_soon(watch)
                    await workload(sim)
                    await trio.sleep(settle)
                    for journal in journals:
                        journal.crash_at = None  # the run settles without faults from here
                        journal.faults = calm
                    await trio.sleep(settle)
                    if check is not None:
                        await check(sim)
                    watching.cancel_scope.cancel()
            if not life.cancelled_caught:
                over.set()
                return
            sim.life += 1


class _Picks(trio.abc.Instrument):
    """Keeps the names of the last tasks the scheduler ran."""

    def __init__(self, keep: int) -> None:
        self.picks: deque[str] = deque(maxlen=keep)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.picks.append(task.name)


@contextmanager
def _deterministic(seed: int, root: list[trio.lowlevel.Task]) -> Iterator[None]:
    """Make a trio run (whose root task ``root`` will hold) a function of ``seed``.

    trio shuffles each batch of runnable tasks with ``trio._core._run._r``;
    with ``_ALLOW_DETERMINISTIC_SCHEDULING`` (what Hypothesis turns on) it
    sorts the batch by task creation first, so a seeded ``_r`` gives the
    same order on every run. Worker threads finish when the OS says, so
    ``trio.to_thread.run_sync`` runs its function inline in that run; and
    the runtime draws ask ids from ``uuid.uuid4``, which gives seeded values
    there. Everything is put back afterwards; other trio runs (in other
    threads) keep the real ones.
    """
    run = trio._core._run
    saved = (run._ALLOW_DETERMINISTIC_SCHEDULING, run._r.getstate())
    real_run_sync = trio.to_thread.run_sync
    real_uuid4 = _uuid.uuid4
    ids = _random.Random(f"{seed}:uuid")

    def ours() -> bool:
        return (
            trio.lowlevel.in_trio_run()
            and bool(root)
            and (trio.lowlevel.current_root_task() is root[0])
        )

    async def run_sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not ours():
            return await real_run_sync(fn, *args, **kwargs)
        await trio.lowlevel.checkpoint()
        return fn(*args)

    def uuid4() -> _uuid.UUID:
        if not ours():
            return real_uuid4()
        return _uuid.UUID(int=ids.getrandbits(128), version=4)

    setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", True)  # noqa: B010 - Final in trio's types
    run._r.seed(f"{seed}:scheduler")
    setattr(trio.to_thread, "run_sync", run_sync)  # noqa: B010 - typed otherwise in trio
    _uuid.uuid4 = uuid4
    try:
        yield
    finally:
        _uuid.uuid4 = real_uuid4
        setattr(trio.to_thread, "run_sync", real_run_sync)  # noqa: B010 - as above
        setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", saved[0])  # noqa: B010 - as above
        run._r.setstate(saved[1])
