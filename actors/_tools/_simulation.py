"""What a simulated run hands its workload and check (`Simulation`) and
what it gives back (`SimulationReport`, or `SimulationHung`); the run
itself is `_simulate`'s."""

from __future__ import annotations

import random as _random
from collections.abc import Callable

import attrs
import trio
import trio.testing

from storage import (
    SimulatedJournal,
    Txn,
)

from .._system._facade import ActorSystem

__all__ = ["TEST_EPOCH", "Simulation", "SimulationHung", "SimulationReport", "virtual_wall"]


#: The wall-clock epoch that virtual time 0 maps to in `open_test_system`.
TEST_EPOCH = 1_800_000_000.0


def virtual_wall() -> float:
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
    def systems(self) -> list[ActorSystem]:
        """Every system running now (one per node that is up)."""
        return [s for s in (self._system, *self._systems) if s is not None]

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
