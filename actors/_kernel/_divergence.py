"""The `NonDeterminismError`s of a replay: the code does not match the log.

Each names the instance, the position and what differs, and says what to do;
the instance stays suspended until then.
"""

from __future__ import annotations

from typing import Any

from ..errors import NonDeterminismError
from ._differs import differs
from ._effects import Effect
from ._log import LogEntry

__all__ = ["mismatch", "unconsumed", "unwritten"]


def mismatch(address: str, effect: Effect[Any], entry: LogEntry) -> NonDeterminismError:
    """The error of ``effect`` where the log holds another effect, ``entry``."""
    return NonDeterminismError(
        f"instance {address!r} replayed a different effect at position "
        f"{effect.seq}: {differs(entry, effect)}. The code changed in a way that does not "
        "match this instance's history: deploy code that makes the same effects "
        "in the same order (add new effects after the existing ones), or cancel "
        "the instance. It stays suspended until then.",
        address=address,
        position=effect.seq,
        expected=entry.identity(),
        found=effect.describe().identity(),
    )


def unwritten(address: str, effect: Effect[Any], entry: LogEntry) -> NonDeterminismError:
    """The error of a started record at ``effect``'s position, of a kind
    that logs its outcome only (`Effect.logs_start` False)."""
    # A started record of a kind that logs its outcome only: no run of
    # the runtime wrote this log (an import of a damaged history, or
    # one exported by a version that dropped outcomes of None). Run
    # live, the effect would repeat what the history says it did, so
    # the instance is held as for changed code, not run.
    return NonDeterminismError(
        f"instance {address!r} cannot be replayed: its log holds {entry.show()} "
        f"at position {effect.seq} with no outcome, and a {effect.kind} logs only its "
        "outcome, so the runtime never wrote this log (a history imported from a damaged "
        "file, or one exported by a version that left out outcomes of None). Export it "
        "again from the journal it ran in and import that with --replace, or cancel the "
        "instance. It stays suspended until then.",
        address=address,
        position=effect.seq,
        expected=entry.identity(),
        found=effect.describe().identity(),
    )


def unconsumed(address: str, log: dict[int, LogEntry], seq: int) -> NonDeterminismError | None:
    """The error of a log that goes on past ``seq``, the last effect run; None if it does not."""
    # (No comprehension: every run's end asks, and a log that ends at ``seq``
    # answers with no frame of its own.)
    if not log or max(log) <= seq:
        return None
    extra = [each for each in log if each > seq]
    entry = log[min(extra)]
    return NonDeterminismError(
        f"instance {address!r} finished replaying at position {seq}, but "
        f"its log goes on with {entry.show()} at position {min(extra)}: the code "
        "now skips effects its history made; deploy code that matches the "
        "history, or cancel the instance. It stays suspended until then.",
        address=address,
        position=min(extra),
        expected=entry.identity(),
        found=None,
    )
