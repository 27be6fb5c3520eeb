"""Crash safety of the LMDB journal under a real SIGKILL.

A child process writes from many concurrent trio tasks; each transaction
puts three records that belong together (a log entry, a mailbox message and
a stream value, each carrying a checksum) and, once ``journal.commit``
returns, the child appends a line to a side file. The parent kills the child
at a random moment, reopens the journal and checks that:

- every acknowledged write is there, under the sequence numbers the commit
  returned;
- no transaction is torn: a write's three records are all present or all
  absent;
- every value decodes and its checksum matches;
- the journal keeps working: the stale reader slot the dead child left is
  cleared on open, and new writes succeed (the next round writes on).

The last tests check what a crash cannot show: a transaction that fails, or
whose caller is cancelled, under load, is also all or nothing.

Meanwhile an observer process holds the environment open, as a CLI or a
monitor would, so LMDB cannot simply reset its lock table when the last user
dies: the dead child's reader slot (and, now and then, the write lock it held)
outlives it, which is the case `reader_check()` on open is there for.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from storage import ActorError, LMDBJournal, Txn, instance_id

TASKS = 64
ROUNDS = 5
MIN_ACKS = 200  # kill only after the child has acknowledged this many writes
REPO = Path(__file__).resolve().parents[2]

CHILD = """
import os, sys, threading, time
import trio
from storage import LMDBJournal, Txn, instance_id
from tests.whole.test_storage_crash import TASKS, record

path, side_path, round_ = sys.argv[1], sys.argv[2], int(sys.argv[3])

def hold_reads(journal):
    # Keep a read transaction open most of the time, so that the kill
    # leaves a reader slot of this process behind.
    while True:
        with journal.reader() as r:
            r.count_by_status()
            time.sleep(0.002)
        time.sleep(0.0005)

async def main():
    side = os.open(side_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    async with LMDBJournal(path) as journal:
        threading.Thread(target=hold_reads, args=(journal,), daemon=True).start()

        async def writer(task):
            iid = instance_id(f"crash/{task}")
            seq = 0
            while True:
                txn = Txn()
                txn.put_log(iid, round_, seq, record("log", round_, task, seq))
                txn.append_message(iid, record("mail", round_, task, seq))
                txn.append_stream(iid, record("stream", round_, task, seq))
                mail_seq, index = await journal.commit(txn)
                # One write() per line: a kill cannot leave half a line.
                os.write(side, f"{round_} {task} {seq} {mail_seq} {index}\\n".encode())
                seq += 1

        async with trio.open_nursery() as nursery:
            for task in range(TASKS):
                nursery.start_soon(writer, task)

trio.run(main)
"""

OBSERVER = """
import sys, lmdb
env = lmdb.open(sys.argv[1], readonly=True, max_dbs=16, max_readers=1024, map_size=1 << 30)
print("ready", flush=True)
for line in sys.stdin:  # "readers": list the pids that hold reader slots
    pids = {row.split()[0] for row in env.readers().splitlines()[1:] if row.strip()}
    print(" ".join(sorted(pids)) or "-", flush=True)
env.close()
"""


def checksum(round_: int, task: int, seq: int) -> str:
    return hashlib.sha256(f"{round_}:{task}:{seq}".encode()).hexdigest()


def record(part: str, round_: int, task: int, seq: int) -> dict:
    """What the child writes as ``part`` of write ``seq`` of ``task`` in ``round_``."""
    return {
        "part": part,
        "round": round_,
        "task": task,
        "seq": seq,
        "sum": checksum(round_, task, seq),
        "pad": "x" * (seq % 300),  # values of varied size, some across pages
    }


def read_acks(side: Path) -> list[tuple[int, int, int, int, int]]:
    """Acknowledged writes: (round, task, seq, mailbox seq, stream index)."""
    if not side.exists():
        return []
    text = side.read_text()
    lines = text.split("\n")[:-1]  # a line without its newline was never written
    return [tuple(int(x) for x in line.split()) for line in lines]  # type: ignore[misc]


class Observer:
    """A process that keeps the environment open and reports reader slots."""

    def __init__(self, path: Path, script: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def reader_pids(self) -> set[int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("readers\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        return {int(pid) for pid in answer if pid != "-"}

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


async def check_journal(path: Path, acks: list[tuple[int, int, int, int, int]]) -> int:
    """Open the journal after a crash, check it as the module doc says, and
    write to it once more. Returns how many writes are on disk."""
    acked: dict[int, list[tuple[int, int, int, int]]] = {}
    for round_, task, seq, mail_seq, index in acks:
        acked.setdefault(task, []).append((round_, seq, mail_seq, index))
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            found = 0
            for task in range(TASKS):
                iid = instance_id(f"crash/{task}")
                logged = {}
                for run in r.log_runs(iid):
                    for seq, value in r.log(iid, run).items():
                        logged[(run, seq)] = value
                mailed = {(v["round"], v["seq"]): (n, v) for n, v in r.mailbox(iid)}
                streamed = {(v["round"], v["seq"]): (i, v) for i, v in r.stream(iid, 0, 1 << 30)}
                # All three parts of a write, or none of them.
                assert set(logged) == set(mailed) == set(streamed), f"torn write of task {task}"
                for (round_, seq), value in logged.items():
                    assert value == record("log", round_, task, seq)
                    assert mailed[(round_, seq)][1] == record("mail", round_, task, seq)
                    assert streamed[(round_, seq)][1] == record("stream", round_, task, seq)
                    assert value["sum"] == checksum(value["round"], value["task"], value["seq"])
                found += len(logged)
                # Stream indexes are dense: a torn or lost append would leave a hole.
                assert sorted(i for i, _ in streamed.values()) == list(range(len(streamed)))
                for round_, seq, mail_seq, index in acked.get(task, []):
                    assert (round_, seq) in logged, f"acknowledged write lost: {round_, task, seq}"
                    assert mailed[(round_, seq)][0] == mail_seq
                    assert streamed[(round_, seq)][0] == index
        # Still writable: a new transaction commits and reads back.
        probe = instance_id("crash/probe")
        txn = Txn()
        txn.put_log(probe, 0, found, {"after": found})
        await journal.commit(txn)
        with journal.reader() as r:
            assert r.log(probe, 0)[found] == {"after": found}
    return found


@pytest.mark.slow  # real processes, real fsyncs and a real SIGKILL: ~5 s
async def test_sigkill_loses_no_acknowledged_write_and_tears_no_transaction(tmp_path):
    path = tmp_path / "journal"
    side = tmp_path / "acks.txt"
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "observer.py").write_text(OBSERVER)
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }

    async with LMDBJournal(path):  # create the environment for the observer
        pass
    observer = Observer(path, tmp_path / "observer.py")
    try:
        stale_slots = 0
        for round_ in range(ROUNDS):
            before = len(read_acks(side))
            child = subprocess.Popen(
                [sys.executable, str(tmp_path / "child.py"), str(path), str(side), str(round_)],
                env=env,
                stderr=subprocess.PIPE,
            )
            try:
                deadline = time.monotonic() + 30
                while len(read_acks(side)) - before < MIN_ACKS:
                    if child.poll() is not None:
                        error = child.stderr.read().decode()  # type: ignore[union-attr]
                        raise AssertionError(f"child died early: {error}")
                    assert time.monotonic() < deadline, "child acknowledged too few writes in 30 s"
                    await trio.sleep(0.01)
                await trio.sleep(rng.uniform(0, 0.3))  # then kill it mid-flight
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait()
                child.stderr.close()  # type: ignore[union-attr]

            stale_slots += child.pid in observer.reader_pids()
            acks = read_acks(side)
            found = await check_journal(path, acks)
            assert found >= len(acks), f"seed {seed}: {len(acks)} acknowledged, {found} on disk"
            # Opening the journal cleared the dead child's reader slot.
            assert child.pid not in observer.reader_pids(), f"seed {seed}: stale reader kept"
        # The scenario really happened: the dead children left reader slots.
        assert stale_slots >= 1, f"seed {seed}: no stale reader slot to clear in any round"
    finally:
        observer.close()


async def test_a_transaction_lmdb_refuses_fails_alone_and_leaves_nothing(tmp_path):
    a = instance_id("a")
    outcomes = {}

    async def write(i: int) -> None:
        txn = Txn()
        txn.put_log(a, 0, i, i)
        txn.append_message(a, i)
        if i == 7:
            txn.set_cursor(a, "c" * 600, 1)  # a key past LMDB's 511-byte limit
        try:
            await journal.commit(txn)
            outcomes[i] = "ok"
        except ActorError:  # never lmdb.Error
            outcomes[i] = "failed"

    async with LMDBJournal(tmp_path / "journal") as journal:
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(write, i)
        assert outcomes[7] == "failed"
        assert sum(v == "ok" for v in outcomes.values()) == 49
        with journal.reader() as r:
            assert sorted(r.log(a, 0)) == [i for i in range(50) if i != 7]
            assert sorted(m for _, m in r.mailbox(a)) == [i for i in range(50) if i != 7]
            assert r.cursors(a) == {}


async def test_cancelled_callers_leave_whole_writes_and_acknowledged_ones_stay(tmp_path):
    # Enough writers that the journal splits them over several batches.
    a = instance_id("a")
    acknowledged = set()

    async def write(i: int) -> None:
        txn = Txn()
        txn.put_log(a, 0, i, i)
        txn.append_stream(a, i)
        await journal.commit(txn)
        acknowledged.add(i)

    async with LMDBJournal(tmp_path / "journal") as journal:
        for round_ in range(5):
            with trio.move_on_after(0.002):  # most callers are still waiting then
                async with trio.open_nursery() as nursery:
                    for i in range(round_ * 600, round_ * 600 + 600):
                        nursery.start_soon(write, i)
        await journal.flush()
        with journal.reader() as r:
            logged = set(r.log(a, 0))
            streamed = [v for _, v in r.stream(a, 0, 1 << 20)]
    assert set(streamed) == logged and len(streamed) == len(logged)
    assert acknowledged <= logged
