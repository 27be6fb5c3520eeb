"""`Txn.require_no_cursor` on every journal: of transactions that set one
cursor on condition that it is absent, one commits, within a batch and
across batches; the others fail with `Conflict` (reason ``"cursor"``) and
write nothing. (A send key is such a cursor: see actors._kernel._message_txns.send_txn.)
"""

from __future__ import annotations

import pytest

from storage import Conflict, InstanceRecord, Txn, instance_id

A = instance_id("orders/o-1")
B = instance_id("orders/o-2")


def put(txn: Txn, iid: bytes) -> None:
    txn.put_instance(
        iid, address=iid.hex(), process="orders/:id", status="suspended", record=InstanceRecord()
    )


def keyed(iid: bytes, name: str, message: object) -> Txn:
    txn = Txn()
    txn.require(iid)
    txn.require_no_cursor(iid, name)
    txn.append_message(iid, message)
    txn.set_cursor(iid, name, 0)
    return txn


async def outcomes(journal, txns: list[Txn]) -> list[str]:
    tickets = [journal.submit(t) for t in txns]  # one batch, where the journal batches
    found = []
    for ticket in tickets:
        try:
            await ticket.wait()
            found.append("ok")
        except Conflict as exc:
            found.append(exc.reason)
    return found


@pytest.mark.parametrize("savepoints", [False, True], ids=["fast", "savepoints"])
async def test_a_cursor_required_absent_is_set_once(make_journal, savepoints):
    async with make_journal() as j:
        writer = getattr(j, "_writer", None)
        if savepoints:
            if not hasattr(writer, "force_savepoints"):
                pytest.skip("only the PostgreSQL journal has a savepoint path")
            writer.force_savepoints = True
        txn = Txn()
        put(txn, A)
        put(txn, B)
        await j.commit(txn)
        batch = [keyed(A, "k", 1), keyed(A, "k", 2), keyed(A, "j", 3), keyed(B, "k", 4)]
        assert ["ok", "cursor", "ok", "ok"] == await outcomes(j, batch)
        assert ["cursor"] == await outcomes(j, [keyed(A, "k", 5)])
        # A deleted cursor, or one deleted with its instance, may be set again.
        forget = Txn()
        forget.delete_cursor(A, "j")
        again = Txn()
        again.delete_instance(B)
        put(again, B)
        await j.commit(forget)
        await j.commit(again)
        assert ["ok", "cursor", "ok"] == await outcomes(
            j, [keyed(A, "j", 6), keyed(A, "j", 7), keyed(B, "k", 8)]
        )
        # In one batch, a transaction that deletes it lets the next set it.
        drop = Txn()
        drop.require(A)
        drop.delete_cursor(A, "k")
        assert ["ok", "ok", "cursor"] == await outcomes(
            j, [drop, keyed(A, "k", 9), keyed(A, "k", 10)]
        )
        with j.reader() as r:
            assert [1, 3, 6, 9] == [m for _, m in r.mailbox(A)]
            assert [8] == [m for _, m in r.mailbox(B)]
            assert {"k": 0, "j": 0} == r.cursors(A)
