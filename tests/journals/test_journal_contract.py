"""The journal contract: every backend must pass this suite unchanged."""

from __future__ import annotations

import time

import pytest
import trio

from storage import (
    Conflict,
    EncodeError,
    InstanceRecord,
    JournalClosed,
    JournalLocked,
    Txn,
    instance_id,
)

A = instance_id("orders/o-1")
B = instance_id("orders/o-2")


def put(txn: Txn, iid: bytes, status: str = "running", process: str = "orders/:id", **record):
    address = {A: "orders/o-1", B: "orders/o-2"}.get(iid, iid.hex())
    params = [address.rsplit("/", 1)[-1]] * process.count(":")
    txn.put_instance(
        iid,
        address=address,
        process=process,
        status=status,
        record=InstanceRecord(params=params, input=record),
    )


async def commit(journal, build) -> list[int]:
    txn = Txn()
    build(txn)
    return await journal.commit(txn)


async def test_instance_roundtrip_and_status_index(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: (put(t, A, "running", n=1), put(t, B, "suspended", n=2)))
        await commit(j, lambda t: put(t, A, "completed", n=3))
        with j.reader() as r:
            row = r.instance(A)
            assert (row.address, row.process, row.status, row.record.input) == (
                "orders/o-1",
                "orders/:id",
                "completed",
                {"n": 3},
            )
            assert [x.iid for x in r.instances(status="completed")] == [A]
            assert [x.iid for x in r.instances(status="suspended")] == [B]
            assert list(r.instances(status="running")) == []
            assert {x.iid for x in r.instances()} == {A, B}
            assert list(r.instances(process="other/:x")) == []
            assert r.count_by_status() == {"completed": 1, "suspended": 1}
            assert r.instance(instance_id("nope")) is None


async def test_set_status_keeps_record_and_moves_index(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: put(t, A, "running", n=1))
        await commit(j, lambda t: t.set_status(A, "suspended"))
        with j.reader() as r:
            assert r.instance(A).status == "suspended"
            assert r.instance(A).record.input == {"n": 1}
            assert r.count_by_status() == {"suspended": 1}


async def test_failed_precondition_writes_nothing(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: put(t, A, "completed"))
        txn = Txn()
        txn.require(A, frozenset({"running", "suspended"}))
        txn.append_message(A, {"late": True})
        txn.put_log(A, 0, 1, "x")
        with pytest.raises(Conflict) as info:
            await j.commit(txn)
        assert info.value.reason == "status" and info.value.status == "completed"
        missing = Txn()
        missing.require(B)
        missing.append_message(B, 1)
        with pytest.raises(Conflict) as info:
            await j.commit(missing)
        assert info.value.reason == "missing"
        with j.reader() as r:
            assert r.mailbox(A) == [] and r.log(A, 0) == {} and r.mailbox(B) == []


async def test_encode_error_before_anything_is_written(make_journal):
    async with make_journal() as j:
        txn = Txn()
        put(txn, A)
        with pytest.raises(EncodeError) as info:
            txn.append_message(A, {"items": [1, object()]})
        assert info.value.path == "payload['items'][1]"
        with j.reader() as r:
            assert r.instance(A) is None


async def test_concurrent_transactions_one_failing_others_commit(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: put(t, A, "running"))
        outcomes = {}

        async def writer(i: int) -> None:
            txn = Txn()
            if i == 7:
                txn.require(B)  # fails: B does not exist
            txn.put_log(A, 0, i, {"i": i})
            try:
                await j.commit(txn)
                outcomes[i] = "ok"
            except Conflict:
                outcomes[i] = "conflict"

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(writer, i)
        assert outcomes[7] == "conflict"
        assert sum(v == "ok" for v in outcomes.values()) == 49
        with j.reader() as r:
            assert sorted(r.log(A, 0)) == [i for i in range(50) if i != 7]


async def test_mailbox_order_take_and_sequence_never_reused(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: put(t, A))
        seqs = []
        for i in range(3):
            seqs += await commit(j, lambda t, i=i: t.append_message(A, {"n": i}))
        assert seqs == sorted(seqs) and len(set(seqs)) == 3
        await commit(j, lambda t: t.take_message(A, seqs[1]))
        with j.reader() as r:
            assert r.mailbox(A) == [(seqs[0], {"n": 0}), (seqs[2], {"n": 2})]
            assert list(r.instances_with_mail()) == [A]
        await commit(j, lambda t: (t.take_message(A, seqs[0]), t.take_message(A, seqs[2])))
        (later,) = await commit(j, lambda t: t.append_message(A, "again"))
        assert later > seqs[2]
        with j.reader() as r:
            assert r.last_message_seq(A) == later and r.last_message_seq(B) == 0
        with j.reader() as r:
            assert r.mailbox(A) == [(later, "again")]


async def test_appends_in_one_transaction_return_results_in_order(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: put(t, A))
        txn = Txn()
        assert txn.append_message(A, "m1") == 0
        assert txn.append_stream(A, "s1") == 1
        assert txn.append_message(A, "m2") == 2
        m1, s1, m2 = await j.commit(txn)
        assert s1 == 0 and m2 == m1 + 1


async def test_log_runs_and_drop(make_journal):
    async with make_journal() as j:

        def build(t):
            put(t, A)
            for run in (0, 1):
                for seq in (1, 2, 300):
                    t.put_log(A, run, seq, {"run": run, "seq": seq})
            t.put_log(B, 0, 1, "other")

        await commit(j, build)
        await commit(j, lambda t: t.put_log(A, 1, 2, {"overwritten": True}))
        with j.reader() as r:
            assert r.log_runs(A) == [0, 1]
            assert list(r.log(A, 1)) == [1, 2, 300]
            assert r.log(A, 1)[2] == {"overwritten": True}
        await commit(j, lambda t: t.drop_log(A, 0))
        with j.reader() as r:
            assert r.log_runs(A) == [1]
            assert r.log(A, 0) == {}
            assert r.log(B, 0) == {1: "other"}


async def test_timers_ordered_by_due_time_and_cancel(make_journal):
    now = time.time()
    async with make_journal() as j:

        def build(t):
            t.add_timer(A, 0, 5, now + 30)
            t.add_timer(B, 0, 1, now - 10)
            t.add_timer(A, 0, 2, now - 5)
            t.add_timer(A, 1, 1, now + 1000)

        await commit(j, build)
        with j.reader() as r:
            due = r.due_timers(now)
            assert [(t.iid, t.run, t.seq) for t in due] == [(B, 0, 1), (A, 0, 2)]
            assert abs(due[0].due - (now - 10)) < 1e-5
            assert abs(r.next_due() - (now - 10)) < 1e-5
            assert [(t.run, t.seq) for t in r.timers(A)] == [(0, 2), (0, 5), (1, 1)]
            assert len(r.due_timers(now + 2000, limit=2)) == 2
            later = r.due_timers(now + 2000, after=now - 5)
            assert [(t.iid, t.run, t.seq) for t in later] == [(A, 0, 5), (A, 1, 1)]
            assert abs(r.next_due(after=now - 5) - (now + 30)) < 1e-5
            assert r.next_due(after=now + 1000) is None
        # Re-adding moves a timer; cancelling removes it; unknown cancels are fine.
        await commit(
            j,
            lambda t: (
                t.add_timer(A, 0, 2, now + 50),
                t.cancel_timer(B, 0, 1),
                t.cancel_timer(B, 9, 9),
            ),
        )
        with j.reader() as r:
            assert r.due_timers(now) == []
            assert [(t.run, t.seq) for t in r.timers(A)] == [(0, 5), (0, 2), (1, 1)]
            assert abs(r.next_due() - (now + 30)) < 1e-5


async def test_stream_and_cursors(make_journal):
    async with make_journal() as j:
        for i in range(5):
            await commit(j, lambda t, i=i: t.append_stream(A, {"v": i}))
        await commit(j, lambda t: (t.set_cursor(A, "billing", 3), t.set_cursor(A, "audit", 0)))
        with j.reader() as r:
            assert r.stream_length(A) == 5
            assert r.stream(A, 3) == [(3, {"v": 3}), (4, {"v": 4})]
            assert r.stream(A, 1, limit=2) == [(1, {"v": 1}), (2, {"v": 2})]
            assert r.cursors(A) == {"billing": 3, "audit": 0}
            assert r.stream_length(B) == 0 and r.cursors(B) == {}


async def test_a_deleted_cursor_is_forgotten(make_journal):
    async with make_journal() as j:
        await commit(
            j,
            lambda t: (
                t.append_stream(A, 1),
                t.set_cursor(A, "billing", 1),
                t.set_cursor(A, "audit", 0),
                t.set_cursor(B, "billing", 0),
            ),
        )
        await commit(j, lambda t: (t.delete_cursor(A, "billing"), t.delete_cursor(A, "nobody")))
        with j.reader() as r:
            assert ({"audit": 0}, {"billing": 0}) == (r.cursors(A), r.cursors(B))
        # In one transaction, the later op wins.
        await commit(j, lambda t: (t.set_cursor(A, "x", 1), t.delete_cursor(A, "x")))
        await commit(j, lambda t: (t.delete_cursor(A, "audit"), t.set_cursor(A, "audit", 1)))
        with j.reader() as r:
            assert {"audit": 1} == r.cursors(A)


async def test_delete_instance_removes_everything(make_journal):
    now = time.time()
    async with make_journal() as j:

        def build(t):
            for iid in (A, B):
                put(t, iid, "completed")
                t.put_log(iid, 0, 1, "e")
                t.append_message(iid, "m")
                t.add_timer(iid, 0, 3, now)
                t.append_stream(iid, "s")
                t.set_cursor(iid, "c", 1)

        await commit(j, build)
        await commit(j, lambda t: t.delete_instance(A))
        with j.reader() as r:
            assert not r.has_records(A)
            assert r.has_records(B)
            assert r.count_by_status() == {"completed": 1}
            assert [t.iid for t in r.due_timers(now + 1)] == [B]


async def test_reopen_reads_everything_back(make_journal):
    now = time.time()
    async with make_journal() as j:

        def build(t):
            put(t, A, "suspended", payload={"x": (1, 2)})
            t.put_log(A, 2, 7, {"ok": 1})
            t.append_message(A, "hello")
            t.add_timer(A, 2, 8, now + 60)
            t.append_stream(A, "v")
            t.set_cursor(A, "c", 1)

        await commit(j, build)
    async with make_journal() as j:
        with j.reader() as r:
            assert r.instance(A).record.input == {"payload": {"x": (1, 2)}}
            assert r.instance(A).status == "suspended"
            assert r.log(A, 2) == {7: {"ok": 1}}
            assert [m for _, m in r.mailbox(A)] == ["hello"]
            assert [(t.run, t.seq) for t in r.timers(A)] == [(2, 8)]
            assert r.stream(A) == [(0, "v")] and r.cursors(A) == {"c": 1}


async def test_second_open_is_refused_and_closed_journal_says_so(make_journal):
    j = make_journal()
    async with j:
        other = make_journal()
        if other is j or type(j).__name__ != "PostgresJournal":
            with pytest.raises(JournalLocked):
                await other.open()
    with pytest.raises(JournalClosed):
        j.submit(Txn())


async def test_flush_and_read_helper(make_journal):
    async with make_journal() as j:
        j.submit(_with(lambda t: put(t, A, "running", n=1)))
        await j.flush()
        assert await j.read(lambda r: r.instance(A).record.input) == {"n": 1}


def _with(build) -> Txn:
    txn = Txn()
    build(txn)
    return txn


async def test_extended_transactions_keep_each_ones_result_slots(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: put(t, A))
        first, second = Txn(), Txn()
        first.append_message(A, "a")
        slot = second.append_message(A, "b")
        second.require(A)
        offset = first.extend(second)
        results = await j.commit(first)
        assert offset == 1 and len(results) == 2
        with j.reader() as r:
            assert dict(r.mailbox(A))[results[offset + slot]] == "b"


async def test_a_deferred_transaction_goes_first_with_the_next_one(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: put(t, A))
        await commit(j, lambda t: put(t, B))
        deferred = j.defer(_with(lambda t: t.append_message(A, "deferred")))
        # Whatever is submitted next, by anyone, is applied after it.
        results = await commit(j, lambda t: t.append_message(A, "next"))
        assert deferred.done
        (first,) = await deferred.wait()
        with j.reader() as r:
            assert [m for _, m in r.mailbox(A)] == ["deferred", "next"]
            assert first < results[0]
        # A deferred transaction fails alone: the one it goes with commits.
        refused = j.defer(_with(lambda t: (t.require(A, {"completed"}), t.append_message(A, "x"))))
        await commit(j, lambda t: t.append_message(B, "b"))
        with pytest.raises(Conflict):
            await refused.wait()
        with j.reader() as r:
            assert [m for _, m in r.mailbox(A)] == ["deferred", "next"]
            assert [m for _, m in r.mailbox(B)] == ["b"]


async def test_a_deferred_transaction_is_sent_by_waiting_flushing_or_closing(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: put(t, A))
        waited = j.defer(_with(lambda t: t.set_cursor(A, "waited", 0)))
        assert await waited.wait() == []
        j.defer(_with(lambda t: t.set_cursor(A, "flushed", 0)))
        await j.flush()
        with j.reader() as r:
            assert r.cursors(A) == {"waited": 0, "flushed": 0}
        j.defer(_with(lambda t: t.set_cursor(A, "submitted", 0)))
        j.submit_deferred()
        j.defer(_with(lambda t: t.set_cursor(A, "closed", 0)))
    async with make_journal() as j:
        with j.reader() as r:
            assert r.cursors(A) == dict.fromkeys(["waited", "flushed", "submitted", "closed"], 0)


# -- a start's compare-and-set (Txn.require_absent, Txn.require(incarnation=))


def incarnated(txn: Txn, iid: bytes, status: str, incarnation: int, **input) -> None:
    address = {A: "orders/o-1", B: "orders/o-2"}[iid]
    txn.put_instance(
        iid,
        address=address,
        process="orders/:id",
        status=status,
        record=InstanceRecord(
            params=[address.rsplit("/", 1)[-1]], input=input, incarnation=incarnation
        ),
    )


def start_over(txn: Txn, iid: bytes, incarnation: int, previous, **input) -> None:
    if previous is None:
        txn.require_absent(iid)
    else:
        txn.require(iid, frozenset({previous[0]}), incarnation=previous[1])
        txn.delete_instance(iid)
    incarnated(txn, iid, "running", incarnation, **input)


async def test_a_start_over_nothing_commits_once(make_journal):
    async with make_journal() as j:
        await commit(
            j, lambda t: (start_over(t, A, 1, None, who="first"), t.append_message(A, "m1"))
        )
        with pytest.raises(Conflict) as info:
            await commit(j, lambda t: start_over(t, A, 1, None, who="second"))
        assert ("exists", "running") == (info.value.reason, info.value.status)
        with j.reader() as r:
            assert {"who": "first"} == r.instance(A).record.input
            assert ["m1"] == [m for _, m in r.mailbox(A)]


async def test_a_start_replaces_only_the_incarnation_it_read(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: incarnated(t, A, "cancelled", 1))
        # Two starts read incarnation 1, cancelled; the first to commit wins.
        await commit(
            j,
            lambda t: (
                start_over(t, A, 2, ("cancelled", 1), who="first"),
                t.append_message(A, "kept"),
            ),
        )
        with pytest.raises(Conflict) as info:
            await commit(j, lambda t: start_over(t, A, 2, ("cancelled", 1), who="second"))
        assert ("status", "running") == (info.value.reason, info.value.status)
        # Incarnation 2 ends cancelled too: a late start that read incarnation
        # 1 must still not replace it (nor its mailbox).
        await commit(j, lambda t: incarnated(t, A, "cancelled", 2, who="first"))
        with pytest.raises(Conflict) as info:
            await commit(j, lambda t: start_over(t, A, 2, ("cancelled", 1), who="late"))
        assert ("incarnation", "cancelled") == (info.value.reason, info.value.status)
        with j.reader() as r:
            row = r.instance(A)
            assert (2, {"who": "first"}) == (row.record.incarnation, row.record.input)
            assert ["kept"] == [m for _, m in r.mailbox(A)]
        # A completed instance is never replaced by a start that read it cancelled.
        await commit(j, lambda t: incarnated(t, B, "completed", 4, who="done"))
        with pytest.raises(Conflict) as info:
            await commit(j, lambda t: start_over(t, B, 5, ("cancelled", 4)))
        assert "status" == info.value.reason
        # And one that read it absent fails too; nothing of either is written.
        with pytest.raises(Conflict):
            await commit(j, lambda t: (start_over(t, B, 1, None), t.append_message(B, "no")))
        with j.reader() as r:
            row = r.instance(B)
            assert ("completed", 4, {"who": "done"}) == (
                row.status,
                row.record.incarnation,
                row.record.input,
            )
            assert [] == list(r.mailbox(B))


async def test_starts_of_one_address_in_one_batch_commit_once(make_journal):
    async with make_journal() as j:
        await commit(j, lambda t: incarnated(t, B, "cancelled", 3))
        txns = []
        for n in range(4):
            txn = Txn()
            start_over(txn, A, 1, None, n=n)
            txn.append_message(A, n)
            txns.append(txn)
            txn = Txn()
            start_over(txn, B, 4, ("cancelled", 3), n=n)
            txn.append_message(B, n)
            txns.append(txn)
        tickets = [j.submit(t) for t in txns]  # one batch
        outcomes = []
        for ticket in tickets:
            try:
                await ticket.wait()
                outcomes.append("ok")
            except Conflict:
                outcomes.append("lost")
        assert ["ok", "ok"] + ["lost"] * 6 == outcomes
        with j.reader() as r:
            assert [0] == [m for _, m in r.mailbox(A)]
            assert [0] == [m for _, m in r.mailbox(B)]
            assert {"n": 0} == r.instance(B).record.input


async def test_what_a_commit_writes_its_caller_learns_or_is_told_it_may_have(make_journal):
    """`Journal.commit`'s invariant, under cancels at every point: a
    transaction that is written either returns to its committer (with its
    ``then`` run first) or has its ``in_doubt`` called; one cancelled
    before it is submitted writes nothing and is not doubted."""
    iids = [instance_id(f"orders/c-{n}") for n in range(42)]
    returned: set[int] = set()
    doubted: set[int] = set()
    handed: set[int] = set()

    async def one(n: int, checkpoints: int | None) -> None:
        txn = Txn()
        put(txn, iids[n])
        txn.append_message(iids[n], n)  # (routed: its caller waits, whatever the durability)
        txn.routed = True
        txn.then = lambda results: handed.add(n)
        txn.in_doubt = lambda t: doubted.add(n)
        with trio.CancelScope() as scope:

            async def cancel_soon() -> None:
                for _ in range(checkpoints):
                    await trio.lowlevel.checkpoint()
                scope.cancel()

            if checkpoints is None:
                pass  # never cancelled
            elif checkpoints < 0:
                scope.cancel()  # cancelled before it commits
            else:
                nursery.start_soon(cancel_soon)
            await j.commit(txn)
            returned.add(n)

    async with make_journal() as j:
        async with trio.open_nursery() as nursery:
            for n in range(len(iids)):
                # -1: at once; 0-3: after as many checkpoints; None: never
                nursery.start_soon(one, n, [-1, 0, 1, 2, 3, None][n % 6])
        await j.flush()
        with j.reader() as r:
            written = {n for n, iid in enumerate(iids) if r.instance(iid) is not None}
    assert returned <= written  # what returned is written, and was handed on first
    assert returned <= handed
    assert written <= returned | doubted  # what is written, its caller knows or was told
    assert not {n for n in range(0, len(iids), 6)} & (written | doubted)  # cancelled before
    assert set(range(5, len(iids), 6)) <= returned  # never cancelled
