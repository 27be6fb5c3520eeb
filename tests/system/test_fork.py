"""`ActorSystem.fork`: an ended instance runs again from a point in its log,
its kept steps never run again; refused when the kept part does not replay
on the current code or the source is live. Through the public API on every
journal (LMDB and PostgreSQL among them), across a close and reopen."""

from __future__ import annotations

import collections

import pytest
import trio

import actors
from actors import Context, Signal, process

item = Signal("item")
stop = Signal("stop")
RAN: collections.Counter[str] = collections.Counter()
BUG: set[str] = set()


@pytest.fixture(autouse=True)
def _fresh():
    RAN.clear()
    BUG.clear()


def reserve(order_id: str) -> str:
    RAN["reserve"] += 1
    return f"reserved {order_id}"


def charge_card(order_id: str) -> str:
    RAN["charge_card"] += 1
    return f"charged {order_id}"


def refund(order_id: str) -> None:
    RAN["refund"] += 1


def ship(order_id: str) -> str:
    RAN["ship"] += 1
    if "ship" in BUG:
        raise RuntimeError("the label printer rejects the address")
    return f"shipped {order_id}"


@process("orders/:order_id")
async def order(ctx: Context, order_id: str, *, amount: int = 1) -> dict:
    reserved = await ctx.step(reserve, order_id)  # effect 1
    charged = await ctx.step(charge_card, order_id, compensate=refund)  # effect 2
    await ctx.emit(charged)  # effect 3
    shipped = await ctx.step(ship, order_id)  # effect 4
    return {"amount": amount, "steps": [reserved, charged, shipped]}


@process("legs/:trip/:leg")
async def leg(ctx: Context, trip: str, leg: str) -> str:
    RAN[f"leg {leg}"] += 1
    return f"{trip}-{leg}"


@process("watchers/:id")
async def watcher(ctx: Context, id: str) -> str:
    RAN["watcher"] += 1
    return await ctx.wait(stop)


@process("trips/:id")
async def trip(ctx: Context, id: str) -> list[str]:
    a = await ctx.call(leg, id, "a")  # effect 1: kept
    await ctx.spawn(watcher, id)  # effect 2: of the discarded part
    b = await ctx.call(leg, id, "b")  # effect 3: of the discarded part
    await ctx.step(ship, id)  # effect 4
    return [a, b]


@process("inbox/:id")
async def inbox(ctx: Context, id: str) -> list[str]:
    first = await ctx.wait(item)  # effect 1
    second = await ctx.wait(item)  # effect 2
    await ctx.step(ship, f"{first}+{second}")  # effect 3
    return [first, second]


@process("waits/:id")
async def waits(ctx: Context, id: str) -> str:
    return await ctx.wait(stop)


PROCESSES = [order, leg, watcher, trip, inbox, waits]


async def failed(system, proc, *params, **input):
    BUG.add("ship")
    handle = await system.start(proc, *params, **input)
    with pytest.raises(actors.ProcessFailed):
        await handle.result()
    BUG.clear()
    return handle


async def test_fork_keeps_the_outcomes_before_the_fork_point(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, order, "o-1", amount=3)
        assert {"reserve": 1, "charge_card": 1, "ship": 1, "refund": 1} == RAN
    # The fixed code is deployed: a new system on the same journal.
    RAN.clear()
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        with pytest.raises(
            actors.InvalidArguments,
            match=r"the kept step 'charge_card' \(effect "
            r"2\) was compensated when it ended.*from_effect=1",
        ):
            await system.fork("orders/o-1", from_effect=2)
        handle = await system.fork("orders/o-1", from_effect=1)
        assert 2 == handle.incarnation
        result = await handle.result()
        assert ["reserved o-1", "charged o-1", "shipped o-1"] == result["steps"]
        assert 3 == result["amount"]
        # The step before the fork point ran 0 more times; those after it, once.
        assert {"charge_card": 1, "ship": 1} == RAN


@process("orders/:order_id")
async def order_no_compensation(ctx: Context, order_id: str, *, amount: int = 1) -> dict:
    reserved = await ctx.step(reserve, order_id)
    charged = await ctx.step(charge_card, order_id)
    await ctx.emit(charged)
    shipped = await ctx.step(ship, order_id)
    return {"amount": amount, "steps": [reserved, charged, shipped]}


async def test_fork_after_a_step_by_name_with_new_input_survives_a_reopen(make_journal):
    procs = [order_no_compensation]
    async with actors.open_system(make_journal(), processes=procs) as system:
        await failed(system, order_no_compensation, "o-2", amount=3)
    RAN.clear()
    async with actors.open_system(make_journal(), processes=procs) as system:
        handle = await system.fork("orders/o-2", after_step="charge_card", input={"amount": 9})
        assert 2 == handle.incarnation
    # Closed before the forked run could be waited for: it resumes on the next open.
    async with actors.open_system(make_journal(), processes=procs) as system:
        handle = system.get("orders/o-2")
        result = await handle.result()
        assert 9 == result["amount"]
        assert ["reserved o-2", "charged o-2", "shipped o-2"] == result["steps"]
        assert 0 == RAN["reserve"] + RAN["charge_card"]
        assert 1 == RAN["ship"]
        # The value emitted before the fork point is kept, once.
        async with system.stream("orders/o-2", consumer="audit") as stream:
            seen = []
            with trio.move_on_after(1):
                async for value in stream:
                    seen.append(value)
        assert ["charged o-2"] == seen


@process("orders/:order_id")
async def order_changed(ctx: Context, order_id: str, *, amount: int = 1) -> dict:
    # The deployed code renamed the first step: a history up to it does not replay.
    reserved = await ctx.step(charge_card, order_id, name="hold_stock")
    shipped = await ctx.step(ship, order_id)
    return {"amount": amount, "steps": [reserved, shipped]}


async def test_fork_is_refused_where_the_kept_part_does_not_replay(make_journal):
    async with actors.open_system(make_journal(), processes=[order_no_compensation]) as system:
        await failed(system, order_no_compensation, "o-3")
    async with actors.open_system(make_journal(), processes=[order_changed]) as system:
        with pytest.raises(
            actors.InvalidArguments,
            match=r"cannot fork 'orders/o-3' from "
            r"effect 2: the kept part does not replay on the current code "
            r"\(.*\); fork from an earlier effect",
        ):
            await system.fork("orders/o-3", from_effect=2)
        assert "failed" == system.get("orders/o-3").status  # nothing was written
        assert 1 == system.get("orders/o-3").incarnation
        handle = await system.fork("orders/o-3", from_effect=0)  # nothing kept: it replays
        assert ["charged o-3", "shipped o-3"] == (await handle.result())["steps"]


async def test_what_cannot_be_forked_is_refused_with_what_to_do(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        live = await system.start(waits, "w-1")
        with pytest.raises(
            actors.InvalidArguments,
            match=r"cannot fork 'waits/w-1': it is "
            r"(running|suspended).*wait for it to end, or cancel it first",
        ):
            await system.fork("waits/w-1", from_effect=0)
        await failed(system, order, "o-4")
        with pytest.raises(
            actors.InvalidArguments,
            match=r"its log ends at position 4; fork "
            r"from 0 to 4",
        ):
            await system.fork("orders/o-4", from_effect=5)
        with pytest.raises(actors.InvalidArguments, match="a log position >= 0"):
            await system.fork("orders/o-4", from_effect=-1)
        with pytest.raises(actors.InvalidArguments, match=r"one of from_effect= .* or after_step="):
            await system.fork("orders/o-4")
        with pytest.raises(actors.InvalidArguments, match="no outcome of a step of that name"):
            await system.fork("orders/o-4", after_step="nope")
        with pytest.raises(actors.NotDelivered, match="no instance at 'orders/none' to fork"):
            await system.fork("orders/none", from_effect=0)
        with pytest.raises(actors.InvalidArguments, match=r"to 'waits/w-1'.* does not make"):
            await system.fork("orders/o-4", from_effect=1, to="waits/w-1")
        await system.cancel("waits/w-1")
        # A cancelled source is forked (from nothing: it waits again).
        again = await system.fork("waits/w-1", from_effect=0)
        assert 2 == again.incarnation
        await system.send("waits/w-1", stop, "now")
        assert "now" == await again.result()
        assert 1 == live.incarnation


def price(amount: int) -> int:
    RAN["price"] += 1
    return amount * 100


@process("carts/:id")
async def cart(ctx: Context, id: str, *, amount: int = 1) -> dict:
    cents = await ctx.step(price, amount)  # effect 1: its arguments are the input's
    shipped = await ctx.step(ship, id)  # effect 2
    return {"cents": cents, "shipped": shipped}


async def test_fork_to_another_address_leaves_the_source(make_journal):
    async with actors.open_system(make_journal(), processes=[*PROCESSES, cart]) as system:
        await failed(system, cart, "c-5", amount=2)
        RAN.clear()
        copy = await system.fork("carts/c-5", from_effect=1, to="carts/c-5-debug")
        assert ("carts/c-5-debug", 1) == (copy.id, copy.incarnation)
        assert {"cents": 200, "shipped": "shipped c-5-debug"} == await copy.result()
        assert {"ship": 1} == RAN  # the price step was kept
        source = system.get("carts/c-5")
        assert ("failed", 1) == (source.status, source.incarnation)
        # A completed instance at the target is never run again.
        with pytest.raises(
            actors.InvalidArguments,
            match=r"there is an instance there, and it "
            r"completed",
        ):
            await system.fork("carts/c-5", from_effect=1, to="carts/c-5-debug")
        # The new address's params are its own: a kept step that took the
        # source's does not replay there, and the fork is refused.
        await failed(system, order, "o-6")
        with pytest.raises(actors.InvalidArguments, match=r"does not replay on the current code"):
            await system.fork("orders/o-6", from_effect=1, to="orders/o-7")
        assert system.get("orders/o-7") is None


async def test_children_of_the_discarded_part_start_afresh(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, trip, "t-1")
        assert {"leg a": 1, "leg b": 1, "watcher": 1, "ship": 1} == RAN
        # The parent's end cancelled its live child (the watcher).
        assert "cancelled" == system.get("trips/t-1/watchers/t-1").status
        assert "completed" == system.get("trips/t-1/legs/t-1/b").status
    RAN.clear()
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        handle = await system.fork("trips/t-1", from_effect=1)
        assert ["t-1-a", "t-1-b"] == await handle.result()
        # The kept call's child gave its recorded result; the discarded part's
        # children started afresh, each as a new incarnation.
        assert 1 == RAN["leg b"] and 1 == RAN["ship"] and 0 == RAN["leg a"]
        assert 2 == system.get("trips/t-1/legs/t-1/b").incarnation
        assert 1 == system.get("trips/t-1/legs/t-1/a").incarnation
        watcher_now = system.get("trips/t-1/watchers/t-1")
        assert 2 == watcher_now.incarnation
        # The parent completed, so its live watcher was cancelled again.
        assert "cancelled" == watcher_now.status
    # A kept call's child cannot move to another address.
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, trip, "t-2")
        with pytest.raises(
            actors.InvalidArguments,
            match=r"the kept part made the child "
            r"'trips/t-2/legs/t-2/a' \(effect 1\), which belongs to 'trips/t-2'",
        ):
            await system.fork("trips/t-2", from_effect=1, to="trips/t-3")


async def test_messages_the_discarded_part_took_are_put_back(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        BUG.add("ship")
        handle = await system.start(inbox, "i-1")
        await system.send("inbox/i-1", item, "first")
        await system.send("inbox/i-1", item, "second")
        await system.send("inbox/i-1", item, "third")  # unread when it fails
        with pytest.raises(actors.ProcessFailed):
            await handle.result()
        BUG.clear()
        assert ["third"] == [m.payload for m in await system.mail("inbox/i-1")]
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        again = await system.fork("inbox/i-1", from_effect=1)  # keeps "first"
        assert ["first", "second"] == await again.result()
        assert ["third"] == [m.payload for m in await system.mail("inbox/i-1")]
        (left,) = await system.mail("inbox/i-1")
        assert ("item", "third") == (left.signal, left.payload)


@process("slow/:id")
async def slow_leg(ctx: Context, id: str) -> str:
    return await ctx.wait(stop)


@process("calls/:id")
async def caller(ctx: Context, id: str) -> str:
    return await ctx.call(slow_leg, id)  # effect 1


async def test_fork_inside_an_unfinished_call_is_refused(make_journal):
    async with actors.open_system(make_journal(), processes=[slow_leg, caller]) as system:
        await system.start(caller, "c-1")
        with trio.fail_after(20):
            while (
                child := system.get("calls/c-1/slow/c-1")
            ) is None or child.status != "suspended":
                await trio.sleep(0.01)
        assert await system.cancel("calls/c-1")
        with pytest.raises(
            actors.InvalidArguments,
            match=r"its call of 'calls/c-1/slow/c-1' "
            r"\(effect 1\) had not ended at the fork point; fork from before it "
            r"\(from_effect=0\)",
        ):
            await system.fork("calls/c-1", from_effect=1)
        again = await system.fork("calls/c-1", from_effect=0)
        with trio.fail_after(20):  # its child was reset: the new run starts it afresh
            while (
                child := system.get("calls/c-1/slow/c-1")
            ) is None or child.status != "suspended":
                await trio.sleep(0.01)
        assert 2 == child.incarnation
        await system.send("calls/c-1/slow/c-1", stop, "done")
        assert "done" == await again.result()


async def test_of_two_forks_read_at_once_one_commits(make_journal):
    from actors._kernel._transactions import START_RACED
    from actors._system._fork import fork_txn, read_for_fork
    from storage import instance_id
    from storage.errors import Conflict

    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, order, "o-9")
        iid = instance_id("orders/o-9")
        plan, _ = await system.journal.read(lambda r: read_for_fork(r, iid, 1, None))
        first = fork_txn(plan, input=None, now=system.epoch_now())
        second = fork_txn(plan, input=None, now=system.epoch_now())
        await system.journal.commit(first.txn)
        with pytest.raises(Conflict) as info:
            await system.journal.commit(second.txn)
        assert info.value.reason in START_RACED | {"state"}
        row = await system.journal.read(lambda r: r.instance(iid))
        assert (2, "running") == (row.record.incarnation, row.status)
