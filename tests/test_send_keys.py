"""Sends with an idempotency key, through the public API and the CLI: a
repeated key to one incarnation stores nothing, across continue-as-new and
a close and reopen; a new incarnation takes the key again."""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import InstanceRecord, LMDBJournal, Txn, instance_id
from tests.runtime_helpers import Opener
from tests.test_cli import run_cli, run_json

order = Signal("order")
count = Signal("count")
roll = Signal("roll")


@process("inbox/:name")
async def inbox(ctx: Context, name: str, *, seen: list | None = None) -> None:
    seen = list(seen or [])
    while True:
        signal, payload = await ctx.receive(order, count, roll)
        if signal is order:
            seen.append(payload)
        elif signal is count:
            await ctx.reply(seen)
        else:
            await ctx.continue_as_new(seen=seen)


async def stored_messages(path, address: str) -> int:
    """How many messages were ever stored for ``address`` (its mailbox counter)."""
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            return r.last_message_seq(instance_id(address))


async def test_a_repeated_key_stores_nothing_and_returns_normally(any_opener):
    async with any_opener(inbox) as system:
        await system.start(inbox, "a")
        await system.send("inbox/a", order, "first", key="req-1")
        await system.send("inbox/a", order, "retry of first", key="req-1")  # no error
        await system.send("inbox/a", order, "second", key="req-2")
        await system.send("inbox/a", order, "unkeyed")
        await system.send("inbox/a", order, "unkeyed")  # no key: both stored
        assert ["first", "second", "unkeyed", "unkeyed"] == await system.ask("inbox/a", count)


async def test_keys_last_across_continue_as_new_and_a_reopen(tmp_path):
    opener = Opener(tmp_path)
    async with opener(inbox) as system:
        await system.start(inbox, "a")
        await system.send("inbox/a", order, 1, key="k1")
        await system.send("inbox/a", roll)  # a new run: the log is dropped, the keys stay
        await system.send("inbox/a", order, "again", key="k1")
        await system.send("inbox/a", order, 2, key="k2")
        assert [1, 2] == await system.ask("inbox/a", count)
    stored = await stored_messages(opener.path, "inbox/a")
    async with opener(inbox) as system:
        for key in ("k1", "k2"):
            await system.send("inbox/a", order, "after reopen", key=key)
        assert [1, 2] == await system.ask("inbox/a", count)
    assert stored + 1 == await stored_messages(opener.path, "inbox/a")  # only the ask


async def test_a_new_incarnation_takes_the_key_again(opener):
    async with opener(inbox) as system:
        await system.start(inbox, "a")
        await system.send("inbox/a", order, "old", key="k")
        assert await system.cancel("inbox/a")
        with pytest.raises(actors.NotDelivered):  # the cancelled one takes nothing
            await system.send("inbox/a", order, "to the cancelled one", key="other")
        await system.start(inbox, "a")
        await system.send("inbox/a", order, "new", key="k")
        await system.send("inbox/a", order, "new again", key="k")
        assert ["new"] == await system.ask("inbox/a", count)


async def test_concurrent_sends_of_one_key_store_it_once(any_opener):
    async with any_opener(inbox) as system:
        await system.start(inbox, "a")
        async with trio.open_nursery() as nursery:
            for n in range(10):
                nursery.start_soon(lambda n=n: system.send("inbox/a", order, n, key="same"))
        assert 1 == len(await system.ask("inbox/a", count))


async def test_a_bad_key_says_what_to_pass(opener):
    async with opener(inbox) as system:
        await system.start(inbox, "a")
        with pytest.raises(actors.InvalidArguments, match="non-empty str"):
            await system.send("inbox/a", order, 1, key="")
        with pytest.raises(actors.InvalidArguments, match="must be a str"):
            await system.send("inbox/a", order, 1, key=17)  # type: ignore[arg-type]


def test_cli_send_takes_a_key(tmp_path):
    path = tmp_path / "journal"

    async def start() -> None:
        async with actors.open_system(LMDBJournal(path), processes=[inbox]) as system:
            await system.start(inbox, "a")
            await system.send("inbox/a", order, "from the system", key="k-sys")

    trio.run(start)
    first = run_json(path, "send", "inbox/a", "order", '"cli"', "--key", "k-cli")
    assert (True, "k-cli") == (first["sent"], first["key"])
    again = run_cli(path, "send", "inbox/a", "order", '"cli retry"', "--key", "k-cli")
    assert 0 == again.returncode, again.stderr
    assert "had key 'k-cli' already" in again.stdout
    doc = run_json(path, "send", "inbox/a", "order", '"dup"', "--key", "k-sys")
    assert (False, None) == (doc["sent"], doc["message"])
    shown = run_json(path, "show", "inbox/a")
    assert ["k-cli", "k-sys"] == shown["send_keys"]
    assert {} == shown["stream"]["consumers"]  # keys are no stream consumers
    done = run_cli(path, "send", "inbox/a", "order", "--key", "")
    assert 2 == done.returncode and "--key takes a non-empty key" in done.stderr

    async def read() -> list:
        async with actors.open_system(LMDBJournal(path), processes=[inbox]) as system:
            await system.send("inbox/a", order, "late cli retry", key="k-cli")
            return await system.ask("inbox/a", count)

    assert ["from the system", "cli"] == trio.run(read)


async def test_reader_cursor_reads_one_cursor(make_journal):
    iid = instance_id("inbox/z")
    async with make_journal() as journal:
        txn = Txn()
        record = InstanceRecord()
        txn.put_instance(iid, address="inbox/z", process="inbox/:name", status="running", record=record)
        txn.set_cursor(iid, "c", 0)
        await journal.commit(txn)
        with journal.reader() as r:
            assert (0, None) == (r.cursor(iid, "c"), r.cursor(iid, "other"))
            assert {"c": 0} == r.cursors(iid)


async def test_cli_send_key_through_the_running_system(tmp_path):
    path = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(path), processes=[inbox]) as system:
        await system.start(inbox, "a")
        for text in ('"one"', '"one, retried"'):
            done = await trio.to_thread.run_sync(
                lambda text=text: run_cli(path, "send", "inbox/a", "order", text, "--key", "k")
            )
            assert 0 == done.returncode, done.stderr
            assert "through the running system" in done.stdout
        assert ["one"] == await system.ask("inbox/a", count)


@process("once/:name")
async def once(ctx: Context, name: str) -> object:
    return await ctx.wait(order)


async def test_a_retry_after_the_instance_finished_returns_normally(opener):
    async with opener(once) as system:
        handle = await system.start(once, "a")
        await system.send("once/a", order, "the only one", key="k")
        assert "the only one" == await handle.result()
        await system.send("once/a", order, "retried", key="k")  # it was taken: fine
        with pytest.raises(actors.NotDelivered, match="it completed"):
            await system.send("once/a", order, "new request", key="k2")
