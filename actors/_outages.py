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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from storage import Journal
from storage.errors import JournalUnavailable

log = logging.getLogger("actors")

_PROBE_FIRST = 0.05  # seconds between reads that ask whether the journal is back: at first,
_PROBE_MAX = 0.5  # and at most (doubling in between)
_PROBE_IID = bytes(16)  # no instance: the probe reads an index and finds nothing


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
            )  # fmt: skip
        self._answers = None
        answers.set()

    async def keep_running(self, task: Callable[[], Any], what: str) -> None:
        """Run a background task, and again after each outage of the journal."""
        while True:
            try:
                await task()
                return
            except JournalUnavailable as exc:
                log.warning(
                    "%s lost the journal (%s); it resumes once the journal answers", what, exc
                )
            await trio.sleep(_PROBE_FIRST)
            await self.back()
