"""SIGKILL while an operator retries, forks, drops, cleans up and imports
instances, and sends and joins run (tests/crash_child_operators.py): after
every round of kills, no acknowledged message is lost or handled twice, no
step runs under a second key, a retry keeps the unread mail, a fork to
another address copies none, a cleanup breaks no join, and an imported
failed instance resumes in another journal without running its child's
payment again."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter, defaultdict

import pytest
import trio

import actors
from storage import LMDBJournal
from tests import crash_child_operators as child
from tests.crash_kit import ROOT, kill_after_acks

ROUNDS = 5


def lines(path: os.PathLike[str]) -> list[str]:
    """The complete lines of a file written with one write() a line."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().split("\n")[:-1]


def operator_acks(path: os.PathLike[str]) -> int:
    """How many of the operator's actions and sends are acknowledged (the
    background's sends left out)."""
    return sum(not line.startswith("S b") for line in lines(path))


@pytest.mark.slow  # real child processes killed with SIGKILL: ~10 s
async def test_operator_tools_survive_sigkills(tmp_path, monkeypatch):
    journal, journal2 = tmp_path / "journal", tmp_path / "journal2"
    side, acks, work = tmp_path / "side", tmp_path / "acks", tmp_path
    args = [child.__file__, str(journal), str(journal2), str(side), str(acks), str(work)]
    seed = random.randrange(2**32)
    rng = random.Random(seed)  # the moments of the kills; the seed is in the figures
    cut: list[str] = []  # the operator's last acknowledged action before each kill
    for round in range(ROUNDS):
        kill_after_acks(
            args,
            stderr_path=tmp_path / f"stderr{round}",
            acked=lambda: operator_acks(acks),
            min_acks=operator_acks(acks) + rng.randint(3, 25),
            start_timeout=60,
            delay=rng.uniform(0, 0.4),
            label=f"round {round} (seed {seed})",
        )
        cut.append(next(x for x in reversed(lines(acks)) if not x.startswith("S b")))
    # A last run, not killed, ends the order and the sends it is at.
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    done = subprocess.run(
        [sys.executable, *args, "finish"], cwd=ROOT, env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()

    acked = lines(acks)
    sent = {line.split()[1] for line in acked if line.startswith("S ")}
    dropped = {line.split()[1] for line in acked if line.startswith("D ")}
    dropped2 = {line.split()[1] for line in acked if line.startswith("D2 ")}
    orders = {int(line.split()[1]) for line in acked if line.startswith("A ") and "ended" in line}
    imported = {int(line.split()[1]) for line in acked if line.endswith(" resumed2")}
    removed = sum(int(line.split()[3]) for line in acked if " cleaned " in line)
    moms = {int(n[1:]) for n in sent if n.startswith("b")}
    assert len(orders) >= ROUNDS and imported and removed > 0, (orders, imported, removed)

    # Every mom's join gives its kid's result, and what is still there ends
    # here, its steps writing to the same side file.
    monkeypatch.setattr(child, "SIDE", str(side))
    async with actors.open_system(LMDBJournal(journal), processes=child.PROCESSES) as system:
        with trio.fail_after(120):
            for j in sorted(moms):
                for address in (f"mom/{j}", f"box/{j}"):
                    handle = await system.lookup(address)
                    if handle is not None:  # else ended and cleaned up
                        await handle.result()
            for i in orders:  # no order is live: each ended its last action
                for address in (f"order/{i}", f"order/{i}x"):
                    handle = await system.lookup(address)
                    assert handle is None or handle.status == "completed", address

    # Steps: one key for each logical step (a crash runs one again under
    # the same key); a retry or an import meets the completed payment.
    keys: dict[str, set[str]] = defaultdict(set)
    got: dict[str, list[str]] = {}
    executions = 0
    for line in lines(side):
        kind, logical, key, *rest = line.split(" ")
        executions += 1
        keys[logical].add(key)
        if kind == "E":
            items = rest[0].split(",") if rest[0] else []
            # A crash runs the step again under its key, on the same replayed values.
            assert got.setdefault(logical, items) == items, (logical, got[logical], items)
    twice = {logical: k for logical, k in keys.items() if len(k) > 1}
    assert not twice, f"steps run under a second key: {twice}"

    # Messages: each acknowledged one handled by exactly one run that
    # ended (a failed run's taking is put back by the retry), once; a
    # dropped one never; an unacknowledged one at most once.
    handlers: dict[str, list[str]] = defaultdict(list)
    for handler, items in got.items():
        if handler.endswith("/j1") and not handler.startswith("mom/"):  # a mom's is a result
            for n in items:
                handlers[n].append(handler)
    items_sent = {n for n in sent if not n.endswith(".go")}
    for n in {n for n in items_sent if not n.endswith(".9")} - dropped:  # .9: to JOURNAL2
        assert len(handlers.get(n, [])) == 1, (n, handlers.get(n))
    for n in dropped:
        assert n not in handlers, (n, handlers[n])
    assert all(len(h) == 1 for h in handlers.values()), handlers
    for j in moms:
        assert got[f"mom/{j}@1/j1"] == [str(2 * j)]
        assert got[f"box/{j}@1/j1"] == [f"b{j}"]
    for i in orders:
        # The retry took back o<i>.1 and the unread o<i>.3; the poison is dropped.
        assert got[f"order/{i}@2/j1"] == [f"o{i}.1", f"o{i}.3", f"o{i}.4"]
        assert f"order/{i}@1/j1" not in got
        # The fork to another address carried no mail.
        assert got[f"order/{i}x@1/j1"] == [f"o{i}x.5"]
        assert keys[f"charge/{i}"] and keys[f"charge/{i}x"]
    for i in imported:
        assert got[f"order/{i}@2/j2"] == [f"o{i}.1", f"o{i}.3", f"o{i}.9"]
        assert f"o{i}.2" in dropped2
    actions = Counter(
        line.split()[2].rstrip("2") for line in acked if line.startswith("A ")
    ) + Counter(line.split()[0] for line in acked if line.startswith("D"))
    print(
        f"\n{ROUNDS} rounds, {ROUNDS} kills (seed {seed}); {len(items_sent)} acknowledged "
        f"messages ({len(dropped) + len(dropped2)} dropped); acknowledged operator actions: "
        f"{dict(actions)}; {removed} instances cleaned up; {len(keys)} logical steps "
        f"in {executions} executions; killed after: {cut}"
    )
