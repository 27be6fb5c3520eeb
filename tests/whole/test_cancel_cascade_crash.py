"""A cancel cut short by SIGKILL is finished at the next open: no tree is
left half cancelled.

A child program (tests/crash_child_cascade.py) builds a tree of 181
instances on an LMDB journal, cancels its root, and is killed with SIGKILL
0 to 250 ms into that cancel. Its journal holds the trio thread for 0.8 ms
per commit during the cancel, as an inline commit on a slow disk does,
which makes the cascade last about 250 ms (tens on a fast disk: most
kills would come after it). Each round uses a new root in the same
journal, every other round with the tree passivated (the cascade reads
each node from the journal) or in memory.

After each kill the test reads the tree as the kill left it (the next
round's open finishes it, as a restarted program's would). At the end it
opens the system itself and checks that every tree whose cancel was under
way at its kill (a node cancelled, or the cancel recorded on the root) is
cancelled whole; one killed before its cancel wrote anything stays whole
and live.

The random seed is printed; set ACTORS_CRASH_SEED to replay a run's choices.

A fast companion without processes cuts the same cancel after each of a
spread of its commits: `Snapshots` keeps the in-memory journal as it was
right after commit k (what a SIGKILL just then would leave), and a system
opened on that copy must finish the cancel.
"""

from __future__ import annotations

import copy
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import actors
from actors._features._supervision import CANCEL
from storage import LMDBJournal, MemoryJournal, Txn, instance_id
from storage._journal import Ticket
from tests import crash_child_cascade as child
from tests.crash_kit import kill_after_acks

CHILD = Path(__file__).resolve().parents[1] / "crash_child_cascade.py"

ROUNDS = 20
TREE = child.addresses("r0")
PASSIVATE = (60.0, 0.0)  # passivate_after of the rounds, in turn
LONGEST_DELAY = 0.25  # seconds into the cancel
START_TIMEOUT = 30.0
SETTLE_TIMEOUT = 30.0


def _acks(acks: Path) -> list[str]:
    # Complete lines only: each is one write(), which a SIGKILL cannot split.
    return acks.read_text().split("\n")[:-1] if acks.exists() else []


def _run_child(tmp: Path, round_no: int, rng: random.Random) -> float:
    """Build a tree, cancel its root, SIGKILL the program during the cancel.

    Returns the ms from the cancel's start to the kill."""
    acks = tmp / f"acks{round_no}"
    kill_after_acks(
        [
            str(CHILD),
            str(tmp / "journal"),
            str(acks),
            f"r{round_no}",
            str(PASSIVATE[round_no % len(PASSIVATE)]),
        ],
        stderr_path=tmp / f"child{round_no}.err",
        acked=lambda: sum(line.startswith("C ") for line in _acks(acks)),
        min_acks=1,
        start_timeout=START_TIMEOUT,
        delay=rng.uniform(0, LONGEST_DELAY),
        label=f"child of round {round_no}",
    )
    killed = time.monotonic()  # (CLOCK_MONOTONIC: one clock for both processes)
    lines = _acks(acks)
    began = next(float(line.split()[1]) for line in lines if line.startswith("C "))
    return 1e3 * (killed - began)


def _trees(journal: LMDBJournal, roots: list[str]) -> dict[str, dict[str, str]]:
    """Each round's tree, address -> status, as the journal holds them; a
    root whose cancel is recorded (a CANCEL unread in its mailbox) shows as
    "cancelling"."""
    found = {}
    with journal.reader() as r:
        for root in roots:
            tree = {}
            for address in child.addresses(root):
                iid = instance_id(address)
                row = r.instance(iid)
                status = "absent" if row is None else row.status
                if (
                    status != "cancelled"
                    and address == f"node/{root}"
                    and any(message[0] == CANCEL.name for _, message in r.mailbox(iid))
                ):
                    status = "cancelling"
                tree[address] = status
            found[root] = tree
    return found


def _uncancelled(tree: dict[str, str]) -> list[str]:
    return [a for a, status in tree.items() if status != "cancelled"]


class Snapshots(MemoryJournal):
    """Once ``counting``, keeps a copy of its data as it is right after the
    ``at``-th commit (a test's reach into MemoryJournal's own attributes)."""

    counting = False
    at = 0
    commits = 0
    kept: dict[str, Any] | None = None

    def submit(self, txn: Txn) -> Ticket:
        ticket = super().submit(txn)  # (applied at once, or failed whole)
        if self.counting and txn.ops:
            self.commits += 1
            if self.commits == self.at:
                # (Its data, not the hook the running system set on it.)
                skip = ("kept", "on_write_lost")
                self.kept = copy.deepcopy({k: v for k, v in vars(self).items() if k not in skip})
        return ticket

    def restored(self) -> MemoryJournal:
        """A closed journal holding the data kept."""
        assert self.kept is not None
        journal = MemoryJournal()
        vars(journal).update(copy.deepcopy(self.kept))
        journal._open = False
        return journal


@pytest.mark.parametrize("passivate", PASSIVATE)
@pytest.mark.parametrize("at", range(1, 212, 30))
async def test_a_cancel_cut_short_after_any_commit_is_finished_at_the_next_open(
    autojump_clock, passivate, at
):
    journal = Snapshots()
    async with actors.open_system(
        journal, processes=child.PROCESSES, passivate_after=passivate
    ) as system:
        handle = await system.start(child.node, "r0")
        while {i.id async for i in system.query(status="suspended")} != set(TREE):
            await trio.sleep(0.01)
        journal.counting, journal.at = True, at
        assert await handle.cancel()
        journal.counting = False
    if journal.kept is None:
        pytest.skip(f"the cancel took fewer than {at} commits ({journal.commits})")
    cut = journal.restored()
    await cut.open()
    left = _trees(cut, ["r0"])["r0"]
    await cut.close()
    assert "cancelled" != left[TREE[0]]  # cut short: the root's end is the last commit
    async with actors.open_system(cut, processes=child.PROCESSES) as system:
        with trio.fail_after(10):
            while _uncancelled(_trees(system.journal, ["r0"])["r0"]):
                await trio.sleep(0.01)


@pytest.mark.slow
async def test_sigkill_during_a_cascading_cancel_is_finished_at_the_next_open(tmp_path):
    # Real processes and real time: the kill must land inside the child's cascade.
    seed = int(os.environ.get("ACTORS_CRASH_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    began = time.monotonic()
    roots = [f"r{n}" for n in range(ROUNDS)]
    kills = []
    left = {}  # what each kill left of its tree (the next round's open finishes it)
    for n, root in enumerate(roots):
        kills.append(_run_child(tmp_path, n, rng))
        journal = LMDBJournal(tmp_path / "journal")
        await journal.open()
        try:
            left.update(_trees(journal, [root]))
        finally:
            await journal.close()
        assert "absent" not in left[root].values(), (seed, root)
    killed_at = time.monotonic()
    begun = [root for root in roots if set(left[root].values()) - {"running", "suspended"}]
    halfway = [root for root in begun if _uncancelled(left[root])]
    at_kill = sum(len(_uncancelled(left[root])) for root in begun)

    # The next open finishes every cancel it finds begun.
    journal = LMDBJournal(tmp_path / "journal")
    async with actors.open_system(journal, processes=child.PROCESSES) as system:
        with trio.move_on_after(SETTLE_TIMEOUT):
            while any(_uncancelled(_trees(system.journal, [root])[root]) for root in begun):
                await trio.sleep(0.05)
        after = _trees(system.journal, roots)
    report = (
        f"seed {seed}: {ROUNDS} rounds of {len(TREE)} instances, killed "
        f"{min(kills):.0f}..{max(kills):.0f} ms into the "
        f"cancel; {len(halfway)} trees left half cancelled ({at_kill} instances "
        f"uncancelled), {len(roots) - len(begun)} with the cancel not yet begun; kills "
        f"took {killed_at - began:.1f} s, recovery {time.monotonic() - killed_at:.1f} s"
    )
    print(report)
    for root in roots:
        missed = _uncancelled(after[root])
        if root in begun:
            assert not missed, (
                f"{report}\ntree {root}: {len(missed)} of {len(TREE)} not cancelled after "
                f"the reopen, e.g. {[(a, after[root][a]) for a in missed[:5]]}"
            )
        else:  # killed before the cancel wrote anything: nothing of it happened
            assert len(missed) == len(TREE), (report, root, after[root])
    # The kills did land inside cascades.
    assert halfway, report
