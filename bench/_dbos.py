"""DBOS Transact's side of the peers suite: the same shapes as ours, on
SQLite (its embedded default), each sample on a fresh database.

Imported only when the peers suite runs (``import dbos`` fails without the
``peers`` extra; `bench.peers` says which pip command installs it).

DBOS is a process-wide singleton: a sample configures it on a SQLite file
in its fresh directory, launches it, measures, and destroys it, so no DBOS
thread outlives the sample. Its log is set to WARNING so its INFO lines do
not bury the table. Its notification listener polls SQLite; its default
interval is 1 s (a ``recv`` then waits half a second on average), so the
samples set it to DBOS's documented minimum, 1 ms, to measure DBOS at its
fastest; the interval is a setting of `launched`.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dbos import DBOS, DBOSConfig

# The fastest polling DBOS allows (its default is 1.0 s): recv at its best.
POLL_SECONDS = 0.001
_TOPIC = "ping"
_STOP = -1  # the token that ends the echo workflow


@DBOS.step()
def noop(i: int) -> int:
    return i


@DBOS.workflow()
def job(steps: int) -> int:
    for i in range(steps):
        noop(i)
    return steps


class _Seen:
    """Tokens the sender waits for; the echo workflow sets each as it takes it."""

    def __init__(self) -> None:
        self.waiting: dict[int, threading.Event] = {}
        self.lock = threading.Lock()

    def expect(self, token: int) -> threading.Event:
        with self.lock:
            event = self.waiting[token] = threading.Event()
        return event

    def seen(self, token: int) -> None:
        with self.lock:
            event = self.waiting.pop(token, None)
        if event is not None:
            event.set()


_seen = _Seen()


@DBOS.workflow()
def echo() -> int:
    taken = 0
    while True:
        token = DBOS.recv(_TOPIC, timeout_seconds=60)
        if token is None or token == _STOP:
            return taken
        taken += 1
        _seen.seen(token)


@contextmanager
def launched(directory: Path, poll: float = POLL_SECONDS) -> Iterator[None]:
    """DBOS launched on a SQLite file in ``directory``; destroyed on exit."""
    config: DBOSConfig = {
        "name": "bench",
        "system_database_url": f"sqlite:///{directory / 'dbos.sqlite'}",
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": poll,
    }
    DBOS(config=config)
    try:
        DBOS.launch()
        yield
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)


def _rate(seconds: float, once: Callable[[], int]) -> float:
    """Things/s: run ``once`` (returning how many) until ``seconds`` passed; one untimed first."""
    once()
    start, done = time.perf_counter(), 0
    while True:
        done += once()
        if (now := time.perf_counter()) >= start + seconds:
            return done / (now - start)


def sequential_rate(directory: Path, seconds: float, *, steps: int) -> float:
    """Workflows/s: start one, await its result, start the next."""
    with launched(directory):

        def once() -> int:
            DBOS.start_workflow(job, steps).get_result()
            return 1

        return _rate(seconds, once)


def concurrent_rate(directory: Path, seconds: float, *, steps: int, in_flight: int) -> float:
    """Workflows/s in waves of ``in_flight`` started together, then awaited."""
    with launched(directory):

        def once() -> int:
            handles = [DBOS.start_workflow(job, steps) for _ in range(in_flight)]
            for handle in handles:
                handle.get_result()
            return in_flight

        return _rate(seconds, once)


def latency(directory: Path, seconds: float) -> dict[str, float]:
    """p50 and p99 µs from before ``DBOS.send`` until the waiting workflow has the message."""
    with launched(directory):
        handle = DBOS.start_workflow(echo)
        token, found = 0, []
        try:
            warm_until = time.perf_counter() + min(0.25, seconds / 4)
            while True:
                token += 1
                event = _seen.expect(token)
                start = time.perf_counter()
                DBOS.send(handle.workflow_id, token, _TOPIC)
                if not event.wait(30):
                    raise RuntimeError("DBOS's echo workflow took no message in 30 s")
                now = time.perf_counter()
                if start >= warm_until:
                    found.append(now - start)
                    if now >= warm_until + seconds and len(found) >= 10:
                        break
        finally:
            DBOS.send(handle.workflow_id, _STOP, _TOPIC)
            handle.get_result()  # ended before DBOS is destroyed: no thread left behind
    found.sort()
    return {
        "p50": 1e6 * statistics.median(found),
        "p99": 1e6 * found[min(len(found) - 1, int(len(found) * 0.99))],
    }
