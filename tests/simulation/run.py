"""One seed, end to end: draw its configuration, run it, judge it."""

from __future__ import annotations

import logging
import random
import traceback
from collections import deque

import attrs

from actors.testing import JournalFaults, Simulation, SimulationHung, SimulationReport, simulate

from . import processes as p
from .checks import check
from .plants import from_environment, planted
from .signals import PROCESSES_9
from .workload import Driver, plan
from .world import InvariantBroken, World, install

#: The fault profiles a seed picks from (probabilities per commit).
PROFILES = {
    "calm": JournalFaults(),
    "slow": JournalFaults(slow=0.03, split=0.5),
    "full": JournalFaults(slow=0.01, full=0.02, disk=0.01),
    "lost": JournalFaults(unavailable=0.01, unknown=0.01, outage=0.004),
    "rough": JournalFaults(
        slow=0.02, full=0.01, disk=0.005, unavailable=0.01, unknown=0.01, outage=0.003, split=0.4
    ),
}


#: Virtual seconds to settle, twice (faults on, then off): past every timer
#: the workload sets (an hour at most) and every retry's backoff.
SETTLE = 4000.0
#: Virtual seconds a run may take in all (they take SETTLE twice and a
#: few minutes of workload): past them it fails as ``hung``.
LIMIT = 50_000.0
#: A crash falls within this many commits of a life's start (runs make a
#: few hundred), so most planned crashes happen.
CRASH_WITHIN = 150


@attrs.frozen
class Setup:
    """What a seed chose besides the workload."""

    profile: str
    durability: str
    passivate_after: float
    crashes: int
    fail_rate: float
    late: float  # JournalFaults.late: callers told of a commit after readers see it
    lapses: int  # leases that lapse while their node runs on (several nodes)

    def __str__(self) -> str:
        return (
            f"faults={self.profile} durability={self.durability} "
            f"passivate_after={self.passivate_after} crashes<={self.crashes} "
            f"fail_rate={self.fail_rate} late={self.late} lapses={self.lapses}"
        )


#: The workload's version. A kept seed replays the run it was kept for
#: only under the workload it was found with, so what later versions add
#: is drawn apart and left out of earlier ones:
#: 1. the plan, faults and checks as up to December 2;
#: 2. late commit notices (`JournalFaults.late`) and a tail of operations
#:    after the plan (a start raced by sends to it: the creation race);
#: 3. with several nodes, leases that lapse while their node runs on;
#: 4. streams with durable consumers, exports with watchers, a schedule;
#: 5. starts on a queue with a rate limit (the ``rate-limit`` invariant);
#: 6. cleanups of finished instances, and jobs started again after them;
#: 7. mail to queued instances as the queue admits them (``qbox``).
#: 8. an operator's calls among the clients': mail, drop_message, retry,
#:    fork, join, cleanup (`operators`).
#: 9. (opt-in, `LATEST`) signals routed by identity, with listeners that
#:    start and end around them (`signals`).
WORKLOAD = 8
#: The newest version that may be asked for (``--workload V``); a version
#: past `WORKLOAD` is opt-in until it has been swept and found nothing.
LATEST = 9


def setup(seed: int, workload: int = WORKLOAD) -> Setup:
    """The configuration seed ``seed`` runs with."""
    rng = random.Random(f"{seed}:setup")
    return Setup(
        profile=rng.choice(list(PROFILES)),
        durability=rng.choice(["sync", "sync", "sync", "async"]),
        passivate_after=rng.choice([0.0, 0.5, 60.0]),
        crashes=rng.choice([0, 1, 2, 3]),
        fail_rate=rng.choice([0.0, 0.1, 0.3]),
        # (Drawn apart, added later: the draws above stay what they were.)
        late=random.Random(f"{seed}:late").choice([0.0, 0.0, 0.3]) if workload >= 2 else 0.0,
        lapses=random.Random(f"{seed}:lapses").randint(0, 2) if workload >= 3 else 0,
    )


@attrs.frozen
class Outcome:
    """How a seed went: ``invariant`` is None when every invariant held."""

    seed: int
    setup: Setup
    report: SimulationReport
    invariant: str | None
    detail: str
    events: tuple[str, ...]
    logs: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.invariant is None

    def line(self) -> str:
        """The seed's verdict: ``seed N ok <digest>`` or ``seed N FAILED <invariant>``."""
        if self.ok:
            return f"seed {self.seed} ok {self.report.digest}"
        return f"seed {self.seed} FAILED {self.invariant}"

    def explain(self) -> str:
        """What failed, with the trace of the run that led there."""
        lines = [f"seed {self.seed}: {self.setup}", f"{self.invariant}: {self.detail}"]
        lines.append(self.report.explain())
        if self.logs:
            lines.append("last runtime log records:")
            lines += [f"  {line}" for line in self.logs]
        return "\n".join(lines)


class _Keep(logging.Handler):
    """Keeps the runtime's last log records for the trace, instead of
    printing them (a run under faults logs plenty, by design)."""

    def __init__(self, keep: int) -> None:
        super().__init__(logging.INFO)
        self.records: deque[str] = deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.levelname} {record.name}: {record.getMessage()[:300]}")


def run_seed(seed: int, *, nodes: int = 1, keep: int = 40, workload: int = WORKLOAD) -> Outcome:
    """Run seed ``seed`` (under version ``workload`` of the workload) and
    judge it (see the package docstring)."""
    chosen = setup(seed, workload)
    rated = workload >= 5
    world = World(
        seed,
        fail_rate=chosen.fail_rate,
        durability=chosen.durability,
        processes=p.PROCESSES
        + (p.PROCESSES_5 if rated else [])
        + (p.PROCESSES_7 if workload >= 7 else [])
        + (p.PROCESSES_8 if workload >= 8 else [])
        + (PROCESSES_9 if workload >= 9 else []),
        rated=p.RATED.name if rated else None,
    )
    sinks, ops = plan(
        random.Random(f"{seed}:plan"),
        tail=workload >= 2,
        features=workload >= 4,
        rated=rated,
        cleanups=workload >= 6,
        queued_mail=workload >= 7,
        operators=workload >= 8,
        signals=workload >= 9,
    )
    driver = Driver(world, sinks, ops)

    async def judge(sim: Simulation) -> None:
        await check(world, sim)

    kept = _Keep(keep)
    loggers = [logging.getLogger(name) for name in ("actors", "storage")]
    saved: list[tuple[bool, int]] = []
    for logger in loggers:
        saved.append((logger.propagate, logger.level))
        logger.addHandler(kept)
        logger.propagate = False
        logger.setLevel(logging.INFO)
    install(world)
    try:
        with planted(from_environment()):
            report = simulate(
                world.processes,
                driver,
                seed=seed,
                crashes=chosen.crashes,
                faults=attrs.evolve(PROFILES[chosen.profile], late=chosen.late),
                durability=chosen.durability,
                check=judge,
                queues=[p.QUEUE, p.RATED] if rated else [p.QUEUE],
                passivate_after=chosen.passivate_after,
                settle=SETTLE,
                trace=keep,
                crash_within=CRASH_WITHIN,
                nodes=nodes,
                lapses=chosen.lapses,
                limit=LIMIT,
            )
    finally:
        install(None)
        for logger, (propagate, level) in zip(loggers, saved, strict=True):
            logger.removeHandler(kept)
            logger.propagate = propagate
            logger.setLevel(level)
    invariant, detail = _verdict(report.failure)
    return Outcome(
        seed, chosen, report, invariant, detail, tuple(world.events[-20:]), tuple(kept.records)
    )


def _verdict(failure: BaseException | None) -> tuple[str | None, str]:
    if failure is None:
        return None, ""
    broken = _find(failure)
    if broken is not None:
        return broken.name, broken.detail
    text = "".join(traceback.format_exception(failure))
    inner = _innermost(failure)
    if isinstance(inner, SimulationHung):
        return "hung", str(inner)
    return f"runtime-error:{type(inner).__name__}", f"{inner!r}\n{text}"


def _innermost(exc: BaseException) -> BaseException:
    """The first error in a group (in groups), else ``exc``."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _find(exc: BaseException) -> InvariantBroken | None:
    if isinstance(exc, InvariantBroken):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner)
            if found is not None:
                return found
    return None


__all__ = ["LATEST", "PROFILES", "WORKLOAD", "Outcome", "Setup", "run_seed", "setup"]
