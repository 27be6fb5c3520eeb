"""The journal suite: durable appends through `LMDBJournal` against raw LMDB.

Baselines, on the same filesystem as the journal:

- ``raw-commit``: one put per ``env.begin(write=True)`` transaction, LMDB's
  default (synced) commit: what a naive one-fsync-per-write store gets.
- ``raw-1000/txn``: 1000 puts per transaction with ascending keys: the
  ceiling of batching when nothing else costs anything (for scale: no
  figure of ours writes that way, so none is divided by it).
- ``raw-scattered``: 1024 puts per transaction, one into each of 1024
  instances' logs (the journal's key layout), as the 1024-writer run does.
  Copy-on-write makes LMDB copy and write out one 4 KiB leaf page per
  instance touched, so this is LMDB's own ceiling for that access pattern.

Ours: ``Txn().put_log(...)`` then ``await journal.commit(txn)`` from 1, 16,
256 and 1024 concurrent trio tasks, each writing its own instance's log.
Values are the same size everywhere (~100 bytes). Targets: 1 writer >= 0.9x
raw-commit, 1024 writers >= 25x raw-commit. One writer is read against
raw-commit alone; many against raw-commit and raw-scattered.
"""

from __future__ import annotations

import time
from pathlib import Path

import lmdb
import trio

from storage import LMDBJournal, Txn, instance_id

from ._registry import (
    Measurement,
    Options,
    Result,
    Target,
    at_least,
    contains,
    run_measurements,
    suite,
)

_VALUE = b"v" * 100
_ENTRY = {"kind": "step", "name": "charge_card", "value": "x" * 64}  # ~100 bytes encoded
_MAP_SIZE = 1 << 30
WRITERS = (1, 16, 256, 1024)
# README's targets, as ratios to raw-commit (a single writer pays about one
# fsync per append; many writers share one commit).
TARGETS: dict[int, Target] = {1: at_least(0.9, "raw-commit"), 1024: at_least(25, "raw-commit")}


def _warmup(seconds: float) -> float:
    return min(0.25, seconds / 4)


def _key(n: int) -> bytes:
    return instance_id("bench/raw") + n.to_bytes(8, "big")


def raw_commit(directory: Path, seconds: float) -> float:
    """Durable commits per second, one put each."""
    env = lmdb.open(str(directory), map_size=_MAP_SIZE)
    try:
        n = 0
        deadline = time.perf_counter() + _warmup(seconds)
        while time.perf_counter() < deadline:
            with env.begin(write=True) as txn:
                txn.put(_key(n), _VALUE)
            n += 1
        start, count = time.perf_counter(), 0
        deadline = start + seconds
        while (now := time.perf_counter()) < deadline:
            with env.begin(write=True) as txn:
                txn.put(_key(n), _VALUE)
            n += 1
            count += 1
        return count / (now - start)
    finally:
        env.close()


def raw_batch(directory: Path, seconds: float, per_txn: int = 1000) -> float:
    """Records per second, ``per_txn`` puts per durable commit."""
    env = lmdb.open(str(directory), map_size=_MAP_SIZE)
    try:
        n = 0

        def one_txn() -> None:
            nonlocal n
            with env.begin(write=True) as txn:
                for _ in range(per_txn):
                    txn.put(_key(n), _VALUE)
                    n += 1

        deadline = time.perf_counter() + _warmup(seconds)
        while time.perf_counter() < deadline:
            one_txn()
        start, count = time.perf_counter(), 0
        deadline = start + seconds
        while (now := time.perf_counter()) < deadline:
            one_txn()
            count += per_txn
        return count / (now - start)
    finally:
        env.close()


def raw_scattered(directory: Path, seconds: float, instances: int = 1024) -> float:
    """Records per second, one put into each of ``instances`` logs per commit."""
    env = lmdb.open(str(directory), map_size=_MAP_SIZE, max_dbs=2)
    log = env.open_db(b"log")
    iids = [instance_id(f"bench/w{i}") for i in range(instances)]
    try:
        seq = 0

        def one_txn() -> None:
            nonlocal seq
            with env.begin(write=True) as txn:
                for iid in iids:
                    txn.put(iid + seq.to_bytes(8, "big"), _VALUE, db=log)
            seq += 1

        deadline = time.perf_counter() + _warmup(seconds)
        while time.perf_counter() < deadline:
            one_txn()
        start, count = time.perf_counter(), 0
        deadline = start + seconds
        while (now := time.perf_counter()) < deadline:
            one_txn()
            count += instances
        return count / (now - start)
    finally:
        env.close()


def journal_appends(directory: Path, seconds: float, writers: int) -> float:
    """Acknowledged durable appends per second from ``writers`` trio tasks."""

    async def main() -> float:
        done = 0
        stop = False

        async def writer(i: int) -> None:
            nonlocal done
            iid = instance_id(f"bench/w{i}")
            seq = 0
            while not stop:
                txn = Txn()
                txn.put_log(iid, 0, seq, _ENTRY)
                await journal.commit(txn)
                seq += 1
                done += 1

        journal = LMDBJournal(directory / "journal", map_size=_MAP_SIZE)
        async with journal, trio.open_nursery() as nursery:
            for i in range(writers):
                nursery.start_soon(writer, i)
            await trio.sleep(_warmup(seconds))
            start, first = time.perf_counter(), done
            await trio.sleep(seconds)
            end, last = time.perf_counter(), done
            stop = True
        return (last - first) / (end - start)

    return trio.run(main)


@suite("journal")
def journal_suite(options: Options) -> list[Result]:
    measurements = [
        Measurement(
            "raw-commit",
            "commits/s",
            raw_commit,
            meaning="baseline: raw LMDB, one put per synced commit, one after another",
        ),
        # No figure here batches like this (ascending keys, one log): a row
        # for scale, read against by none.
        Measurement(
            "raw-1000/txn",
            "records/s",
            raw_batch,
            meaning="baseline: raw LMDB, 1000 puts per synced commit into one log: for scale",
        ),
        Measurement(
            "raw-scattered",
            "records/s",
            raw_scattered,
            meaning="baseline: raw LMDB, one put into each of 1024 logs per synced commit",
        ),
    ]
    for n in WRITERS:
        measurements.append(
            Measurement(
                f"journal {n} writer{'s' if n > 1 else ''}",
                "appends/s",
                lambda directory, seconds, n=n: journal_appends(directory, seconds, n),
                # One writer has nothing to batch with: only a commit of
                # its own is its measure. Many writers share commits, each
                # touching its own log: LMDB's ceiling for that is raw-scattered.
                baselines=("raw-commit",) if n == 1 else ("raw-commit", "raw-scattered"),
                target=TARGETS.get(n),
                meaning=(
                    "one task appending a log entry and awaiting its synced commit, in a loop"
                    if n == 1
                    else f"{n} tasks doing so at once, each into its own log: they share commits"
                ),
                # One writer waits for its own commit before the next append.
                floor=contains("raw-commit", "an append waits for a synced commit")
                if n == 1
                else None,
            )
        )
    return run_measurements("journal", measurements, options)
