"""What can go wrong in a `SimulatedJournal`: the faults it draws per batch
(`JournalFaults`, their chances and durations) and the host's crash
(`HostCrashed`). See `storage._simulated` for what each fault does.
"""

from __future__ import annotations

import attrs

from .errors import JournalClosed

__all__ = ["HostCrashed", "JournalFaults"]


class HostCrashed(JournalClosed):
    """The simulated host crashed: what was not committed is gone, and the
    journal writes nothing more until `SimulatedJournal.recover`."""


@attrs.frozen
class JournalFaults:
    """How a `SimulatedJournal` commits and how often it fails.

    ``latency`` is the mean of a commit's duration in seconds (drawn from
    an exponential distribution); the others are the chances per batch of
    each fault in the module docstring, with the durations of a slow commit
    and of an outage drawn uniformly from their ranges. ``split`` is the
    chance that a batch takes only part of the transactions waiting.
    ``late`` is the chance that a batch's callers hear of its outcome only
    with the next batch's (or once the committer has nothing else to do),
    while readers see it at once: LMDB's writer thread tells trio of a
    commit after it is visible, and tasks that read it may act first.
    """

    latency: float = 0.0002
    slow: float = 0.0
    slow_seconds: tuple[float, float] = (0.2, 3.0)
    full: float = 0.0
    disk: float = 0.0
    unavailable: float = 0.0
    unknown: float = 0.0
    outage: float = 0.0
    outage_seconds: tuple[float, float] = (0.1, 2.0)
    split: float = 0.2
    late: float = 0.0

    def quiet(self) -> JournalFaults:
        """The same timing with no faults: for settling after a run."""
        return attrs.evolve(self, full=0.0, disk=0.0, unavailable=0.0, unknown=0.0, outage=0.0)
