"""The shared group commit (storage/_group_commit.py, storage/_attempts.py)
on its own: a fake journal supplies how a batch is written, as LMDB and
PostgreSQL do, and the tests check what every journal relies on: order,
isolation of a failing transaction, the hand-back before the next commit,
the drain at close, and the in-doubt policy.

Real threads and the real clock: the writer is a thread, and nothing here
waits on time except for it.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
import trio

from storage._attempts import InDoubt, InDoubtPolicy, Refused, Retry, run_attempts
from storage._group_commit import Batch, Commit, GroupCommit
from storage._handoff import Handoff
from storage._journal import Txn
from storage.errors import CommitOutcomeUnknown, Conflict, JournalClosed, JournalUnavailable

_REFUSED = b"refused"  # a txn putting this key fails alone, with Conflict


def _txn(key: bytes) -> Txn:
    txn = Txn()
    txn.ops.append((0, key))  # (what the fake writes: only the key matters)
    return txn


class _FakeJournal(GroupCommit):
    """Writes a batch by noting its keys; ``gate`` (while set) holds the
    writer in a commit, so that later submissions queue behind it."""

    def __init__(self, durability: str = "sync") -> None:
        self.durability = durability
        self._init_group_commit()
        self.written: list[list[bytes]] = []  # per commit, its keys, in commit order
        self.events: list[str] = []  # "apply N", "commit N", "finish N" (N: the batch's)
        self.numbers: dict[int, int] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.ended = False

    async def open(self) -> None:
        self._start_writer("test writer", Handoff(lambda: self._inflight > 0))

    def _check_open(self) -> None:
        if self._closing:
            raise JournalClosed("the fake journal is closed")

    def _tell_lost(self) -> None:
        pass

    def _writer_ended(self) -> None:
        self.ended = True

    def _apply_batch(self, batch: Batch) -> Commit:
        number = self.numbers[id(batch)] = len(self.numbers)
        self.events.append(f"apply {number}")
        outcomes: list[Any] = []
        for txn in batch.txns:
            key = txn.ops[0][1]
            if key == _REFUSED:
                outcomes.append(Conflict("this one fails alone", reason="status"))
            else:
                outcomes.append([int(key)])
        batch.outcomes = outcomes
        return partial(self._commit, batch, number)

    def _commit(self, batch: Batch, number: int) -> None:
        self.gate.wait()
        self.events.append(f"commit {number}")
        self.written.append([txn.ops[0][1] for txn in batch.txns])

    def _hand_back(self, batch: Batch) -> None:  # (in the writer thread)
        self.events.append(f"hand back {self.numbers[id(batch)]}")
        super()._hand_back(batch)

    def _finish(self, batch: Batch) -> None:
        self.events.append(f"finish {self.numbers[id(batch)]}")
        super()._finish(batch)


async def test_tickets_finish_in_submission_order_with_their_own_results():
    journal = _FakeJournal()
    await journal.open()
    journal.gate.clear()  # the first commit waits, so the rest queue behind it
    first = journal.submit(_txn(b"0"))
    while not journal.events:  # the writer took the first batch
        await trio.sleep(0.001)
    tickets = [journal.submit(_txn(str(i).encode())) for i in range(1, 50)]
    finished: list[int] = []

    async def wait_for(i: int, ticket: Any) -> None:
        assert [i] == await ticket.wait()
        finished.append(i)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for, 0, first)
        for i, ticket in enumerate(tickets, 1):
            nursery.start_soon(wait_for, i, ticket)
        await trio.sleep(0.01)
        assert [] == finished  # nothing is handed back before its commit
        journal.gate.set()
    await journal._stop_writer()
    # Two commits: the first alone, then all that queued behind it, in order.
    assert [[b"0"], [str(i).encode() for i in range(1, 50)]] == journal.written
    # Handed back in commit order (each caller then runs as trio schedules it).
    assert ["finish 0", "finish 1"] == [e for e in journal.events if e.startswith("finish")]
    assert sorted(finished) == list(range(50))
    assert all(t.done for t in tickets)


async def test_a_failing_transaction_does_not_fail_its_batch_mates():
    journal = _FakeJournal()
    await journal.open()
    journal.gate.clear()
    journal.submit(_txn(b"0"))
    while not journal.events:
        await trio.sleep(0.001)
    before = journal.submit(_txn(b"1"))
    refused = journal.submit(_txn(_REFUSED))
    after = journal.submit(_txn(b"2"))
    results: dict[str, Any] = {}

    async def commit(name: str, key: bytes) -> None:  # the parked-caller path
        try:
            results[name] = await journal.commit(_txn(key))
        except Conflict as exc:
            results[name] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit, "ok", b"3")
        nursery.start_soon(commit, "refused", _REFUSED)
        await trio.sleep(0.01)
        journal.gate.set()
    assert [1] == await before.wait()
    with pytest.raises(Conflict):
        await refused.wait()
    assert [2] == await after.wait()
    assert [3] == results["ok"]
    assert isinstance(results["refused"], Conflict)
    assert [b"1", _REFUSED, b"2"] == journal.written[1][:3]  # (then the callers, as they ran)
    assert sorted([b"3", _REFUSED]) == sorted(journal.written[1][3:])
    await journal._stop_writer()


async def test_a_batch_is_handed_back_before_the_next_one_commits():
    # Its callers then run while the next commit is on the disk (see
    # GroupCommit._write_loop): apply N+1, hand back N, commit N+1.
    journal = _FakeJournal()
    await journal.open()
    journal.gate.clear()
    journal.submit(_txn(b"0"))
    while not journal.events:
        await trio.sleep(0.001)
    last = journal.submit(_txn(b"1"))
    journal.gate.set()
    await last.wait()
    await journal._stop_writer()
    writer = [e for e in journal.events if not e.startswith("finish")]
    assert ["apply 0", "commit 0", "apply 1", "hand back 0", "commit 1", "hand back 1"] == writer


async def test_close_drains_pending_and_deferred_writes_and_ends_the_writer():
    journal = _FakeJournal()
    await journal.open()
    journal.gate.clear()
    tickets = [journal.submit(_txn(str(i).encode())) for i in range(10)]
    deferred = journal.defer(_txn(b"10"))
    closing = trio.Event()

    async def close() -> None:
        await journal._stop_writer()
        closing.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close)
        await trio.sleep(0.01)
        assert not closing.is_set()  # it waits for the commit in flight
        with pytest.raises(JournalClosed):
            journal.submit(_txn(b"11"))  # and takes nothing new meanwhile
        journal.gate.set()
    assert all(t.done for t in tickets) and deferred.done
    assert [10] == await deferred.wait()
    assert [str(i).encode() for i in range(11)] == [k for keys in journal.written for k in keys]
    assert journal.ended and 0 == journal._inflight


async def test_a_cancelled_caller_stops_waiting_but_its_write_still_commits():
    journal = _FakeJournal()
    await journal.open()
    journal.gate.clear()
    journal.submit(_txn(b"0"))
    while not journal.events:
        await trio.sleep(0.001)
    with trio.move_on_after(0.01) as scope:
        await journal.commit(_txn(b"1"))
    assert scope.cancelled_caught
    journal.gate.set()
    await journal._stop_writer()
    assert [[b"0"], [b"1"]] == journal.written


async def test_async_durability_acknowledges_a_queued_write_within_the_window():
    journal = _FakeJournal(durability="async")
    await journal.open()
    journal.gate.clear()
    assert [] == await journal.commit(_txn(b"0"))  # queued: acknowledged, not written
    assert [] == journal.written
    journal.gate.set()
    await journal._stop_writer()
    assert [[b"0"]] == journal.written


# -- retries and the in-doubt policy (storage/_attempts.py) ---------------------


def _policy(answer: bool | None, asked: list[InDoubt]) -> InDoubtPolicy:
    def resolve(doubt: InDoubt) -> bool | None:
        asked.append(doubt)
        return answer

    return InDoubtPolicy(resolve=resolve, unknown=lambda d: CommitOutcomeUnknown(str(d.cause)))


def _attempts(*steps: Any) -> tuple[list[int], Any]:
    """An attempt that raises (or returns) each of ``steps`` in turn."""
    tries: list[int] = []

    def attempt() -> list[Any]:
        tries.append(len(tries))
        step = steps[len(tries) - 1]
        if isinstance(step, BaseException):
            raise step
        return step  # type: ignore[no-any-return]

    return tries, attempt


def _in_doubt() -> InDoubt:
    lost = JournalUnavailable("the connection was lost")
    return InDoubt(lost, OSError("reset by peer"), [[1], [2]], attempt="xid 7")


def _run(attempt: Any, answer: bool | None = None, asked: list[InDoubt] | None = None) -> Any:
    policy = _policy(answer, asked if asked is not None else [])
    return run_attempts(attempt, 2, attempts=3, in_doubt=policy, pause=lambda n: None)


def test_a_retry_runs_the_batch_again_until_the_attempts_run_out():
    lost = JournalUnavailable("down")
    tries, attempt = _attempts(Retry(lost), Retry(lost), [[1], [2]])
    assert [[1], [2]] == _run(attempt)
    tries, attempt = _attempts(Retry(lost), Retry(lost), Retry(lost), [[1], [2]])
    assert [lost, lost] == _run(attempt)  # every caller learns why
    assert 3 == len(tries)


def test_a_refused_batch_is_not_run_again():
    refused = JournalUnavailable("a bug")
    tries, attempt = _attempts(Refused(refused), [[1], [2]])
    assert [refused, refused] == _run(attempt)
    assert 1 == len(tries)


def test_a_commit_in_doubt_that_the_policy_finds_written_keeps_its_outcomes():
    asked: list[InDoubt] = []
    tries, attempt = _attempts(_in_doubt(), [[9], [9]])
    assert [[1], [2]] == _run(attempt, answer=True, asked=asked)
    assert 1 == len(tries)  # never run again: it was written
    assert "xid 7" == asked[0].attempt


def test_a_commit_in_doubt_that_the_policy_finds_not_written_runs_again():
    tries, attempt = _attempts(_in_doubt(), [[3], [4]])
    assert [[3], [4]] == _run(attempt, answer=False)
    assert 2 == len(tries)


def test_a_commit_nobody_can_decide_fails_every_caller_with_outcome_unknown():
    tries, attempt = _attempts(_in_doubt(), [[3], [4]])
    outcomes = _run(attempt, answer=None)
    assert 1 == len(tries)  # a blind retry might write it twice
    assert all(isinstance(o, CommitOutcomeUnknown) for o in outcomes) and 2 == len(outcomes)
    assert "reset by peer" in str(outcomes[0])
