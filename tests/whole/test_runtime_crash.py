"""Crash safety with real processes: SIGKILL a system under load, again and again.

A child program (tests/crash_child_runtime.py) runs a system on an LMDB
journal: eight sender tasks send uniquely numbered messages to one
long-lived instance, ``sink/s``, and log each acknowledged send to an acks
file; the sink handles each message with two steps, A then B, each of which
appends ``<A|B> <id> <idempotency key> <attempt>`` to a side file, and it
continues as new every 25 messages. The test kills the child with SIGKILL at
a random moment, several times on the same journal, then opens the system
itself, lets the sink drain its mailbox and audits the side file:

1. nothing acknowledged is lost: every acknowledged id has an A and a B line;
2. nothing is taken twice: all A lines of an id share one idempotency key,
   and so do its B lines (a message taken twice would get new step keys);
3. no recorded step runs again: no A line of an id comes after its first B
   line (B's attempt record is a durability barrier behind A's result), and
   the attempt numbers of one key strictly increase;
4. the journal still works: a fresh send afterwards is handled.

The random seed is printed; set ACTORS_CRASH_SEED to replay a run's timings.

The last test is a deterministic, in-process repro of the one runtime bug the
crash test found (a message taken twice when its sender wakes late).
"""

from __future__ import annotations

import contextvars
import itertools
import os
import random
import time
from collections import defaultdict
from pathlib import Path

import pytest
import trio

import actors
from actors.testing import wait_quiescent
from storage import LMDBJournal, MemoryJournal, instance_id
from tests import crash_child_runtime as child
from tests.crash_kit import acked_ids, kill_after_acks

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().parents[1] / "crash_child_runtime.py"

ROUNDS = 6
TASKS = 8
PER_TASK = 150  # per sender per round: at most 1200 sends a round
ROUND_IDS = 100_000  # each round sends ids in [round * ROUND_IDS, ...)
MIN_ACKS = 40  # acknowledged sends in a round before the kill is armed
START_TIMEOUT = 20.0
DRAIN_TIMEOUT = 60.0


_acked = acked_ids


def _side_lines(side: Path, *, final: bool = False) -> list[tuple[str, int, str, int]]:
    """The side file's complete lines as (which, id, key, attempt), in file order.

    While a writer may be mid-line, a trailing partial line is skipped; once
    every writer is gone (``final``) there must be none (each line is one
    write() call, which a SIGKILL cannot split)."""
    if not side.exists():
        return []
    lines = side.read_text().split("\n")
    if final and lines[-1] != "":
        raise AssertionError(f"side file ends in a partial line: {lines[-1]!r}")
    out = []
    for line in lines[:-1]:
        which, msg_id, key, attempt = line.split(" ")
        out.append((which, int(msg_id), key, int(attempt)))
    return out


def _run_child(tmp: Path, round_no: int, rng: random.Random) -> tuple[int, float]:
    """Start a child, let it get some sends acknowledged, SIGKILL it.

    Returns (acks this round, seconds waited after MIN_ACKS before the kill)."""
    acks = tmp / "acks"
    before = len(_acked(acks))
    extra = rng.uniform(0.2, 1.5)
    kill_after_acks(
        [
            str(CHILD),
            str(tmp / "journal"),
            str(tmp / "side"),
            str(acks),
            str(round_no * ROUND_IDS),
            str(TASKS),
            str(PER_TASK),
        ],
        stderr_path=tmp / f"child{round_no}.err",
        acked=lambda: len(_acked(acks)) - before,
        min_acks=MIN_ACKS,
        start_timeout=START_TIMEOUT,
        delay=extra,
        label=f"child of round {round_no}",
    )
    return len(_acked(acks)) - before, extra


def _handling(key: str) -> tuple[int, int]:
    """(run, n) of a step key ``sink/s/1/<run>/<A|B>/<n>``: the n-th message of that run."""
    _, run, _, n = key.rsplit("/", 3)
    return int(run), int(n)


@pytest.mark.slow
async def test_sigkill_under_load_loses_nothing_and_repeats_no_recorded_step(tmp_path):
    seed = int(os.environ.get("ACTORS_CRASH_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    began = time.monotonic()
    side, acks = tmp_path / "side", tmp_path / "acks"

    per_round = [_run_child(tmp_path, round_no, rng) for round_no in range(ROUNDS)]
    acked = _acked(acks)
    crashed_at = time.monotonic()

    # Recover in this process and let the sink work through its mailbox.
    fresh = ROUNDS * ROUND_IDS  # an id no child sent
    iid = instance_id(child.ADDRESS)
    journal = LMDBJournal(tmp_path / "journal")
    async with actors.open_system(journal, processes=[child.sink]) as system:
        await child.ensure_sink(system, str(side))

        def pending() -> int:
            with system.journal.reader() as r:
                return len(r.mailbox(iid))

        def missing() -> set[int]:
            seen = defaultdict(set)
            for which, msg_id, _, _ in _side_lines(side):
                seen[which].add(msg_id)
            return acked - (seen["A"] & seen["B"])

        with trio.move_on_after(DRAIN_TIMEOUT):
            while pending() or system.get(child.ADDRESS).status != "suspended" or missing():
                await trio.sleep(0.05)
        # 1. None lost: every acknowledged message was handled (A and B).
        lost = missing()
        assert not lost, (
            f"acknowledged messages never handled (seed {seed}): {sorted(lost)[:20]}; "
            f"mailbox holds {pending()}, sink is {system.get(child.ADDRESS).status}"
        )
        # 4. The journal keeps working after all this.
        await system.send(child.ADDRESS, child.work, {"id": fresh})
        with trio.fail_after(10):
            while not any(w == "B" and i == fresh for w, i, _, _ in _side_lines(side)):
                await trio.sleep(0.02)
            # B's line is written inside the step: the sink suspends a few
            # scheduler passes later, and only then is "suspended" its state.
            while system.get(child.ADDRESS).status != "suspended":
                await trio.sleep(0.02)
    # Closing drained every pending write: the journal now holds the sink's state.
    journal = LMDBJournal(tmp_path / "journal")
    await journal.open()
    try:
        with journal.reader() as r:
            row = r.instance(iid)
            left = len(r.mailbox(iid))
    finally:
        await journal.close()

    lines = _side_lines(side, final=True)
    keys: dict[tuple[str, int], set[str]] = defaultdict(set)  # (A|B, id) -> step keys
    ids_of_key: dict[str, set[int]] = defaultdict(set)
    attempts: dict[str, list[int]] = defaultdict(list)
    b_started: set[tuple[int, int]] = set()  # handlings whose B step has run
    a_after_b = []
    for which, msg_id, key, attempt in lines:
        assert which in ("A", "B"), (which, msg_id, key, attempt)
        keys[which, msg_id].add(key)
        ids_of_key[key].add(msg_id)
        attempts[key].append(attempt)
        if which == "B":
            b_started.add(_handling(key))
        elif _handling(key) in b_started:
            a_after_b.append((msg_id, key, attempt))

    sent = {r * ROUND_IDS + n for r in range(ROUNDS) for n in range(TASKS * PER_TASK)}
    handled = {msg_id for (which, msg_id) in keys if which == "B"}
    handlings = {_handling(k) for k in ids_of_key}
    repeated = sorted(k for k, a in attempts.items() if len(a) > 1)
    twice = {i: sorted(v) for (w, i), v in keys.items() if w == "A" and len(v) > 1}
    print(
        f"\ncrash test (seed {seed}): {ROUNDS} rounds SIGKILLed "
        f"[(acks, kill delay s) {', '.join(f'({n}, {d:.2f})' for n, d in per_round)}]; "
        f"{len(acked)} sends acknowledged, {len(handled)} messages handled "
        f"({len(handled - acked - {fresh})} sent but unacknowledged at a kill), "
        f"{len(handlings)} handlings, {len(twice)} messages taken twice, "
        f"{len(lines)} side-effect lines, {len(repeated)} step keys with repeated "
        f"attempts {repeated[:4]}; children {crashed_at - began:.1f} s, "
        f"total {time.monotonic() - began:.1f} s"
    )

    # Sanity: only sent ids are handled, each step key belongs to one message,
    # every handling ran A, and the sink is healthy with an empty mailbox.
    assert handled <= sent | {fresh}, sorted(handled - sent)[:20]
    assert all(("A", i) in keys for i in handled)
    shared = {k: sorted(v) for k, v in ids_of_key.items() if len(v) > 1}
    assert not shared, f"one step key ran for several messages: {list(shared.items())[:5]}"
    assert row.status == "suspended" and row.record.last_error is None, (
        row.status,
        row.record.last_error,
    )
    assert left == 0
    # The count carried by continue_as_new matches the handlings of earlier runs.
    run = row.record.run
    assert row.record.input["handled"] == child.EVERY * run
    assert sum(1 for h in handlings if h[0] < run) == child.EVERY * run
    # 1. None lost, over the final side file.
    assert acked <= handled, sorted(acked - handled)[:20]
    # 3. No recorded step ran again: once a handling's B step has started, its
    # A step's result is durable (B's attempt record is a barrier behind it),
    # so A never runs again; and attempts of one key count upwards.
    assert not a_after_b, f"step A ran again after its B had started: {a_after_b[:5]}"
    regress = {k: a for k, a in attempts.items() if any(x >= y for x, y in itertools.pairwise(a))}
    assert not regress, f"attempt numbers that do not increase: {list(regress.items())[:5]}"
    # 2. None taken twice: one A key and one B key per message.
    assert not twice, f"messages taken twice: {list(twice.items())[:5]}"
    assert not {k: v for k, v in keys.items() if len(v) > 1}


# -- the double take, deterministically ------------------------------------------

_late = contextvars.ContextVar("late_waking_sender", default=False)
_taken: list[str] = []


class _LateWakingJournal(MemoryJournal):
    """A journal whose commits, in a task that asks for it, return 50 ms late:
    the sender's task is scheduled again only some time after its message is
    committed, as any task woken by a group commit may be."""

    async def commit(self, txn, *, durable=None):
        results = await super().commit(txn, durable=durable)
        if _late.get():
            await trio.sleep(0.05)
        return results


async def _record(payload: str) -> None:
    _taken.append(payload)
    await trio.sleep(0.1)  # the instance stays in memory while the late sender wakes


@actors.process("late/:id")
async def _late_sink(ctx: actors.Context, id: str) -> None:
    while True:
        _, payload = await ctx.receive(child.work)
        await ctx.step(_record, payload)


async def test_message_whose_sender_wakes_late_is_taken_once(autojump_clock):
    # On virtual time: the 10, 50 and 100 ms below keep their order however
    # loaded the machine is.
    _taken.clear()
    async with actors.open_system(
        _LateWakingJournal(), processes=[_late_sink], passivate_after=0
    ) as system:
        await system.start(_late_sink, "s")
        await wait_quiescent(system)

        async def send_x_and_wake_late() -> None:
            _late.set(True)
            await system.send("late/s", child.work, "X")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_x_and_wake_late)
            await trio.sleep(0.01)  # X is committed; its sender sleeps
            # Y activates the instance: it loads X and Y from the journal and
            # takes X; then X's sender wakes and hands X over once more.
            await system.send("late/s", child.work, "Y")
        with trio.fail_after(5):
            while len(_taken) < 2:
                await trio.sleep(0.01)
        await wait_quiescent(system)  # a second take of X would be done by now
    assert _taken == ["X", "Y"]
