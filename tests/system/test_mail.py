"""Poison messages: `ActorSystem.mail` lists an instance's unread messages,
`drop_message` moves one to the address's dead letters (kept until
cleanup), and an instance that crashed past its restart limit on a message
records which one it was handling. Through the public API on every journal
(LMDB and PostgreSQL among them), across a close and reopen."""

from __future__ import annotations

import collections

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import open_test_system

item = Signal("item")
other = Signal("other")
HANDLED: collections.Counter[str] = collections.Counter()


@pytest.fixture(autouse=True)
def _fresh():
    HANDLED.clear()


def handle(payload: str) -> str:
    HANDLED[payload] += 1
    if payload.startswith("bad"):
        raise ValueError(f"cannot parse {payload!r}")
    return payload


@process("inbox/:id", restart="transient")
async def inbox(ctx: Context, id: str) -> None:
    while True:
        payload = await ctx.wait(item)
        await ctx.step(handle, payload)


@process("picky/:id")
async def picky(ctx: Context, id: str) -> str:
    return await ctx.wait(item)  # never takes "other"


async def until_status(system, address, *statuses):
    with trio.fail_after(30):
        while system.get(address).status not in statuses:
            await trio.sleep(0.01)


async def test_mail_lists_unread_messages_and_a_drop_keeps_them_in_dead_letters(make_journal):
    async with actors.open_system(make_journal(), processes=[picky]) as system:
        await system.start(picky, "p-1")
        await system.send("picky/p-1", other, {"n": 1})
        await system.send("picky/p-1", other, {"n": 2})
        await until_status(system, "picky/p-1", "suspended")
        mail = await system.mail("picky/p-1")
        assert [("other", {"n": 1}), ("other", {"n": 2})] == [(m.signal, m.payload) for m in mail]
        assert all(isinstance(m.sent, float) for m in mail)
        dropped = await system.drop_message("picky/p-1", mail[0].id)
        assert mail[0] == dropped
        with pytest.raises(
            actors.InvalidArguments,
            match=r"has no unread message #\d+; "
            r"'actors mail picky/p-1' lists the unread ones",
        ):
            await system.drop_message("picky/p-1", mail[0].id)
        with pytest.raises(actors.InvalidArguments, match="a message id"):
            await system.drop_message("picky/p-1", "1")  # type: ignore[arg-type]
        with pytest.raises(actors.NotDelivered, match="no instance at 'picky/none'"):
            await system.mail("picky/none")
    async with actors.open_system(make_journal(), processes=[picky]) as system:
        assert [mail[1]] == await system.mail("picky/p-1")
        (letter,) = await system.dropped("picky/p-1")
        assert (mail[0], 1) == (letter.message, letter.incarnation)
        # The instance carries on as it was, and never takes the dropped one.
        await system.send("picky/p-1", item, "go")
        assert "go" == await system.get("picky/p-1").result()
        assert 1 == system.get("picky/p-1").incarnation
        # A cleanup that removes the instance removes its dead letters: the
        # address is as unknown to `dropped` as to `mail` (letters left
        # behind would be returned, not refused).
        assert 1 == await system.cleanup(older_than=0)
        with pytest.raises(actors.NotDelivered, match="no instance at 'picky/p-1'"):
            await system.dropped("picky/p-1")


@process("sleepy/:id")
async def sleepy(ctx: Context, id: str) -> str:
    await ctx.sleep(60)
    return await ctx.wait(item)


async def test_a_drop_from_an_instance_in_memory_is_never_taken(autojump_clock):
    async with open_test_system(processes=[sleepy], passivate_after=3600) as system:
        handle = await system.start(sleepy, "s-1")
        await system.send("sleepy/s-1", item, "poison")
        await system.send("sleepy/s-1", item, "ok")
        await until_status(system, "sleepy/s-1", "suspended")
        assert system.registry.live  # it sleeps in memory, its mail with it
        bad = (await system.mail("sleepy/s-1"))[0]
        assert "poison" == bad.payload
        await system.drop_message("sleepy/s-1", bad.id)
        assert "ok" == await handle.result()
        assert [] == await system.mail("sleepy/s-1")
        assert ["poison"] == [d.message.payload for d in await system.dropped("sleepy/s-1")]


async def test_an_instance_that_crashed_past_its_limit_names_the_message(make_journal):
    async with actors.open_system(make_journal(), processes=[inbox]) as system:
        handle = await system.start(inbox, "i-1")
        await system.send("inbox/i-1", item, "good")
        for n in range(4):  # each crashes it; the fourth within 5 s is past the limit
            await system.send("inbox/i-1", item, f"bad {n}")
        await system.send("inbox/i-1", item, "later")
        with trio.fail_after(30):
            await until_status(system, "inbox/i-1", "failed")
        assert 3 == len(handle.restarts)
        unread = [m.payload for m in await system.mail("inbox/i-1")]
        assert ["later"] == unread
    async with actors.open_system(make_journal(), processes=[inbox]) as system:
        poison = await system.poison("inbox/i-1")
        assert poison is not None
        assert ("item", "bad 3") == (poison.signal, poison.payload)
        # Dropped to the dead letters, it is not put back by a fork from
        # before it: the forked run takes the next message instead.
        assert poison == await system.drop_message("inbox/i-1", poison.id)
        assert ["bad 3"] == [d.message.payload for d in await system.dropped("inbox/i-1")]
        forked = await system.fork("inbox/i-1", from_effect=0)
        await until_status(system, "inbox/i-1", "suspended")
        assert 1 == HANDLED["later"]
        assert 1 == HANDLED["bad 3"]
        assert [] == await system.mail("inbox/i-1")
        assert 2 == forked.incarnation
