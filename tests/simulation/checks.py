"""The invariants, checked once the run has settled (no faults for a while).

Each failure is an `InvariantBroken` named by the first word of its line:

- ``acked-lost``: a message whose send was acknowledged (an ask that timed
  out counts: it was stored first) was never handled;
- ``handled-twice``: a message handled under two idempotency keys (a step
  run again under its own key is the documented at-least-once; two keys
  means the message was taken twice);
- ``sent-lost``: a completed job's durable ``ctx.send`` never arrived;
- ``sent-twice``: an unkeyed ``ctx.send`` whose message was written more
  often than its sender's log records send effects that stored one (a
  message no effect accounts for: a replay that sent it again), or
  ``sent-lost``, less often: each send effect delivers exactly once
  (both counted from the transactions written: `World.sends`);
- ``start-lost``: an acknowledged start with no instance in the journal
  (and none a cleanup removed: workload 6);
- ``stuck``: an instance that is neither ended nor waiting for something
  that can still happen (a job still live after settling, a sink with
  unread mail, anything corrupt or stuck in compensation; workload 7: a
  ``qbox`` whose message was acknowledged and that did not complete with it);
- ``orphan``: a live instance whose parent has ended (cascade);
- ``ran-after-cancel``: a step of an instance, or of one of its
  descendants, that began after a client's cancel of it returned (a cancel
  wins over a restart, and cascades before it answers);
- ``result-changed``: a completed result that differs from one seen before;
- ``key-reused``: one idempotency key used for two different pieces of work;
- ``attempt-repeated``: one attempt of one step run twice (the attempt's
  start is durable before its side effect runs);
- ``attempts-exceeded``: a step run more often than its budgets allow: its
  attempts that raise (``RETRY.attempts``), those a crash or a lost lease
  cut short (``RETRY.crashes``; each runs again), and those a close cut
  short (at most one per life of the host it ran in, besides the last);
  (neither is checked with durability "async", which may lose the record of
  an attempt, so that a replayed step runs again: README's guarantees)

With durability "async", a run in which the journal lost a write it had
acknowledged (a crash in the window, or a commit that failed after the
acknowledgment: `Simulation.lost_unawaited`) is judged as the
guarantees allow: the lost write's instance was loaded again from what was
committed, so an acknowledged start may be gone, a take may be taken again
(``handled-twice``) and a result may change; nothing may be stuck.
- ``two-incarnations``: a step of an older incarnation of an address ran
  after a newer incarnation's step had run;
- ``saga``: a job that failed on purpose without its compensation run, or a
  completed one whose compensation ran;
- ``queue-limit``: more queued instances running at once than the queue allows;
- ``rate-limit`` (workload 5): more admissions of the rated queue within one
  window than its rate allows (read from the transactions written);
- ``replay``: a stored history that the current code does not replay;
- ``cursor``: a durable consumer got a value out of order, skipped one, or
  was given one before where its last read that left normally stopped;
- ``tick-doubled``: a schedule's tick started more than once;
- ``exports-backwards``: a watcher saw a feed's progress go back (it sees
  exports only once durable);
- ``stale-write`` (several nodes): a node wrote to an instance another node
  owned, with no claim of its own (as a node whose lease lapsed could).
- ``stale-log``: a node's cache of decoded logs (`storage._log_cache`) would
  answer a wake with a log other than the one its journal holds now (one
  that another node, a retry or the run itself changed since it was kept).

Workload 8 adds the invariants of an operator's calls (`operators`):
``dropped-taken``, ``drop-refused``, ``retry-lost-mail``,
``fork-copied-mail``, ``cleanup-removed-child``, ``completed-cancelled``.
Workload 9 adds those of signals routed by identity (`signals`):
``signal-missed``, ``signal-stray``, ``signal-twice``, ``signal-count``.

A run that goes past `run.LIMIT` virtual seconds fails as ``hung`` (a
workload call that never returns: a lost wake-up the end checks cannot see).
Two more are checked while the run goes (`workload`): ``ask-reply`` (an
ask answered with another message's reply) and ``error-group`` (a public
call that raised an ``ExceptionGroup`` of the runtime's errors rather than
the error). And ``runtime-error:<type>`` (`run`) is an error that escaped
the runtime and ended the system, outside a crash.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from typing import Any

from actors.testing import TEST_EPOCH, Simulation, replay_check
from storage import instance_id

from . import operators, processes as p, signals
from .world import Run, World

_ENDED = {"completed", "failed", "cancelled"}
#: Virtual seconds since its last recorded change within which a live
#: instance is at work, not stuck: a schedule ticks on while the run
#: settles, so a tick can start just before the check, its step retrying
#: (RETRY backs off for 16 s at most) on a retry timer the journal does not
#: hold. Stuck instances are still for thousands of seconds.
_AT_WORK = 60.0


async def check(world: World, sim: Simulation) -> None:
    """Raise `InvariantBroken` for the first invariant that does not hold."""
    timers: dict[str, list[float]] = {}

    def scan(r: Any) -> dict[str, tuple[Any, list[Any]]]:
        rows = {}
        for row in r.instances():
            live = row.status not in _ENDED
            rows[row.address] = (row, r.mailbox(row.iid) if live else [])
            if live:
                timers[row.address] = [t.due - TEST_EPOCH for t in r.timers(row.iid)]
        return rows

    if sim.stale_writes:
        world.fail("stale-write", f"{len(sim.stale_writes)}: {sim.stale_writes[0]}")
    rows = await sim.journal.read(scan)
    lossy = world.lossy(sim)
    _check_ledger(world)
    _check_messages(world, rows, lossy)
    if not lossy:
        _check_sends(world)
        await operators.check(world, sim, rows)
        signals.check(world.signalled, world.fail)
    _check_instances(world, rows, timers, lossy)
    if not lossy:
        _check_cancels(world, rows)
        _check_streams(world)
        if world.backwards:
            world.fail("exports-backwards", world.backwards[0])
    _check_ticks(world, rows)
    if world.queue_most > (p.QUEUE.concurrency or 0):
        detail = f"{world.queue_most} ran at once; the queue allows {p.QUEUE.concurrency}"
        world.fail("queue-limit", detail)
    _check_rate(world)
    await _check_log_caches(world, sim)
    problems = await replay_check(sim.journal, world.processes, include_finished=True)
    if problems:
        world.fail("replay", "; ".join(str(problem) for problem in problems[:3]))


def _check_ledger(world: World) -> None:
    work_of_key: dict[str, tuple[str, str]] = {}
    attempts: set[tuple[str, int]] = set()
    newest: dict[str, int] = {}
    lives: dict[str, set[int]] = defaultdict(set)  # key -> the lives it ran in
    for run in world.ledger:
        lives[run.key].add(run.life)
    for run in world.ledger:
        work = (run.tag, run.ident)
        seen = work_of_key.setdefault(run.key, work)
        if seen != work:
            world.fail("key-reused", f"key {run.key} served {seen} and {work}")
        durable = world.durability == "sync"
        if durable and (run.key, run.attempt) in attempts:
            world.fail("attempt-repeated", f"attempt {run.attempt} of {run.key} ran twice")
        attempts.add((run.key, run.attempt))
        # Exceptions, crashes and closes each have a budget: the last attempt
        # (a success, or the failure that ends the step) comes on top.
        budget = p.RETRY.attempts + p.RETRY.crashes + len(lives[run.key])
        if durable and run.attempt > budget:
            detail = (
                f"{run.key} ran attempt {run.attempt}; its budgets allow {budget} "
                f"({p.RETRY.attempts} raising, {p.RETRY.crashes} cut short by crashes, one "
                f"cut short by closing in each of the {len(lives[run.key])} lives it ran in)"
            )
            world.fail("attempts-exceeded", detail)
        address, before = run.address, newest.get(run.address, 0)
        if run.incarnation < before:
            detail = f"{address} ran {run.key} after a step of incarnation {before} had run"
            world.fail("two-incarnations", detail)
        newest[address] = max(before, run.incarnation)


def _check_messages(world: World, rows: dict[str, tuple[Any, list[Any]]], lossy: bool) -> None:
    keys: dict[str, set[str]] = defaultdict(set)
    for run in world.ledger:
        if run.tag == "W":
            keys[run.ident].add(run.key)
    for message, handled in sorted(keys.items()):
        if len(handled) > 1 and not lossy:
            world.fail("handled-twice", f"message {message} handled under {sorted(handled)}")
    for message, address in sorted(world.acked.items()):
        if message not in keys:
            detail = f"message {message} to {address} was acknowledged and never handled"
            world.fail("acked-lost", detail)
    for address in sorted(world.plans):
        found = rows.get(address)
        if found is None or found[0].status != "completed":
            continue
        plan = found[0].record.input["plan"]  # (the incarnation's own)
        if not plan["send"]:
            continue
        receiver, message = plan["send"]
        if found[0].record.result.get("sent") and message not in keys:
            detail = f"{address} completed having sent {message} to {receiver}, never handled"
            world.fail("sent-lost", detail)


def _check_sends(world: World) -> None:
    for sender, delivered in sorted(world.deliveries.items()):
        effects = world.sent_by(sender)
        if delivered == effects:
            continue
        detail = (
            f"{sender}'s ctx.send wrote {delivered} message(s); its log records "
            f"{effects} send effect(s) that stored one"
        )
        world.fail("sent-twice" if delivered > effects else "sent-lost", detail)


def _check_instances(
    world: World,
    rows: dict[str, tuple[Any, list[Any]]],
    timers: dict[str, list[float]],
    lossy: bool,
) -> None:
    for address in sorted(world.started):
        if address not in rows and instance_id(address) not in world.removed and not lossy:
            detail = f"the start of {address} was acknowledged; no instance is there"
            world.fail("start-lost", detail)
    undone = {run.address for run in world.ledger if run.tag == "U"}
    ran_a = {run.ident for run in world.ledger if run.tag == "A"}
    for address, (row, mail) in sorted(rows.items()):
        status, record = row.status, row.record
        if status in ("corrupt", "compensation_stuck"):
            world.fail("stuck", f"{address} is {status}: {record.last_error or record.stuck}")
        busy = record.updated is not None and world.now() - (record.updated - TEST_EPOCH) < _AT_WORK
        if status not in _ENDED and row.process not in p.LONG_LIVED and not busy:
            why = record.last_error or record.held or "no reason recorded"
            detail = (
                f"{address} is still {status} after settling ({why}; {len(mail)} unread, "
                f"timers due at {timers.get(address)}, now {world.now():.3f})"
            )
            world.fail("stuck", detail)
        if address in world.mailed and not lossy:
            sent = address.split("/", 1)[1]  # (a qbox is sent its own id)
            if status != "completed" or record.result != sent:
                detail = f"{address} was sent {sent!r} (acknowledged); it is {status}"
                world.fail("stuck", f"{detail} with {record.result!r}")
        if status not in _ENDED and mail:
            detail = f"{address} is {status} with {len(mail)} unread message(s) after settling"
            world.fail("stuck", detail + " (a lost wake-up)")
        parent = record.parent
        if parent is not None and status not in _ENDED:
            found = rows.get(parent)
            if found is None or found[0].status in _ENDED:
                its = found[0].status if found else "gone"
                world.fail("orphan", f"{address} is {status}; its parent {parent} is {its}")
        seen = world.results.get((address, record.incarnation))
        if status == "completed" and seen is not None and seen != record.result and not lossy:
            detail = f"{address} completed with {seen!r}, now {record.result!r}"
            world.fail("result-changed", detail)
        plan = world.plans.get(address)
        if plan is None or record.incarnation != 1:
            continue
        if status == "completed" and address in undone:
            world.fail("saga", f"{address} completed, yet its compensation ran")
        on_purpose = "on purpose" in str((record.error or {}).get("message", ""))
        if status == "failed" and on_purpose and address in ran_a and address not in undone:
            world.fail("saga", f"{address} failed after step a; its compensation never ran")


def _check_cancels(world: World, rows: dict[str, tuple[Any, list[Any]]]) -> None:
    def cancelled_at(run: Run) -> float | None:
        """When a cancel of the run's incarnation, or of an ancestor's (not
        started afresh since), first returned."""
        found = None
        address, incarnation = run.address, run.incarnation
        while address in rows:
            cancel = world.cancels.get(address)
            if cancel is not None and incarnation <= cancel[1]:
                found = cancel[0] if found is None else min(found, cancel[0])
            parent = rows[address][0].record.parent
            if parent is None or parent not in rows:
                break
            address, incarnation = parent, rows[parent][0].record.incarnation
        return found

    for run in world.ledger:
        at = cancelled_at(run) if run.tag != "U" else None
        if at is not None and run.at > at:
            detail = f"{run.key} began at {run.at:.3f}, after a cancel that returned at {at:.3f}"
            world.fail("ran-after-cancel", detail)


def _check_streams(world: World) -> None:
    for address, reads in sorted(world.consumed.items()):
        kept = -1  # the last value of the last read that left normally
        most = -1  # the highest value any read got
        for complete, got in reads:
            if got:
                first = got[0]
                if not kept + 1 <= first <= most + 1:
                    detail = (
                        f"{address}: a read began at {first}; the last one that left "
                        f"normally ended at {kept}, the most seen is {most}"
                    )
                    world.fail("cursor", detail)
                if got != list(range(first, first + len(got))):
                    world.fail("cursor", f"{address}: one read got {got}")
                most = max(most, got[-1])
            if complete and got:
                kept = got[-1]


def _check_rate(world: World) -> None:
    rate = p.RATED.rate
    assert rate is not None
    times = sorted(at for at, count in world.admissions for _ in range(count))
    for i, at in enumerate(times):
        # the admissions in the window (at - per, at]: this one and those before
        within = i + 1 - bisect_right(times, at - rate.per)
        if within > rate.count:
            detail = (
                f"{within} admissions of queue {p.RATED.name!r} in the {rate.per} s "
                f"up to {at:.3f}; its rate allows {rate.count}"
            )
            world.fail("rate-limit", detail)


def _check_ticks(world: World, rows: dict[str, tuple[Any, list[Any]]]) -> None:
    for address, (row, _) in sorted(rows.items()):
        if row.process == "tick/:name/:at" and row.record.incarnation != 1:
            detail = f"{address} is incarnation {row.record.incarnation}: its tick started again"
            world.fail("tick-doubled", detail)


async def _check_log_caches(world: World, sim: Simulation) -> None:
    for system in sim.systems:
        logs = system.registry.logs
        for iid, run in logs.kept():

            def same(r: Any, iid: bytes = iid, run: int = run) -> bool:
                return bool(logs.entries(r, iid, run) == r.entries(iid, run))

            if not await system.journal.read(same):
                world.fail("stale-log", f"run {run} of {iid.hex()} on node {system.node}")
