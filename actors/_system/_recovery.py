"""Recovery at open: what the journal holds is brought back to running.

Every live instance of a registered process with work to do is activated;
children whose parent ended meanwhile are cancelled; instances of processes
this system does not register are marked held (on a local journal); records
that do not decode mark their instance corrupt and keep the rest going.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from storage import LIVE_STATUSES, CorruptRecord, InstanceRow, Txn, instance_id
from storage.errors import Conflict, JournalCorrupt, JournalFull, JournalUnavailable

from .._kernel import _reports
from ._registry import YIELD_EVERY, Registry

__all__ = ["recover"]

log = logging.getLogger("actors")

STUCK_NAMED = 20  # instances of one unregistered process named at open; then a count
HOLD_BATCH = 2_000  # writes per transaction marking instances stuck at open


async def recover(
    registry: Registry,
    record_corrupt: Callable[[bytes, JournalCorrupt], Awaitable[None]],
    cancel_iid: Callable[[bytes, str, str], Awaitable[bool]],
) -> None:
    """Bring back what the journal holds (see the module docstring):
    ``record_corrupt`` (`Corruption.record`) marks an instance whose
    records do not decode, ``cancel_iid`` (`Lifecycle.cancel_iid`) cancels
    a child whose parent ended."""
    procs = registry.procs
    # On a shared journal another node may run what this one does not register.
    local = not registry.journal.shared

    def scan(r: Any) -> _Found:
        found = _Found()
        # One bad record must not keep the system (and every other
        # instance) down: the scan goes past each and reports it here.
        broken = found.broken
        # (Queued ones too: a queued child whose parent ended is cancelled,
        # not started later; the rest wait for their queue's pump.)
        for status in sorted(LIVE_STATUSES | {"queued"}):
            for row in r.instances(status, corrupt=broken):
                parent = row.record.parent
                gone = _parent_gone(r, parent) if parent else None
                if gone is not None:
                    found.orphans.append((row.iid, row.address, f"parent {parent} {gone}"))
                    continue
                if status in LIVE_STATUSES:
                    if local and row.process not in procs:
                        found.unregistered.append(row)
                        continue
                    found.live.add(row.iid)
                held = row.record.held
                if status == "running" or row.record.last_error or held:
                    found.wanted[row.iid] = held
        for iid in r.instances_with_mail():
            found.wanted.setdefault(iid, None)
        return found

    found = await registry.journal.read(scan)
    for bad in found.broken:
        _reports.corrupt(bad.address or bad.iid.hex(), bad.error, at_open=True)
        await record_corrupt(bad.iid, bad.error)
    # A child whose parent ended while the system was down is not stranded.
    for iid, address, reason in found.orphans:
        try:
            await cancel_iid(iid, address, reason)
        except (JournalFull, JournalUnavailable) as exc:
            # Never fail the open for it: tried again in the background,
            # with backoff, until the journal takes it.
            log.error("could not cancel %r yet (%s): %s; trying again", address, reason, exc)
            registry.spawn_system_task(cancel_iid, iid, address, reason)
    await _hold_unregistered(registry, found.unregistered)
    # Stuck as an earlier run recorded (held by this system's own
    # processes): replayed on this code all the same, each warning again
    # if it is still stuck (see Ends.diverge).
    stuck = Counter(
        _reports.held_kind(held)
        for held in found.wanted.values()
        if held and _reports.held_kind(held) != _reports.UNREGISTERED
    )
    stuck[_reports.UNREGISTERED] += len(found.unregistered)
    recorded_stuck = sum(stuck.values()) - len(found.unregistered)
    resumed = sum(iid in found.live for iid in found.wanted) - recorded_stuck
    _reports.opened(
        registry.journal,
        resumed=resumed,
        stuck=stuck,
        orphans=len(found.orphans),
        corrupt=len(found.broken),
    )
    for n, iid in enumerate(found.wanted, 1):
        registry.activate(iid)
        if n % YIELD_EVERY == 0:
            await trio.lowlevel.checkpoint()  # let the first ones start running


async def _hold_unregistered(registry: Registry, rows: list[InstanceRow]) -> None:
    """Say that the instances of ``rows`` cannot run here (their process
    is not registered), and record it (``held``, ``last_error``) for
    `list`, `show` and handles; a system that registers the process
    clears it when it runs them (see `_activation._load`)."""
    named: Counter[str] = Counter()
    txn = Txn()
    for row in rows:
        registry.foreign.add(row.iid)
        named[row.process] += 1
        if named[row.process] <= STUCK_NAMED:
            _reports.unregistered(row.address, row.process)
        held = _reports.held_unregistered(row.process)
        if row.record.held == held:
            continue  # recorded at an earlier open
        record = row.record.evolve(
            held=held, last_error=_reports.unregistered_fix(row.address, row.process)
        )
        txn.require(row.iid, LIVE_STATUSES)
        txn.put_instance(
            row.iid,
            address=row.address,
            process=row.process,
            status=row.status,
            record=record,
        )
        if len(txn.ops) >= HOLD_BATCH:
            await _commit_held(registry, txn)
            txn = Txn()
    for process, count in named.items():
        if count > STUCK_NAMED:
            _reports.unregistered_more(process, count - STUCK_NAMED)
    if txn.ops:
        await _commit_held(registry, txn)


async def _commit_held(registry: Registry, txn: Txn) -> None:
    try:
        await registry.journal.commit(txn)
    except (Conflict, JournalFull) as exc:
        # The marks only inform list, show and handles (the warnings are
        # out); the next open writes them again.
        log.error("could not record which instances are stuck: %s", exc)


@attrs.define
class _Found:
    """What recovery's scan of the journal found."""

    #: instances to activate, with the ``held`` each was recorded with (None: not stuck)
    wanted: dict[bytes, str | None] = attrs.Factory(dict)
    #: the live instances among those of registered processes
    live: set[bytes] = attrs.Factory(set)
    #: live instances of processes this system does not register (local journals)
    unregistered: list[InstanceRow] = attrs.Factory(list)
    #: (iid, address, why) of children whose parent ended
    orphans: list[tuple[bytes, str, str]] = attrs.Factory(list)
    broken: list[CorruptRecord] = attrs.Factory(list)


def _parent_gone(r: Any, parent: str) -> str | None:
    """How a child's parent is no longer live ("is gone", "completed", ...),
    or None if it is live. A parent whose record does not decode decides
    nothing: it is marked corrupt when something addresses it."""
    try:
        found = r.instance(instance_id(parent))
    except JournalCorrupt:
        return None
    if found is None:
        return "is gone"
    return None if found.status in LIVE_STATUSES else found.status
