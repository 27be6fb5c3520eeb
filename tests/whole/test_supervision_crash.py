"""Crash safety of the supervisor tree with real processes: SIGKILL a parent
that spawns and calls children under load, again and again.

A child program (tests/crash_child_supervision.py) runs a system on an LMDB
journal: four sender tasks send uniquely numbered jobs to one long-lived
parent, ``hub/h``, and log each acknowledged send to an acks file. For each
job the hub spawns a detached child ``hub/h/worker/<id>``; every fourth job
it also calls an awaited child ``hub/h/worker/c<id>``; it continues as new
every 40 jobs (which cancels the live children of the run it ends, with
reason "continued as new"). A worker takes a recorded ``ctx.uuid()`` (its
incarnation token), runs one step that appends ``<address> <idempotency key>
<attempt> <token>`` to a side file, and completes, or (every sixth spawned
id) waits for a ``release`` signal and so stays live.

The test SIGKILLs the child program at random moments, several rounds on the
same journal, then opens the system itself, lets it settle (every
acknowledged job taken, no child still running) and checks:

1. every acknowledged job made exactly one child instance at its address
   (and its awaited child, for a calling job): first incarnation, right
   input, no restarts; and no job was taken twice (the hub's own count of
   jobs handled, carried across continue-as-new, matches the children);
2. each child's step ran under one idempotency key and one incarnation
   token (two would mean a child started twice from scratch), the token is
   the one its journal records, attempts count upwards, and no attempt ran
   after the one whose result was recorded;
3. the parent's view agrees with the journal: every child named by a
   spawn/call entry of the hub's current run exists and names ``hub/h`` as
   its parent; every worker names a parent that exists; live children all
   belong to the current run, and every cancelled child was cancelled by a
   continue-as-new of an earlier run;
4. the system keeps working: a new job makes new children that finish, and
   a held child of the current run completes when released.

The random seed is printed; set ACTORS_CRASH_SEED to replay a run's timings.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections import defaultdict
from pathlib import Path

import pytest
import trio

import actors
from storage import LMDBJournal, instance_id
from tests import crash_child_supervision as child
from tests.crash_kit import acked_ids, kill_after_acks

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parents[1] / "crash_child_supervision.py"

ROUNDS = 6
TASKS = 4
PER_TASK = 400  # per sender per round: more than a round ever gets to send
PACE = 0.02  # mean pause between one sender's sends: about 200 jobs/s in all
ROUND_IDS = 100_000  # each round sends ids in [round * ROUND_IDS, ...)
MIN_ACKS = 20  # acknowledged sends in a round before the kill is armed
PASSIVATE = (60.0, 0.05, 0.0)  # passivate_after of the rounds, in turn
START_TIMEOUT = 20.0
SETTLE_TIMEOUT = 60.0

HUB = child.HUB
HUB_IID = instance_id(HUB)
WORKER = child.worker.template
STEP_KEY = "{address}/1/0/effect/1"  # incarnation 1, run 0, step "effect", first occurrence


_acked = acked_ids


def _side_lines(side: Path, *, final: bool = False) -> list[tuple[str, str, int, str]]:
    """The side file's complete lines as (address, key, attempt, token), in
    file order. Once every writer is gone (``final``) there must be no
    partial line (each line is one write() call, which SIGKILL cannot split)."""
    if not side.exists():
        return []
    lines = side.read_text().split("\n")
    if final and lines[-1] != "":
        raise AssertionError(f"side file ends in a partial line: {lines[-1]!r}")
    out = []
    for line in lines[:-1]:
        address, key, attempt, token = line.split(" ")
        out.append((address, key, int(attempt), token))
    return out


def _spawned(n: int) -> str:
    return f"{HUB}/worker/{n}"


def _called(n: int) -> str:
    return f"{HUB}/worker/c{n}"


def _job_of(address: str) -> tuple[int, bool]:
    """(job id, awaited?) of a worker address."""
    prefix = f"{HUB}/worker/"
    assert address.startswith(prefix), address
    own = address[len(prefix) :]
    return (int(own[1:]), True) if own.startswith("c") else (int(own), False)


def _run_child(tmp: Path, round_no: int, rng: random.Random) -> tuple[int, float]:
    """Start a child, let it get some sends acknowledged, SIGKILL it.

    Returns (acks this round, seconds waited after MIN_ACKS before the kill)."""
    acks = tmp / "acks"
    before = len(_acked(acks))
    passivate = PASSIVATE[round_no % len(PASSIVATE)]
    extra = rng.uniform(0.0, 1.5)
    kill_after_acks(
        [
            str(CHILD),
            str(tmp / "journal"),
            str(tmp / "side"),
            str(acks),
            str(round_no * ROUND_IDS),
            str(TASKS),
            str(PER_TASK),
            str(PACE),
            str(passivate),
        ],
        stderr_path=tmp / f"child{round_no}.err",
        acked=lambda: len(_acked(acks)) - before,
        min_acks=MIN_ACKS,
        start_timeout=START_TIMEOUT,
        delay=extra,
        label=f"child of round {round_no}",
    )
    return len(_acked(acks)) - before, extra


async def _statuses(system: actors.ActorSystem) -> dict[str, str]:
    return {info.id: info.status async for info in system.query(process=child.worker)}


def _hub_state(system: actors.ActorSystem) -> tuple[int, int, dict[int, dict]]:
    """(unread jobs, hub run, the current run's log) as the journal has them."""
    with system.journal.reader() as r:
        row = r.instance(HUB_IID)
        run = row.record.run
        return len(r.mailbox(HUB_IID)), run, r.log(HUB_IID, run)


async def _settle(system: actors.ActorSystem, want: set[str]) -> str:
    """Wait until the hub has taken every job and no child is still running.

    Returns what was still missing at the timeout ("" once settled)."""
    with trio.move_on_after(SETTLE_TIMEOUT):
        while True:
            pending, _, _ = _hub_state(system)
            statuses = await _statuses(system)
            running = sorted(a for a, s in statuses.items() if s == "running")
            hub = system.get(HUB).status
            absent = want - statuses.keys()
            why = (
                f"{pending} jobs unread, hub {hub}, {len(running)} children running "
                f"{running[:5]}, {len(absent)} children missing {sorted(absent)[:5]}"
            )
            if not pending and hub == "suspended" and not running and not absent:
                return ""
            await trio.sleep(0.1)
    return why


@pytest.mark.slow
async def test_sigkill_under_load_keeps_the_supervisor_tree_consistent(tmp_path):
    seed = int(os.environ.get("ACTORS_CRASH_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    began = time.monotonic()
    side, acks = tmp_path / "side", tmp_path / "acks"

    per_round = [_run_child(tmp_path, round_no, rng) for round_no in range(ROUNDS)]
    acked = _acked(acks)
    crashed_at = time.monotonic()
    want = {_spawned(n) for n in acked} | {_called(n) for n in acked if child.calls(n)}

    # Recover in this process and let the hub and its children settle.
    fresh = ROUNDS * ROUND_IDS  # an id no child sent; it also calls (fresh % 4 == 0)
    assert child.calls(fresh) and not child.holds(fresh)
    released = None
    journal = LMDBJournal(tmp_path / "journal")
    async with actors.open_system(journal, processes=child.PROCESSES) as system:
        await child.ensure_hub(system, str(side))
        stuck = await _settle(system, want)
        assert not stuck, f"the system did not settle (seed {seed}): {stuck}"
        settled_at = time.monotonic()

        # 4. It keeps working: a new job makes a spawned and a called child.
        await system.send(HUB, child.job, {"id": fresh})
        stuck = await _settle(system, {_spawned(fresh), _called(fresh)})
        assert not stuck, f"the fresh job was not handled (seed {seed}): {stuck}"
        assert system.get(_called(fresh)).status == "completed"
        # ... and a held child of the current run completes once released.
        _, _, log = _hub_state(system)
        statuses = await _statuses(system)
        held = sorted(
            e["n"]
            for e in log.values()
            if e.get("k") == "spawn" and statuses.get(e["n"]) == "suspended"
        )
        if held:
            released = held[0]
            await system.send(released, child.release, None)
            with trio.fail_after(10):
                while system.get(released).status != "completed":
                    await trio.sleep(0.02)

    # Closing drained every pending write: audit the journal as it now is.
    journal = LMDBJournal(tmp_path / "journal")
    await journal.open()
    try:
        with journal.reader() as r:
            hub_row = r.instance(HUB_IID)
            run = hub_row.record.run
            hub_log = r.log(HUB_IID, run)
            hub_mail = r.mailbox(HUB_IID)
            rows = {row.address: row for row in r.instances(None, WORKER)}
            logs = {a: r.log(row.iid, row.record.run) for a, row in rows.items()}
            parents = {
                a: r.instance(instance_id(row.record.parent))
                for a, row in rows.items()
                if row.record.parent
            }
    finally:
        await journal.close()

    sent = {r * ROUND_IDS + n for r in range(ROUNDS) for n in range(TASKS * PER_TASK)} | {fresh}
    lines = _side_lines(side, final=True)
    keys: dict[str, set[str]] = defaultdict(set)
    tokens: dict[str, set[str]] = defaultdict(set)
    attempts: dict[str, list[int]] = defaultdict(list)
    for address, key, attempt, token in lines:
        keys[address].add(key)
        tokens[address].add(token)
        attempts[address].append(attempt)
    status = {a: row.status for a, row in rows.items()}
    current = {e["n"]: e for e in hub_log.values() if e.get("k") in ("spawn", "call")}
    taken = [e["v"]["id"] for _, e in sorted(hub_log.items()) if e.get("k") == "wait" and "v" in e]
    spawned = {a for a in rows if not _job_of(a)[1]}
    count = defaultdict(int)
    for s in status.values():
        count[s] += 1
    repeated = sum(1 for a in attempts.values() if len(a) > 1)
    print(
        f"\nsupervision crash test (seed {seed}): {ROUNDS} rounds SIGKILLed "
        f"[(acks, kill delay s) {', '.join(f'({n}, {d:.2f})' for n, d in per_round)}]; "
        f"{len(acked)} jobs acknowledged, {len(spawned)} handled, {len(rows)} children "
        f"{dict(sorted(count.items()))}, hub run {run}, {len(lines)} side-effect lines, "
        f"{repeated} children whose step ran more than once; children {crashed_at - began:.1f} s, "
        f"settled {settled_at - crashed_at:.1f} s, total {time.monotonic() - began:.1f} s"
    )

    # The hub is healthy, has taken every job, and nothing else is left over.
    assert hub_row.status == "suspended" and hub_row.record.last_error is None, (
        hub_row.status,
        hub_row.record.last_error,
    )
    assert hub_mail == []
    errors = {a: r.record.last_error for a, r in rows.items() if r.record.last_error}
    assert not errors, f"children stuck with errors: {list(errors.items())[:5]}"
    assert set(status.values()) <= {"completed", "suspended", "cancelled"}, count

    # 1. Every acknowledged job made its children, each exactly once.
    missing = sorted(want - rows.keys())
    assert not missing, f"acknowledged jobs without their child (seed {seed}): {missing[:10]}"
    for address, row in rows.items():
        n, awaited = _job_of(address)
        assert n in sent, f"a child for a job never sent: {address}"
        record = row.record
        assert record.input == (
            {"n": n, "side": str(side)}
            if awaited
            else {"n": n, "side": str(side), "hold": child.holds(n)}
        ), (address, record.input)
        assert (record.incarnation, record.run, list(record.restarts)) == (1, 0, []), (
            f"{address} was started more than once: inc {record.incarnation}, run "
            f"{record.run}, restarts {record.restarts}"
        )
        assert record.awaited is awaited, address
        if awaited:
            assert _spawned(n) in rows, f"{address} without the spawned child of its job"
    # No job was taken twice: the hub's count (carried across continue-as-new)
    # matches the distinct jobs that made a child, and a run takes an id once.
    assert hub_row.record.input["handled"] == child.EVERY * run
    assert len(taken) == len(set(taken)), sorted(i for i in taken if taken.count(i) > 1)[:10]
    assert child.EVERY * run + len(taken) == len(spawned), (
        f"the hub handled {child.EVERY * run + len(taken)} jobs, which made "
        f"{len(spawned)} spawned children (seed {seed})"
    )

    # 2. One start per child: one idempotency key and one incarnation token,
    # the token its journal records; attempts count upwards; and no attempt
    # after the one whose result was recorded.
    assert set(keys) <= rows.keys(), sorted(set(keys) - rows.keys())[:10]
    twice = {a: sorted(t) for a, t in tokens.items() if len(t) > 1 or len(keys[a]) > 1}
    assert not twice, (
        f"children whose step ran under two keys or incarnation tokens, i.e. started "
        f"afresh a second time or replayed without their recorded uuid (seed {seed}): "
        f"{[(a, sorted(keys[a]), t) for a, t in list(twice.items())[:5]]}"
    )
    for address in rows:
        log = logs[address]
        uuid_entry, step_entry = log.get(1), log.get(2)
        ran = address in keys
        if status[address] != "cancelled":
            assert ran, f"{address} is {status[address]} but its step never ran"
            assert step_entry is not None and "v" in step_entry, (address, step_entry)
        if not ran:
            continue
        assert keys[address] == {STEP_KEY.format(address=address)}, (address, keys[address])
        assert uuid_entry is not None and uuid_entry.get("k") == "uuid", (address, uuid_entry)
        assert tokens[address] == {str(uuid_entry["v"])}, (
            f"{address} ran its step with token {tokens[address]}, its journal records "
            f"{uuid_entry['v']}"
        )
        tries = attempts[address]
        assert all(x < y for x, y in itertools.pairwise(tries)), (address, tries)
        if step_entry is not None and "v" in step_entry:
            assert step_entry["v"] == str(uuid_entry["v"])
            assert max(tries) == step_entry["a"], (
                f"{address}: attempts {tries} ran, the result recorded is attempt "
                f"{step_entry['a']}: a recorded step ran again (seed {seed})"
            )

    # 3. The parent's view agrees with the journal.
    made = {_spawned(n) for n in taken} | {_called(n) for n in taken if child.calls(n)}
    assert current.keys() == made, (
        f"the hub's current run took jobs {sorted(taken)[:10]}... but its log names "
        f"children {sorted(current.keys() ^ made)[:10]} differently"
    )
    for address in current:
        assert address in rows, f"the hub's log names {address}, which does not exist"
        assert rows[address].record.parent == HUB, (address, rows[address].record)
        assert status[address] != "cancelled", (address, rows[address].record.reason)
    for address, row in rows.items():
        parent = row.record.parent
        assert parent == HUB, (address, parent)
        assert parents.get(address) is not None, f"{address} names a parent that does not exist"
        if address not in current:
            # A child of an earlier run: done, or cancelled when that run ended.
            assert status[address] in ("completed", "cancelled"), (address, status[address])
        if status[address] == "cancelled":
            assert row.record.reason == "continued as new", (
                address,
                row.record.reason,
            )
            assert not _job_of(address)[1], f"awaited child {address} was cancelled"
        if status[address] == "suspended":
            assert row.record.input.get("hold"), f"{address} is suspended but not held"

    # 4. The fresh job's children and the released child.
    assert status[_called(fresh)] == "completed"
    assert status[_spawned(fresh)] in ("completed", "cancelled")
    assert released is None or status[released] == "completed"
