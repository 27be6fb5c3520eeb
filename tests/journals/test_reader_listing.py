"""The reads the inspector pages with, on every backend: `Reader.listing`
(with its memo), `Reader.mailbox_page` and `Reader.change_marker`."""

from __future__ import annotations

import pytest

from storage import InstanceRecord, Txn, instance_id

A, B, C = (instance_id(f"orders/o-{n}") for n in (1, 2, 3))
ADDRESSES = {A: "orders/o-1", B: "orders/o-2", C: "orders/o-3"}


def put(txn: Txn, iid: bytes, status: str, updated: float, given: dict | None = None) -> None:
    address = ADDRESSES[iid]
    record = InstanceRecord(params=[address.rsplit("/", 1)[-1]], updated=updated, input=given)
    txn.put_instance(iid, address=address, process="orders/:id", status=status, record=record)


async def commit(journal, *puts) -> None:
    txn = Txn()
    for args in puts:
        put(txn, *args)
    await journal.commit(txn)


def listed(journal, memo=None, **filters) -> list:
    with journal.reader() as r:
        return sorted(r.listing(**filters, memo=memo))


async def test_listing_sorts_most_recently_updated_first_and_filters(make_journal):
    async with make_journal() as j:
        await commit(j, (A, "running", 10.0), (B, "completed", 30.0), (C, "running", 20.0))
        assert [
            (-30.0, "orders/o-2", B, "completed", "orders/:id"),
            (-20.0, "orders/o-3", C, "running", "orders/:id"),
            (-10.0, "orders/o-1", A, "running", "orders/:id"),
        ] == listed(j)
        assert [C, A] == [row[2] for row in listed(j, status="running")]
        assert [] == listed(j, process="other/:id")


async def test_a_memo_never_gives_a_record_that_changed_or_went(make_journal):
    async with make_journal() as j:
        await commit(j, (A, "running", 10.0, {"n": 1}), (B, "running", 20.0))
        memo: dict = {}
        first = listed(j, memo)
        assert first == listed(j, memo)  # nothing changed
        # The same length of record, another updated time and status.
        await commit(j, (A, "suspended", 30.0, {"n": 2}))
        assert [A, B] == [row[2] for row in listed(j, memo)]
        assert ("suspended", -30.0) == (listed(j, memo)[0][3], listed(j, memo)[0][0])
        txn = Txn()
        txn.delete_instance(B)
        await j.commit(txn)
        assert [A] == [row[2] for row in listed(j, memo)]
        assert B not in memo  # (a backend that keeps nothing keeps nothing of it either)


async def test_a_page_of_the_mailbox_and_its_count(make_journal):
    async with make_journal() as j:
        await commit(j, (A, "running", 1.0))
        txn = Txn()
        for n in range(1, 8):
            txn.append_message(A, ["note", n, None])
        await j.commit(txn)
        txn = Txn()
        txn.take_message(A, 1)
        await j.commit(txn)
        with j.reader() as r:
            assert (6, [(4, ["note", 4, None]), (5, ["note", 5, None])]) == r.mailbox_page(A, 2, 2)
            assert (6, [(7, ["note", 7, None])]) == r.mailbox_page(A, 5, 10)
            assert (6, []) == r.mailbox_page(A, 6, 10)
            assert (0, []) == r.mailbox_page(B, 0, 10)
            assert r.mailbox(A)[:2] == r.mailbox_page(A, 0, 2)[1]


async def test_the_change_marker_moves_with_each_commit_where_there_is_one(make_journal):
    async with make_journal() as j:
        await commit(j, (A, "running", 1.0))
        with j.reader() as r:
            before = r.change_marker()
        with j.reader() as r:
            assert before == r.change_marker()  # nothing committed between
        await commit(j, (A, "running", 2.0))
        with j.reader() as r:
            after = r.change_marker()
        if before is None:
            pytest.skip("this backend gives no change marker (the inspector reads afresh)")
        assert before != after
