"""State rows, on every backend: versions, compare-and-set, prefix reads,
and the all-or-nothing of a transaction whose expected version fails."""

from __future__ import annotations

import trio

from storage import Conflict, InstanceRecord, StateRow, Txn, instance_id

A = instance_id("orders/o-1")


async def commit(journal, build) -> list[int]:
    txn = Txn()
    build(txn)
    return await journal.commit(txn)


async def test_versions_count_writes_and_prefix_reads_are_ordered(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: (t.put_state("q/b", {"n": 1}), t.put_state("q/a", [1, 2])))
        await commit(j, lambda t: t.put_state("q/b", {"n": 2}))
        await commit(j, lambda t: t.put_state("other", "x"))
        with j.reader() as r:
            assert r.states("q/") == [StateRow("q/a", 1, [1, 2]), StateRow("q/b", 2, {"n": 2})]
            assert r.states("q/", 1) == [StateRow("q/a", 1, [1, 2])]
            assert r.states("nothing/") == []
        await commit(j, lambda t: (t.delete_state("q/a"), t.delete_state("missing")))
        with j.reader() as r:
            assert [row.key for row in r.states("")] == ["other", "q/b"]
    async with make_journal() as j:  # durable: a reopen reads them back
        with j.reader() as r:
            assert r.states("q/") == [StateRow("q/b", 2, {"n": 2})]


async def test_a_failed_expectation_writes_nothing_of_its_transaction(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: t.put_state("k", 1))

        def stale(t: Txn) -> None:
            t.expect_state("k", 0)  # it exists, at version 1
            t.put_state("k", 2)
            t.put_instance(
                A,
                address="orders/o-1",
                process="orders/:id",
                status="running",
                record=InstanceRecord(),
            )

        try:
            await commit(j, stale)
            raise AssertionError("a stale expectation committed")
        except Conflict as exc:
            assert exc.reason == "state"
        with j.reader() as r:
            assert r.states("k") == [StateRow("k", 1, 1)]
            assert r.instance(A) is None
        await commit(j, lambda t: (t.expect_state("k", 1), t.put_state("k", 3)))
        with j.reader() as r:
            assert r.states("k") == [StateRow("k", 2, 3)]


async def test_of_many_writers_that_read_one_version_exactly_one_wins(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: t.put_state("slot", "free"))
        winners: list[int] = []

        async def writer(i: int) -> None:
            txn = Txn()
            txn.expect_state("slot", 1)
            txn.put_state("slot", f"taken by {i}")
            try:
                await j.commit(txn)
                winners.append(i)
            except Conflict:
                pass

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(writer, i)
        assert len(winners) == 1
        with j.reader() as r:
            assert r.states("slot") == [StateRow("slot", 2, f"taken by {winners[0]}")]
