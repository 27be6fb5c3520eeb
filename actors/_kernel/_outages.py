"""Riding out an outage of the journal (a database restart, a lost network).

Whatever meets `JournalUnavailable` in the background (an instance's task,
the timer service, the takeover scan, a read of noticed mail) waits in
`JournalWatch.back` and carries on from what was committed once the journal
answers again; calls made meanwhile raise `JournalUnavailable` to their own
callers. One probe serves every waiter: a small read, repeated with backoff
(`_PROBE_FIRST` seconds doubling to `_PROBE_MAX`), so an outage costs one
read per interval, not one per waiting instance, and work resumes within
`_PROBE_MAX` of the journal answering. Each outage is logged (logger
``actors``) when it is first met and when it ends.

`JournalWatch.keep_running` runs a background service (the timer service,
the takeover scan, the queue pumps, the scheduler) so that no "try again
later" from the journal ends the system: a lost connection (also inside
an `ExceptionGroup` of the service's own tasks) runs it again once the
journal answers; a full journal (or disk) runs it again with backoff
(`_RETRY_FIRST` doubling to `_RETRY_MAX` seconds). Each is logged once per
streak. Anything else is the service's bug and ends the system as before.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import trio

from storage import Journal
from storage.errors import JournalFull, JournalUnavailable

log = logging.getLogger("actors")

_PROBE_FIRST = 0.05  # seconds between reads that ask whether the journal is back: at first,
_PROBE_MAX = 0.5  # and at most (doubling in between)
_PROBE_IID = bytes(16)  # no instance: the probe reads an index and finds nothing
_RETRY_FIRST = 0.1  # seconds before a service the journal found full runs again: at first,
_RETRY_MAX = 30.0  # and at most (doubling in between)
_QUIET = 60.0  # seconds a service ran again without failing for its next failure to be news
_LATER = (JournalFull, JournalUnavailable)  # what the journal says to try again later


def try_later(exc: BaseException) -> JournalFull | JournalUnavailable | None:
    """``exc`` if it is the journal's "try again later" (`JournalFull`,
    `JournalDiskFull`, `JournalUnavailable`, `CommitOutcomeUnknown`); for an
    `ExceptionGroup` of nothing else, one of them (a lost connection first);
    else None."""
    if isinstance(exc, BaseExceptionGroup):
        if exc.split(_LATER)[1] is not None:
            return None  # something else failed too: that must not be hidden
        found = [later for inner in exc.exceptions if (later := try_later(inner)) is not None]
        return next((e for e in found if isinstance(e, JournalUnavailable)), found[0])
    return exc if isinstance(exc, _LATER) else None


class JournalWatch:
    """Waits, on behalf of everyone who lost the journal, for it to answer."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.nursery: trio.Nursery | None = None  # the system's, once it runs
        self._answers: trio.Event | None = None  # set when the current outage ends

    async def back(self) -> None:
        """Return once the journal answers reads again (at once if it does)."""
        answers = self._answers
        if answers is None:
            self._answers = answers = trio.Event()
            assert self.nursery is not None
            self.nursery.start_soon(self._probe, answers, name="actors journal probe")
        await answers.wait()

    async def _probe(self, answers: trio.Event) -> None:
        began = trio.current_time()
        delay, failed = _PROBE_FIRST, 0
        while True:
            try:
                await self.journal.read(lambda r: r.instance(_PROBE_IID))
                break
            except JournalUnavailable as exc:
                failed += 1
                if failed == 1:
                    log.warning("the journal does not answer (%s); retrying with backoff", exc)
            await trio.sleep(delay)
            delay = min(2 * delay, _PROBE_MAX)
        if failed:
            log.warning(
                "the journal answers again after %.1f s; work resumes",
                trio.current_time() - began,
            )
        self._answers = None
        answers.set()

    async def keep_running(self, task: Callable[[], Any], what: str) -> None:
        """Run a background task, and again after each outage of the journal
        or while the journal is full (see the module docstring)."""
        delay = _RETRY_FIRST
        restarted = -math.inf  # when it last ran again after a failure
        while True:
            try:
                await task()
                return
            except Exception as exc:  # noqa: BLE001 (what is not the journal's is raised again)
                later = try_later(exc)
                if later is None:
                    raise
            if trio.current_time() - restarted > _QUIET:  # news: the backoff starts over
                delay = _RETRY_FIRST
                if isinstance(later, JournalUnavailable):
                    log.warning(
                        "%s lost the journal (%s); it resumes once the journal answers",
                        what,
                        later,
                    )
                else:
                    log.warning(
                        "%s cannot write to the journal (%s: %s); it runs again with backoff",
                        what,
                        type(later).__name__,
                        later,
                    )
            if isinstance(later, JournalUnavailable):
                await trio.sleep(_PROBE_FIRST)
                await self.back()
            else:
                await trio.sleep(delay)
                delay = min(2 * delay, _RETRY_MAX)
            restarted = trio.current_time()
