"""LMDB group commit, seen from its callers: each caller of a batch gets its
own outcome, and a caller cancelled while it waits stops waiting but its
transaction still commits (and the caller can commit again at once). And
the doorbell that hands committed batches back to the trio thread."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from storage import Conflict, LMDBJournal, Txn, instance_id
from storage._handoff import Doorbell

MAIL = [instance_id(f"mail/{i}") for i in range(4)]
MISSING = instance_id("nobody/here")


def _append(iid: bytes, message: object) -> Txn:
    txn = Txn()
    txn.append_message(iid, message)
    return txn


def _mailbox(journal: LMDBJournal, iid: bytes) -> dict[int, object]:
    with journal.reader() as r:
        return dict(r.mailbox(iid))


async def test_each_caller_of_a_batch_gets_its_own_results(make_lmdb):
    got: dict[tuple[int, int], int] = {}  # (caller, its nth message) -> seq

    async def sender(k: int) -> None:
        for n in range(20):
            [got[k, n]] = await journal.commit(_append(MAIL[k % 4], [k, n]))

    async with make_lmdb() as journal:
        async with trio.open_nursery() as nursery:
            for k in range(64):
                nursery.start_soon(sender, k)
        for box, iid in enumerate(MAIL):
            # Sequence numbers 1..320, each handed to the caller whose
            # message it holds.
            expected = {seq: [k, n] for (k, n), seq in got.items() if k % 4 == box}
            assert list(range(1, 16 * 20 + 1)) == sorted(expected)
            assert expected == _mailbox(journal, iid)


async def test_a_failed_precondition_fails_only_its_caller_in_a_batch(make_lmdb):
    async def good(k: int) -> None:
        assert 1 == len(await journal.commit(_append(MAIL[0], k)))

    async def bad() -> None:
        txn = _append(MAIL[1], "never")
        txn.require(MISSING)
        with pytest.raises(Conflict):
            await journal.commit(txn)

    async with make_lmdb() as journal:
        async with trio.open_nursery() as nursery:
            for k in range(16):
                nursery.start_soon(good, k)
                if k % 4 == 0:
                    nursery.start_soon(bad)
        assert 16 == len(_mailbox(journal, MAIL[0]))
        assert {} == _mailbox(journal, MAIL[1])


async def _cancel_half_of_eight_waiting_callers(
    journal: LMDBJournal, box: bytes, box_again: bytes
) -> int:
    """Eight callers commit into mailbox ``box``; half are cancelled once all
    wait, and those commit again into ``box_again``. Checks what each
    got; returns how many were cancelled while they waited (the writer
    thread may have finished first)."""
    outcomes: dict[int, object] = {}

    async def sender(k: int, scope: trio.CancelScope) -> None:
        with scope:
            outcomes[k] = await journal.commit(_append(box, k))
            return
        outcomes[k] = "cancelled"
        # Cancelled while parked: it can commit again, maybe into the very
        # batch its first transaction waits in, and gets that one's result.
        outcomes[k + 100] = await journal.commit(_append(box_again, k))

    scopes = [trio.CancelScope() for _ in range(8)]
    async with trio.open_nursery() as nursery:
        for k, scope in enumerate(scopes):
            nursery.start_soon(sender, k, scope)
        await trio.testing.wait_all_tasks_blocked()
        for scope in scopes[::2]:
            scope.cancel()
    await journal.flush()
    first = _mailbox(journal, box)
    again = _mailbox(journal, box_again)
    # Every first transaction was written, cancelled or not.
    assert list(range(8)) == sorted(first.values())
    cancelled = [k for k in range(8) if outcomes[k] == "cancelled"]
    for k in range(8):
        if k in cancelled:
            [seq] = outcomes[k + 100]  # type: ignore[misc]
            assert k == again[seq]
        else:
            [seq] = outcomes[k]  # type: ignore[misc]
            assert k == first[seq]
    assert len(cancelled) == len(again)
    return len(cancelled)


async def test_a_caller_cancelled_while_it_waits_stops_waiting_and_its_write_commits(
    make_lmdb,
):
    async with make_lmdb() as journal:
        cancelled = 0
        for round_ in range(20):
            cancelled += await _cancel_half_of_eight_waiting_callers(
                journal, instance_id(f"first/{round_}"), instance_id(f"again/{round_}")
            )
            if cancelled >= 8:
                break
        assert cancelled > 0


async def test_the_doorbell_delivers_in_the_trio_thread_in_the_order_rung():
    trio_thread = threading.get_ident()
    delivered: list[tuple[int, bool]] = []
    bell: Doorbell[int] = Doorbell(
        lambda n: delivered.append((n, threading.get_ident() == trio_thread))
    )
    bell.open()
    try:

        def ring_from_a_thread() -> None:
            for n in range(2000):
                bell.ring(n)

        await trio.to_thread.run_sync(ring_from_a_thread)
        with trio.fail_after(5):
            while len(delivered) < 2000:
                await trio.sleep(0.001)
    finally:
        bell.close()
    assert [(n, True) for n in range(2000)] == delivered


async def test_a_journal_closes_its_doorbell_and_opens_again(make_lmdb):
    for round_ in range(3):
        async with make_lmdb() as journal, trio.open_nursery() as nursery:
            for k in range(8):
                nursery.start_soon(journal.commit, _append(MAIL[0], [round_, k]))
    async with make_lmdb() as journal:
        assert 24 == len(_mailbox(journal, MAIL[0]))
