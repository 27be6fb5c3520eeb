"""`open_system`: open a journal, recover, run the system, close."""

from __future__ import annotations

import math
import random as _random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio

from storage import Journal, LMDBJournal

from .._features._queue_state import Queue
from .._kernel._checks import check_seconds
from .._kernel._process import ProcessDef
from ..errors import InvalidArguments
from . import _clocks, _control, _recovery
from ._facade import ActorSystem

__all__ = ["open_system"]


@asynccontextmanager
async def open_system(
    journal: Journal,
    processes: Iterable[ProcessDef[..., Any]] = (),
    random: _random.Random | None = None,
    *,
    passivate_after: float = 60.0,
    max_sync_steps: int = 64,
    max_payload: int = 1 << 20,
    now: Callable[[], float] = time.time,
    node: str | None = None,
    control: bool = True,
    queues: Iterable[Queue] = (),
    compensations: Iterable[Callable[..., Any]] = (),
) -> AsyncIterator[ActorSystem]:
    """Open the journal, recover every unfinished instance, and run the system.

    Use as ``async with actors.open_system(LMDBJournal("./state"), processes=[...]) as system:``.
    Leaving the block stops the live instances without cancelling them
    (they resume on the next open), drains pending writes and closes the
    journal, so the same path can be opened again at once.

    Args:
        journal: where instances live (`storage.LMDBJournal`, `MemoryJournal`, ...).
        processes: the definitions this system runs (nothing is global).
        random: the random source for ``ctx.random()``, ``ctx.uuid()`` and
            retry jitter (seed it for reproducible tests).
        passivate_after: seconds an instance with nothing to do stays in
            memory before it is dropped (it is replayed when a message or
            timer arrives); 0 passivates at every suspension, ``math.inf``
            never.
        max_sync_steps: how many sync steps run in worker threads at once.
        max_payload: the largest encoded message payload, in bytes.
        now: the wall clock read once at open to map trio's clock onto epoch
            time (tests pass a fixed one so virtual time carries across reopens).
            A node (``node=``) reads the database's clock instead, so that
            durable timers are due on one clock across nodes; ``now`` is
            then only compared with it (a WARNING if they differ by over a
            second).
        node: this node's name, to share a journal that several nodes open
            at once (`storage.PostgresJournal`): each instance runs on one
            live node at a time, messages reach it from any node, and the
            instances of a node that dies or freezes move to the others.
        control: on an `LMDBJournal`, serve the control socket
            (``control.sock`` in its directory, owner only) through which
            the ``actors`` command line sends, cancels and resumes beside
            the running system; False serves none.
        queues: the `Queue` objects that ``start(..., queue=...)`` and
            ``ctx.call``/``spawn``/``scope(..., queue=...)`` may name.
        compensations: functions a recorded compensation may name beside
            those the process code passes as ``compensate=`` (which are
            found again after a restart by replaying the run, running
            nothing). List one the code no longer passes (taken out of the
            process, or passed only in a run before a continue-as-new); a
            renamed function matches its old name no more. The name stored in
            the journal is only compared, never imported; a name matching
            no function the system was given parks the instance
            ``compensation_stuck`` with a WARNING, and nothing runs.

    Raises:
        JournalLocked: another system has the journal open.
        InvalidArguments: an option that is not a sane number, or a
            compensation that is not a function (nothing is opened).
    """
    if passivate_after != math.inf:  # inf: never passivate
        passivate_after = check_seconds(passivate_after, "open_system(passivate_after=...)")
    for name, value in (("max_sync_steps", max_sync_steps), ("max_payload", max_payload)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArguments(
                f"open_system({name}=...) takes a whole number, 1 or more, not {value!r}"
            )
    system = ActorSystem._create(
        journal,
        processes,
        random,
        passivate_after=passivate_after,
        max_sync_steps=max_sync_steps,
        max_payload=max_payload,
        now=now,
        queues=queues,
        compensations=compensations,
    )
    if node is not None:
        journal.set_node(node)
    journal.check_shapes = True  # a record of another shape marks its instance corrupt
    journal.on_write_lost = system.stalls.write_lost
    await journal.open()
    body_error: BaseException | None = None
    try:
        await _clocks.align(system)  # before anything reads the time
        async with trio.open_nursery() as nursery:
            system.registry.nursery = system.outages.nursery = nursery
            await _recovery.recover(
                system.registry, system.corruption.record, system.lifecycle.cancel_iid
            )
            for service in system.services:  # timers, queue pumps, the scheduler
                run, what = service.run, service.what
                nursery.start_soon(system.outages.keep_running, run, what, name=f"actors: {what}")
            nursery.start_soon(system.registry.sweep_idle, name="actors idle sweep")
            nursery.start_soon(system.rides.run, name="actors deferred writes")
            if journal.shared:
                journal.on_mail(system.router.mail_noticed)
                nursery.start_soon(
                    system.outages.keep_running,
                    system.registry.take_over,
                    "the takeover scan",
                    name="actors takeover",
                )
            if control and isinstance(journal, LMDBJournal):
                _control.start(nursery, system, journal.path)
            try:
                yield system
            except BaseException as exc:
                # Re-raised below as itself, not wrapped in the nursery's
                # ExceptionGroup: the caller's own error stays catchable.
                body_error = exc
            finally:
                await system.registry.shutdown()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await journal.close()
        journal.on_write_lost = None
    if body_error is not None:
        raise body_error
