"""Trying a batch again, and deciding a commit whose answer was lost.

A journal whose commits cross a network (PostgreSQL's) can fail a batch
three ways, which its attempt tells `run_attempts` by what it raises:

- `Retry`: nothing was committed and the batch may simply run again (a
  deadlock, a serialization failure, a connection lost before COMMIT);
- `Refused`: nothing was committed and running it again would fail the
  same (a bug, a statement no retry fixes): every caller learns why;
- `InDoubt`: COMMIT was sent and its answer lost, so the batch may or may
  not be written. The journal's `InDoubtPolicy` decides: committed (the
  outcomes stand), not committed (it runs again), or nobody can tell
  (every caller learns `InDoubtPolicy.unknown`, typically
  `CommitOutcomeUnknown`).

Invariant: a batch whose commit may have been written is never run again;
only one the policy says was not written is. A journal whose commit is
local (LMDB: a failed commit aborts, nothing of it written) is never in
doubt and needs none of this.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["InDoubt", "InDoubtPolicy", "Refused", "Retry", "run_attempts"]


class Retry(Exception):
    """Nothing of the batch was committed; it may run again. ``failure``
    is what its callers learn if no try is left."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(failure)
        self.failure = failure


class Refused(Exception):
    """Nothing of the batch was committed, and another try would fail the
    same: every caller learns ``failure``."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(failure)
        self.failure = failure


class InDoubt(Exception):
    """The commit was sent and its answer lost. ``failure``: why (what the
    callers learn if it was not written and no try is left); ``cause``: the
    error that lost it; ``outcomes``: what the callers learn if it was
    written; ``attempt``: whatever the policy needs to find out."""

    def __init__(
        self, failure: BaseException, cause: BaseException, outcomes: list[Any], attempt: Any
    ) -> None:
        super().__init__(failure)
        self.failure = failure
        self.cause = cause
        self.outcomes = outcomes
        self.attempt = attempt


@attrs.frozen
class InDoubtPolicy:
    """How a journal decides a commit in doubt.

    ``resolve(doubt)``: True if it was written, False if not (then it runs
    again), None if that cannot be learned; ``unknown(doubt)``: what every
    caller learns then.
    """

    resolve: Callable[[InDoubt], bool | None]
    unknown: Callable[[InDoubt], BaseException]


def _pause(attempt: int) -> None:
    """Back off before try ``attempt`` (1, 2, ...): doubling, with jitter so
    that nodes that collided do not collide again."""
    time.sleep(min(0.02 * 2**attempt, 1.0) * random.uniform(0.5, 1.0))


def run_attempts(
    attempt: Callable[[], list[Any]],
    count: int,
    *,
    attempts: int,
    in_doubt: InDoubtPolicy,
    pause: Callable[[int], None] = _pause,
) -> list[Any]:
    """The outcomes of a batch of ``count`` transactions: ``attempt()``'s,
    tried up to ``attempts`` times as the module docstring says, or one
    failure for every transaction. Never raises what an attempt signals."""
    failure: BaseException | None = None
    for n in range(attempts):
        if n:
            pause(n)
        try:
            return attempt()
        except Retry as exc:
            failure = exc.failure
        except Refused as exc:
            failure = exc.failure
            break
        except InDoubt as doubt:
            # Invariant: a batch whose commit may have been written is never
            # run again; only one the policy says was not written is.
            committed = in_doubt.resolve(doubt)
            if committed:
                return doubt.outcomes
            if committed is None:
                failure = in_doubt.unknown(doubt)
                break
            failure = doubt.failure  # rolled back: it runs again
    assert failure is not None, "attempts must be at least 1"
    return [failure] * count
