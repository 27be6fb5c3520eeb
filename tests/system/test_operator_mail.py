"""An operator's tools keep the runtime's promises about mail (#45):

- a retry is a fork from effect 0: it carries the unread mail, and puts
  back what the failed run took, so the new run gets past its waits;
- a fork to another address copies no mail: one message, one instance;
- a dropped message is never taken, whatever races the drop (a fork's
  put-back, a stream of sends to the instance), and a drop is refused only
  for the reason it gives;
- the command line's offline retry checks a new input as `system.retry`
  does, or refuses to act without the process's code.

Through the public API, on the memory and LMDB journals (across a close
and reopen on LMDB), and through the command line."""

from __future__ import annotations

import random

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal, MemoryJournal
from tests.cli_runner import run_in_process

item = Signal("item")
go = Signal("go")
BROKEN: set[str] = set()
HANDLED: list[str] = []


@pytest.fixture(autouse=True)
def _fresh():
    BROKEN.clear()
    HANDLED.clear()


def handle(payload: str) -> None:
    HANDLED.append(payload)


@pytest.fixture(params=["memory", "lmdb"])
def make_journal(request, tmp_path):
    """Journals on one store, as restarts of one program would open it."""
    if request.param == "memory":
        shared = MemoryJournal()
        return lambda: shared
    return lambda: LMDBJournal(tmp_path / "journal")


def check(what: str) -> str:
    if what in BROKEN:
        raise RuntimeError(f"{what} is refused")
    return what


@process("tallies/:id")
async def tally(ctx: Context, id: str) -> list[str]:
    await ctx.wait(go)  # once its mail is in
    first = await ctx.wait(item)
    await ctx.step(check, first)
    return [first, await ctx.wait(item)]


@process("batches/:id")
async def batch(ctx: Context, id: str, *, size: int = 2) -> list[str]:
    await ctx.wait(go)
    return [await ctx.wait(item) for _ in range(size)]


@process("holds/:id")
async def hold(ctx: Context, id: str) -> None:
    await ctx.wait(go)
    await ctx.wait(Signal("stop"))  # it never takes an item


@process("counters/:id")
async def counter(ctx: Context, id: str) -> None:
    while True:
        await ctx.wait(item)  # it never waits for anything else


@process("handlers/:id")
async def handler(ctx: Context, id: str) -> None:
    while True:
        payload = await ctx.wait(item)
        await ctx.step(handle, payload)


PROCESSES = [tally, batch, hold, counter, handler]


async def until_status(system, address, *statuses):
    with trio.fail_after(60):
        while system.get(address).status not in statuses:
            await trio.sleep(0.01)


async def payloads(system, address):
    return [m.payload for m in await system.mail(address)]


# -- retry carries the mail ----------------------------------------------------------


async def test_a_retry_gives_the_new_run_the_mail_of_the_failed_one(make_journal, autojump_clock):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        BROKEN.add("a")
        handle = await system.start(tally, "t-1")
        await system.send("tallies/t-1", item, "a")
        await system.send("tallies/t-1", item, "b")
        await system.send("tallies/t-1", go)
        with pytest.raises(actors.ProcessFailed, match="a is refused"):
            await handle.result()
        assert ["b"] == await payloads(system, "tallies/t-1")  # acknowledged, unread
        BROKEN.clear()
        again = await system.retry("tallies/t-1")
        assert 2 == again.incarnation
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        # The new run starts from the top: the messages the failed run took
        # ("go", "a") are put back ahead of the unread one, as a fork from
        # effect 0 does.
        with trio.fail_after(60):
            assert ["a", "b"] == await system.get("tallies/t-1").result()
        assert [] == await system.dropped("tallies/t-1")


async def test_a_retry_of_a_cancelled_instance_keeps_its_unread_mail(make_journal, autojump_clock):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await system.start(batch, "b-1")
        await system.send("batches/b-1", item, "x")
        await system.send("batches/b-1", item, "y")
        await until_status(system, "batches/b-1", "suspended")
        await system.cancel("batches/b-1")
        await until_status(system, "batches/b-1", "cancelled")
        again = await system.retry("batches/b-1")
        assert 2 == again.incarnation
        assert ["x", "y"] == await payloads(system, "batches/b-1")
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        assert 2 == system.get("batches/b-1").incarnation
        await system.send("batches/b-1", go)
        with trio.fail_after(60):
            assert ["x", "y"] == await system.get("batches/b-1").result()


async def test_a_retry_leaves_out_a_dropped_message(make_journal, autojump_clock):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        BROKEN.add("poison")
        handle = await system.start(tally, "t-2")
        await system.send("tallies/t-2", item, "poison")
        await system.send("tallies/t-2", item, "c")
        await system.send("tallies/t-2", item, "d")
        await system.send("tallies/t-2", go)
        with pytest.raises(actors.ProcessFailed, match="poison is refused"):
            await handle.result()
        bad = await system.poison("tallies/t-2")
        assert bad is not None and "poison" == bad.payload
        await system.drop_message("tallies/t-2", bad.id)
        again = await system.retry("tallies/t-2")  # still broken for "poison": it is gone
        with trio.fail_after(60):
            assert ["c", "d"] == await again.result()
        assert ["poison"] == [d.message.payload for d in await system.dropped("tallies/t-2")]


# -- a fork to another address copies no mail --------------------------------------


async def test_a_fork_to_another_address_copies_no_mail(make_journal, autojump_clock):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await system.start(batch, "b-2", size=1)
        await system.send("batches/b-2", item, "x")
        await system.send("batches/b-2", item, "unread")
        await system.send("batches/b-2", go)  # it takes "x" and ends
        await until_status(system, "batches/b-2", "completed")
        copy = await system.fork("batches/b-2", from_effect=0, to="batches/b-3")
        assert [] == await payloads(system, "batches/b-3")  # neither taken nor unread ones
        assert ["unread"] == await payloads(system, "batches/b-2")  # the source keeps its own
        assert 1 == copy.incarnation
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        assert [] == await payloads(system, "batches/b-3")
        await system.send("batches/b-3", go)
        await system.send("batches/b-3", item, "its own")
        with trio.fail_after(60):
            assert ["its own"] == await system.get("batches/b-3").result()


# -- a dropped message is never taken ------------------------------------------------


async def test_a_drop_racing_a_fork_or_retry_either_comes_first_or_is_refused(
    make_journal, autojump_clock
):
    """Rounds of a drop and a fork (or a retry) of one ended instance at
    once, in random orders: the dropped message is in the dead letters or
    in the new incarnation's mailbox, never both; no other message is ever
    dropped."""
    rng = random.Random(45)
    outcomes = {"dropped": 0, "refused": 0}
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        for n in range(40):
            address = f"holds/r-{n}"
            await system.start(hold, f"r-{n}")
            await system.send(address, go)
            for payload in ("early", "target", "keep"):
                await system.send(address, item, payload)
            await until_status(system, address, "suspended")
            # One dropped before: the new incarnation numbers its messages anew.
            early, target, _ = await system.mail(address)
            await system.drop_message(address, early.id)
            await system.cancel(address)
            await until_status(system, address, "cancelled")
            got: dict[str, object] = {}

            async def drop(address=address, target=target, got=got):
                for _ in range(rng.randrange(40)):
                    await trio.lowlevel.checkpoint()
                try:
                    got["drop"] = await system.drop_message(
                        address, target.id, incarnation=target.incarnation
                    )
                except actors.InvalidArguments as exc:
                    got["drop"] = exc

            async def again(address=address, n=n):
                for _ in range(rng.randrange(40)):
                    await trio.lowlevel.checkpoint()
                if n % 2:
                    await system.retry(address)
                else:
                    await system.fork(address, from_effect=1)  # after it took "go"

            async def late(address=address):
                # Refused while the instance is cancelled, delivered to the
                # new incarnation once it is made.
                while True:
                    try:
                        return await system.send(address, item, "late")
                    except actors.NotDelivered:
                        await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(drop)
                nursery.start_soon(again)
                nursery.start_soon(late)
            letters = [d.message.payload for d in await system.dropped(address)]
            unread = [m.payload for m in await system.mail(address) if m.signal == "item"]
            assert 2 == system.get(address).incarnation
            if isinstance(got["drop"], actors.InvalidArguments):
                outcomes["refused"] += 1
                assert ["early"] == letters, n
                assert ["target", "keep", "late"] == unread, n
            else:
                outcomes["dropped"] += 1
                assert target == got["drop"], n
                assert ["early", "target"] == letters, n
                assert ["keep", "late"] == unread, n
    assert outcomes["dropped"] > 0 and outcomes["refused"] > 0, outcomes


async def test_a_drop_is_not_refused_while_mail_streams_in(make_journal, autojump_clock):
    """An instance that only waits, its mail arriving every 1 to 5 ms: the
    drop goes through (it is not running), and the message is never taken."""
    rng = random.Random(4)
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await system.start(counter, "c-1")
        await system.send("counters/c-1", go, "stray")  # it never waits for "go"
        (stray,) = await system.mail("counters/c-1")
        for attempt in range(5):
            async with trio.open_nursery() as nursery:

                async def stream() -> None:
                    while True:
                        await system.send("counters/c-1", item, attempt)
                        await trio.sleep(rng.uniform(0.001, 0.005))

                nursery.start_soon(stream)
                await trio.sleep(0.05)
                if attempt == 0:
                    assert stray == await system.drop_message("counters/c-1", stray.id)
                else:  # dropped already: the reason says so, not "running"
                    with pytest.raises(actors.InvalidArguments, match="has no unread message"):
                        await system.drop_message("counters/c-1", stray.id)
                await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        assert ["stray"] == [d.message.payload for d in await system.dropped("counters/c-1")]
        await until_status(system, "counters/c-1", "suspended")
        assert "stray" not in await payloads(system, "counters/c-1")


async def test_a_drop_racing_the_takes_of_a_live_instance_is_never_taken(
    make_journal, autojump_clock
):
    """A live instance takes and handles its mail while a drop of one of
    its messages races the takes, in random orders: a message dropped is
    never handled; one whose drop is refused (it was taken) is handled; every
    other message is handled once."""
    rng = random.Random(46)
    outcomes = {"dropped": 0, "refused": 0}
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await system.start(handler, "h-1")
        expected: list[str] = []
        for n in range(30):
            sent = [f"{n}-{k}" for k in range(4)]
            for payload in sent:
                await system.send("handlers/h-1", item, payload)
            unread = await system.mail("handlers/h-1")
            if not unread:
                expected += sent
                continue
            victim = rng.choice(unread)
            for _ in range(rng.randrange(30)):
                await trio.lowlevel.checkpoint()
            try:
                await system.drop_message("handlers/h-1", victim.id, incarnation=1)
            except actors.InvalidArguments as exc:
                assert "has no unread message" in str(exc), exc  # taken meanwhile
                outcomes["refused"] += 1
                expected += sent
            else:
                outcomes["dropped"] += 1
                expected += [p for p in sent if p != victim.payload]
            await trio.sleep(rng.uniform(0, 0.01))
        await until_status(system, "handlers/h-1", "suspended")
        with trio.fail_after(60):
            while await system.mail("handlers/h-1"):
                await trio.sleep(0.01)
        await until_status(system, "handlers/h-1", "suspended")
        dropped = [d.message.payload for d in await system.dropped("handlers/h-1")]
        assert outcomes["dropped"] == len(dropped)
        assert not set(dropped) & set(HANDLED), set(dropped) & set(HANDLED)
        assert sorted(expected) == sorted(HANDLED)  # each once, in order of arrival
        assert expected == HANDLED
    assert outcomes["dropped"] > 0, outcomes


# -- the command line's offline retry ------------------------------------------------


async def test_the_offline_cli_retry_checks_a_new_input(tmp_path):
    path = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        await system.start(batch, "b-9")
        await until_status(system, "batches/b-9", "suspended")
        await system.cancel("batches/b-9")
        await until_status(system, "batches/b-9", "cancelled")

    def cli(*args):  # no system holds the journal: the command line runs here
        return trio.to_thread.run_sync(lambda: run_in_process(["--journal", str(path), *args]))

    # Without the process's code a new input cannot be checked: refused.
    done = await cli("retry", "batches/b-9", "--input", '{"sise": 1}')
    assert 2 == done.returncode and "--import MODULE" in done.stderr, done
    # With it, checked as system.retry checks it.
    done = await cli("--import", __name__, "retry", "batches/b-9", "--input", '{"sise": 1}')
    assert 2 == done.returncode and "input ['sise'] does not fit" in done.stderr, done
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        handle = system.get("batches/b-9")
        assert (1, "cancelled") == (handle.incarnation, handle.status)
    done = await cli("--import", __name__, "retry", "batches/b-9", "--input", '{"size": 1}')
    assert 0 == done.returncode, done
    # Without a new input the stored one is kept: no code needed.
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        await system.send("batches/b-9", go)
        await system.send("batches/b-9", item, "only")
        with trio.fail_after(60):
            assert ["only"] == await system.get("batches/b-9").result()


async def test_the_cli_drops_only_from_the_incarnation_it_names(tmp_path):
    path = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        await system.start(batch, "b-7")
        for payload in ("first", "second"):
            await system.send("batches/b-7", item, payload)
        await until_status(system, "batches/b-7", "suspended")
        first, _ = await system.mail("batches/b-7")
        await system.cancel("batches/b-7")
        await until_status(system, "batches/b-7", "cancelled")
        await system.retry("batches/b-7")  # its mail, numbered anew in incarnation 2
        assert ["first", "second"] == await payloads(system, "batches/b-7")

    def cli(*args):
        return trio.to_thread.run_sync(lambda: run_in_process(["--journal", str(path), *args]))

    listed = await cli("mail", "batches/b-7")
    assert listed.stdout.startswith("batches/b-7 (suspended, incarnation 2): 2 unread"), listed
    done = await cli("mail", "batches/b-7", "--drop", str(first.id), "--incarnation", "1")
    assert 1 == done.returncode and "it is incarnation 2 now" in done.stderr, done
    done = await cli("mail", "batches/b-7", "--drop", "1", "--incarnation", "2")
    assert 0 == done.returncode, done
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        dropped = [(d.message.payload, d.incarnation) for d in await system.dropped("batches/b-7")]
        assert [("first", 2)] == dropped
