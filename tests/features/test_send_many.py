"""``system.send_many``: many messages in one durable commit, all or none."""

from __future__ import annotations

import pytest

import actors
from actors import Context, Signal, process
from storage import instance_id
from tests.runtime_helpers import Opener, wait_status

item = Signal("item")
done = Signal("done")


@process("bag/:id")
async def bag(ctx: Context, id: str) -> list:
    """Collect ``item`` payloads until ``done``."""
    got = []
    while True:
        signal, payload = await ctx.receive(item, done)
        if signal == done:
            return got
        got.append(payload)


@process("quick/:id")
async def quick(ctx: Context, id: str) -> str:
    return "over"


@pytest.fixture(params=["lmdb", "memory"])
def opener(request, tmp_path):
    return Opener(tmp_path, request.param)


async def _mailbox(system, address: str) -> list:
    return await system.journal.read(lambda r: r.mailbox(instance_id(address)))


async def test_a_batch_reaches_every_address_in_order_and_survives_a_restart(
    opener, autojump_clock
):
    async with opener(bag) as system:
        for name in "abc":
            await system.start(bag, name)
        await system.send_many(
            [(f"bag/{name}", item, (name, k)) for k in range(3) for name in "abc"]
        )
    async with opener(bag) as system:  # reopened: the batch was durable
        await system.send_many([(f"bag/{name}", done, None) for name in "abc"])
        for name in "abc":  # (the codec keeps tuples tuples)
            assert await system.get(f"bag/{name}").result() == [(name, k) for k in range(3)]


async def test_one_finished_address_stores_none_of_the_batch(opener, autojump_clock):
    async with opener(bag, quick) as system:
        await system.start(bag, "a")
        await system.start(bag, "b")
        over = await system.start(quick, "q")
        assert await over.result() == "over"
        with pytest.raises(actors.NotDelivered) as info:
            await system.send_many([("bag/a", item, 1), ("quick/q", item, 2), ("bag/b", item, 3)])
        assert info.value.address == "quick/q" and info.value.reason == "completed"
        with pytest.raises(actors.NotDelivered) as info:
            await system.send_many([("bag/a", item, 1), ("bag/nobody", item, 2)])
        assert info.value.address == "bag/nobody" and info.value.reason == "unknown"
        # Nothing of either batch was stored: the processes see only what follows.
        await system.send_many([("bag/a", item, "x"), ("bag/a", done, None), ("bag/b", done, None)])
        assert await system.get("bag/a").result() == ["x"]
        assert await system.get("bag/b").result() == []


async def test_a_payload_that_does_not_encode_stores_nothing_and_names_its_place(
    opener, autojump_clock
):
    async with opener(bag) as system:
        await system.start(bag, "a")
        with pytest.raises(actors.EncodeError) as info:
            await system.send_many(
                [("bag/a", item, 1), ("bag/a", item, 2), ("bag/a", item, object())]
            )
        assert "message 2 of the 3" in "".join(getattr(info.value, "__notes__", []))
        assert await _mailbox(system, "bag/a") == []
        with pytest.raises(actors.LimitExceeded):
            await system.send_many([("bag/a", item, 1), ("bag/a", item, "x" * 2_000_000)])
        assert await _mailbox(system, "bag/a") == []


async def test_bad_items_are_refused_before_anything_is_written(opener, autojump_clock):
    async with opener(bag) as system:
        await system.start(bag, "a")
        for bad, words in (
            ([("bag/a", "item", 1)], "item 0"),
            ([("bag/a", item, 1), ("bag/a", item)], "item 1"),
            ([("", item, 1)], "address"),
        ):
            with pytest.raises(actors.InvalidArguments, match=words):
                await system.send_many(bad)
        await system.send_many([])  # nothing to send: nothing happens
        await system.send_many(iter([("bag/a", item, 5)]))  # any iterable
        await system.send("bag/a", done)
        assert await system.get("bag/a").result() == [5]
        await wait_status(system.get("bag/a"), "completed")
