"""One seed, end to end: draw its configuration, run it, judge it."""

from __future__ import annotations

import logging
import random
import traceback
from collections import deque

import attrs

from actors.testing import JournalFaults, Simulation, SimulationReport, simulate

from . import processes as p
from .checks import check
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

    def __str__(self) -> str:
        return (
            f"faults={self.profile} durability={self.durability} "
            f"passivate_after={self.passivate_after} crashes<={self.crashes} "
            f"fail_rate={self.fail_rate}"
        )


def setup(seed: int) -> Setup:
    """The configuration seed ``seed`` runs with."""
    rng = random.Random(f"{seed}:setup")
    return Setup(
        profile=rng.choice(list(PROFILES)),
        durability=rng.choice(["sync", "sync", "sync", "async"]),
        passivate_after=rng.choice([0.0, 0.5, 60.0]),
        crashes=rng.choice([0, 1, 2, 3]),
        fail_rate=rng.choice([0.0, 0.1, 0.3]),
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


def run_seed(seed: int, *, nodes: int = 1, keep: int = 40) -> Outcome:
    """Run seed ``seed`` and judge it (see the package docstring)."""
    chosen = setup(seed)
    world = World(seed, fail_rate=chosen.fail_rate, durability=chosen.durability)
    sinks, ops = plan(random.Random(f"{seed}:plan"))
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
        report = simulate(
            p.PROCESSES, driver, seed=seed, crashes=chosen.crashes,
            faults=PROFILES[chosen.profile], durability=chosen.durability,
            check=judge, queues=[p.QUEUE], passivate_after=chosen.passivate_after, settle=SETTLE,
            trace=keep, crash_within=CRASH_WITHIN, nodes=nodes,
        )  # fmt: skip
    finally:
        install(None)
        for logger, (propagate, level) in zip(loggers, saved):
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


__all__ = ["PROFILES", "Outcome", "Setup", "run_seed", "setup"]
