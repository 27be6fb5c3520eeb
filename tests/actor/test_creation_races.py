"""Mail committed to an instance between the commit of its record and the
making of its actor (a start, a child's creation, a queue's admission):
the sender finds no actor and asks for an activation. The creator, woken
by the same commit, makes the actor first (the activation's task starts
in a later pass of the scheduler), and must not leave the message unread.
(Found by a test of ctx.call that sent to the child as soon as it existed:
one run in a few hundred hung under load.)"""

from __future__ import annotations

import trio

from actors import Context, Signal, process
from actors._kernel import _transactions
from storage import instance_id

go = Signal("go")


@process("echo/:name")
async def echo(ctx: Context, name: str) -> str:
    return f"{name} got {await ctx.wait(go)}"


async def test_mail_sent_while_an_instance_is_being_created_is_taken_once(any_opener):
    async with any_opener(echo) as system:
        address = "echo/r"
        iid = instance_id(address)
        # What a start does, cut at its seam: the record is committed ...
        start = _transactions.start_txn(
            iid,
            address=address,
            process=echo.template,
            params=["r"],
            input={},
            parent=None,
            previous=None,
            now=system.epoch_now(),
        )
        await system.journal.commit(start.txn)
        # ... a sender commits a message and finds no actor to hand it to ...
        await system.send(address, go, "early")
        # ... and then the creator makes the actor.
        actor = system.registry.run_created(iid, address, echo, start.record)
        assert system.registry.live.get(iid) is actor  # one actor, whichever came first
        with trio.fail_after(5):
            assert await system.get(address).result() == "r got early"
