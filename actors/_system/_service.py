"""Running a system as a service: `run_until_signalled`.

A service is stopped by its supervisor (systemd, Kubernetes, a terminal's
Ctrl-C) with SIGTERM or SIGINT. Killed without a close, the journal is as
after a crash: safe, but every step in flight counts a crash (see
`Retry.crashes`) and the next process may have to wait for the lock to
go. Here the first signal closes the system as leaving `open_system`'s
block does: the application's ``main`` is cancelled, running steps are
cancelled and recorded as cut short by a close (spending no attempt and no
crash), pending writes are drained, and the journal is released, so the
next process opens it at once. A second signal while that runs means "now":
the process exits at once, non-zero, leaving the journal as a crash would.

Invariant: the signals are caught (`trio.open_signal_receiver`) before the
system opens and until it has closed, so no SIGTERM or SIGINT in that
window kills the process without a close, and none is lost.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio

from storage import Journal

from .._kernel._process import ProcessDef
from ._facade import ActorSystem
from ._open import open_system

__all__ = ["run_until_signalled"]

_log = logging.getLogger("actors.system")

#: The signals that stop a service.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def _watch(signals: Any, stop: trio.Event, got: list[int]) -> None:
    """Set ``stop`` at the first signal; at the second, exit the process at
    once with 128 + its number (the shell's convention for a death by it)."""
    async for signum in signals:
        if not stop.is_set():
            got.append(signum)
            _log.info(
                "received %s: closing the system (another one exits at once, without closing)",
                signal.Signals(signum).name,
            )
            stop.set()
            continue
        _log.warning(
            "received %s while closing: exiting at once; the journal is left as after a crash",
            signal.Signals(signum).name,
        )
        sys.stderr.flush()
        os._exit(128 + signum)  # (no cleanup: the close it cuts short is what hung)


async def run_until_signalled(
    journal: Journal,
    processes: Iterable[ProcessDef[..., Any]] = (),
    *,
    main: Callable[[ActorSystem], Awaitable[Any]] | None = None,
    **options: Any,
) -> int:
    """Run a system on ``journal`` until SIGTERM or SIGINT, then close it.

    The system is opened as ``open_system(journal, processes, **options)``
    (recovering what an earlier run left), and ``main(system)``, if given,
    runs beside it: start instances, serve requests. The service runs on
    when ``main`` returns; if ``main`` raises, the system is closed and the
    error raised from here.

    Guarantees, at the first SIGTERM or SIGINT: ``main`` is cancelled; then
    the system closes as leaving `open_system`'s block does: running steps
    are cancelled and each attempt so cut short is recorded as such, so it
    spends neither its retry nor its crash budget, and runs again at the
    next open under the same idempotency key; what was written is made
    durable; the journal is released (its lock too), so the next process
    can open it at once. Then this returns (a program that ends there exits
    with status 0). A second signal before the close is over exits the
    process at once with status 128 + the signal's number (143 for
    SIGTERM, 130 for SIGINT), leaving the journal as a crash would: safe,
    with the steps in flight counted as cut short by a crash.

    Must run in the main thread (signals are delivered there).

    Returns:
        The number of the signal that stopped the service.

    Raises:
        JournalLocked: another process owns the journal (and whatever else
            `open_system` raises).
        Exception: whatever ``main`` raises, once the system has closed.
    """
    stop = trio.Event()
    got: list[int] = []
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as watching:
            watching.start_soon(_watch, signals, stop, got)
            failure: Exception | None = None
            try:
                async with (
                    open_system(journal, processes, **options) as system,
                    trio.open_nursery() as serving,
                ):
                    if main is not None:
                        serving.start_soon(_main, main, system)
                    await stop.wait()
                    serving.cancel_scope.cancel()
            except Exception as exc:  # (raised once the watcher is gone, below)
                failure = exc
            # Closed (or never opened): stop watching. A signal from here on
            # is the default's again (the process dies of it).
            watching.cancel_scope.cancel()
    if failure is not None:
        raise _single(failure)
    return got[0]


async def _main(main: Callable[[ActorSystem], Awaitable[Any]], system: ActorSystem) -> None:
    await main(system)


def _single(exc: Exception) -> Exception:
    """``exc``, out of the one-exception groups that trio's nurseries wrap
    an error in, so the caller catches what ``main`` or the system raised."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        inner = exc.exceptions[0]
        if not isinstance(inner, Exception):
            break
        exc = inner
    return exc
