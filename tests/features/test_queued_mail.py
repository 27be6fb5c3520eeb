"""Mail for a queued instance: it exists, so what is sent to it (send, a
keyed send, send_many, an ask) is stored in its mailbox and read once it
runs, like an early message to any instance; across a close and reopen too,
and from another node."""

from __future__ import annotations

import os

import pytest
import trio

import actors
from actors import Context, Queue, process
from storage import LMDBJournal, MemoryJournal, instance_id

HELLO = actors.Signal("hello")
ASK = actors.Signal("ask")


def clock() -> float:
    """Epoch time that carries on with virtual time across reopens."""
    return 1_700_000_000.0 + trio.current_time()


@process("blocker/:name")
async def blocker(ctx: Context, name: str, *, seconds: float) -> str:
    await ctx.sleep(seconds)
    return name


@process("mailer/:name")
async def mailer(ctx: Context, name: str, *, count: int = 1) -> list:
    got = []
    for _ in range(count):
        _, payload = await ctx.receive(HELLO)
        got.append(payload)
    return got


@process("answerer/:name")
async def answerer(ctx: Context, name: str) -> str:
    _, payload = await ctx.receive(ASK)
    await ctx.reply(f"answer to {payload}")
    return "done"


@pytest.fixture(params=["memory", "lmdb"])
def journal(request, tmp_path):
    if request.param == "memory":
        shared = MemoryJournal()
        return lambda: shared
    return lambda: LMDBJournal(tmp_path / "j")


async def test_mail_sent_while_queued_is_read_once_it_runs(journal, autojump_clock):
    q = Queue("one", concurrency=1)
    async with actors.open_system(journal(), processes=[blocker, mailer], queues=[q]) as system:
        await system.start(blocker, "b", queue=q, seconds=5.0)
        handle = await system.start(mailer, "m", queue=q, count=4)
        assert "queued" == handle.status
        await system.send("mailer/m", HELLO, 1)
        await system.send("mailer/m", HELLO, 2, key="k2")
        await system.send("mailer/m", HELLO, 2, key="k2")  # the same key: stored once
        await system.send_many([("mailer/m", HELLO, 3), ("mailer/m", HELLO, 4)])
        assert "queued" == handle.status
        assert [1, 2, 3, 4] == await handle.result()


async def test_mail_sent_while_queued_survives_a_reopen(journal, autojump_clock):
    q = Queue("one", concurrency=1)
    async with actors.open_system(
        journal(), processes=[blocker, mailer], queues=[q], now=clock
    ) as system:
        await system.start(blocker, "b", queue=q, seconds=5.0)
        await system.start(mailer, "m", queue=q, count=2)
        await system.send("mailer/m", HELLO, "before")
    async with actors.open_system(
        journal(), processes=[blocker, mailer], queues=[q], now=clock
    ) as system:
        handle = system.get("mailer/m")
        await system.send("mailer/m", HELLO, "after")
        assert ["before", "after"] == await handle.result()


async def test_an_ask_to_a_queued_instance_waits_for_it_to_run(journal, autojump_clock):
    q = Queue("one", concurrency=1)
    async with actors.open_system(journal(), processes=[blocker, answerer], queues=[q]) as system:
        await system.start(blocker, "b", queue=q, seconds=5.0)
        await system.start(answerer, "a", queue=q)
        t0 = trio.current_time()
        assert "answer to 7" == await system.ask("answerer/a", ASK, 7, timeout=60)
        assert trio.current_time() - t0 >= 5  # it waited for the blocker's slot
        # Bounded by its timeout when the slot does not come in time.
        await system.start(blocker, "b2", queue=q, seconds=100.0)
        await system.start(answerer, "a2", queue=q)
        with pytest.raises(actors.AskTimeout):
            await system.ask("answerer/a2", ASK, 8, timeout=10)


async def test_a_cancelled_queued_instance_takes_no_more_mail(journal, autojump_clock):
    q = Queue("one", concurrency=1)
    async with actors.open_system(journal(), processes=[blocker, mailer], queues=[q]) as system:
        await system.start(blocker, "b", queue=q, seconds=5.0)
        await system.start(mailer, "m", queue=q)
        assert await system.cancel("mailer/m")
        with pytest.raises(actors.NotDelivered) as caught:
            await system.send("mailer/m", HELLO, 1)
        assert "cancelled" == caught.value.reason


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0", reason="PostgreSQL off")
async def test_mail_from_another_node_for_an_instance_queued_here(request):
    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)
    q = Queue("one", concurrency=1)
    procs = [blocker, mailer]
    async with (
        actors.open_system(
            PostgresJournal(dsn, schema=schema), processes=procs, queues=[q], node="a"
        ) as a,
        actors.open_system(
            PostgresJournal(dsn, schema=schema), processes=procs, queues=[q], node="b"
        ) as b,
    ):
        await a.start(blocker, "b", queue=q, seconds=1.0)
        handle = await a.start(mailer, "m", queue=q, count=2)
        await b.send("mailer/m", HELLO, "from b")
        await a.send("mailer/m", HELLO, "from a")
        with trio.fail_after(30):
            assert ["from b", "from a"] == await handle.result()


async def test_an_admitted_instance_that_mail_ran_and_ended_first_is_not_run_again(
    journal, autojump_clock
):
    # Between a queue's admission commit (the instance is running from then
    # on) and its pump running the instance, mail can activate it, and it
    # can run to its end. The pump must then run nothing: started again
    # from the record it read before the admission, a second actor waited
    # for mail that was taken and wrote "suspended" over the completed end
    # (its result kept, nothing left to wake it). Here the pump's call is
    # held back until that has happened.
    q = Queue("one", concurrency=1)
    address = "mailer/m"
    async with actors.open_system(journal(), processes=[mailer], queues=[q]) as system:
        async with trio.open_nursery() as nursery:
            pumps = system.queues  # (handed `Registry.run_admitted`: the pump's call)
            run_admitted = pumps.run_admitted
            done = trio.Event()

            async def mail_first(row, epoch):
                await system.send(address, HELLO, "first")  # mail activates it
                assert ["first"] == await system.get(address).result()
                run_admitted(row, epoch)  # the pump's call, late
                done.set()

            pumps.run_admitted = lambda row, epoch: nursery.start_soon(mail_first, row, epoch)
            with trio.fail_after(60):  # (the bug it guards against hangs)
                handle = await system.start(mailer, "m", queue=q)
                assert ["first"] == await handle.result()
                await done.wait()
            await trio.sleep(1)  # whatever the late call started has run
        with system.journal.reader() as r:
            assert "completed" == r.instance(instance_id(address)).status
        assert "completed" == system.get(address).status
