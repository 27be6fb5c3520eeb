"""Sends with an idempotency key, through the public API and the CLI: a
repeated key to one incarnation stores nothing, across continue-as-new and
a close and reopen; a new incarnation takes the key again. Keys have a space
of their own (no stream consumer can take it), a length limit and the same
refusals on every journal (memory, LMDB, PostgreSQL); the `make_journal`
fixture runs each test on all three. The CLI tests are LMDB's: the CLI
writes LMDB journals only."""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors._kernel._message_txns import (
    KEY_PREFIX,
    LEGACY_KEY_PREFIX,
    MAX_KEY_BYTES,
    key_cursor,
    key_of,
)
from storage import InstanceRecord, LMDBJournal, MemoryJournal, Txn, instance_id
from tests.runtime_helpers import virtual_wall
from tests.tools.test_cli import cli, cli_json, run_cli

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


@process("feed/:name")
async def feed(ctx: Context, name: str) -> None:
    while True:
        await ctx.emit(await ctx.wait(order))


def open_on(make_journal, *processes, **kw):
    """A system on the store of ``make_journal`` (a fresh journal object on
    the same data each time, as a restarted program would have)."""
    return actors.open_system(make_journal(), processes=list(processes), now=virtual_wall, **kw)


async def stored_messages(make_journal, address: str) -> int:
    """How many messages were ever stored for ``address`` (its mailbox counter)."""
    async with make_journal() as journal:
        return await journal.read(lambda r: r.last_message_seq(instance_id(address)))


async def test_a_repeated_key_stores_nothing_and_returns_normally(make_journal):
    async with open_on(make_journal, inbox) as system:
        await system.start(inbox, "a")
        await system.send("inbox/a", order, "first", key="req-1")
        await system.send("inbox/a", order, "retry of first", key="req-1")  # no error
        await system.send("inbox/a", order, "second", key="req-2")
        await system.send("inbox/a", order, "unkeyed")
        await system.send("inbox/a", order, "unkeyed")  # no key: both stored
        assert ["first", "second", "unkeyed", "unkeyed"] == await system.ask("inbox/a", count)


async def test_keys_last_across_continue_as_new_and_a_reopen(make_journal):
    async with open_on(make_journal, inbox) as system:
        await system.start(inbox, "a")
        await system.send("inbox/a", order, 1, key="k1")
        await system.send("inbox/a", roll)  # a new run: the log is dropped, the keys stay
        await system.send("inbox/a", order, "again", key="k1")
        await system.send("inbox/a", order, 2, key="k2")
        assert [1, 2] == await system.ask("inbox/a", count)
    stored = await stored_messages(make_journal, "inbox/a")
    async with open_on(make_journal, inbox) as system:
        for key in ("k1", "k2"):
            await system.send("inbox/a", order, "after reopen", key=key)
        assert [1, 2] == await system.ask("inbox/a", count)
    assert stored + 1 == await stored_messages(make_journal, "inbox/a")  # only the ask


async def test_a_new_incarnation_takes_the_key_again(make_journal):
    async with open_on(make_journal, inbox) as system:
        await system.start(inbox, "a")
        await system.send("inbox/a", order, "old", key="k")
        assert await system.cancel("inbox/a")
        with pytest.raises(actors.NotDelivered):  # the cancelled one takes nothing
            await system.send("inbox/a", order, "to the cancelled one", key="other")
        await system.start(inbox, "a")
        await system.send("inbox/a", order, "new", key="k")
        await system.send("inbox/a", order, "new again", key="k")
        assert ["new"] == await system.ask("inbox/a", count)


async def test_concurrent_sends_of_one_key_store_it_once(make_journal):
    async with open_on(make_journal, inbox) as system:
        await system.start(inbox, "a")
        async with trio.open_nursery() as nursery:
            for n in range(10):
                nursery.start_soon(lambda n=n: system.send("inbox/a", order, n, key="same"))
        assert 1 == len(await system.ask("inbox/a", count))


async def test_a_bad_key_says_what_to_pass(make_journal):
    async with open_on(make_journal, inbox) as system:
        await system.start(inbox, "a")
        with pytest.raises(actors.InvalidArguments, match="non-empty str"):
            await system.send("inbox/a", order, 1, key="")
        with pytest.raises(actors.InvalidArguments, match="must be a str"):
            await system.send("inbox/a", order, 1, key=17)  # type: ignore[arg-type]
        for key in ("a\x00b", "\x00key k", "line\nbreak", "tab\t", "del\x7f", "c1\x85"):
            with pytest.raises(actors.InvalidArguments, match=r"control character.*remove it"):
                await system.send("inbox/a", order, "refused", key=key)
        await system.send("inbox/a", order, "printable", key="café ☕ 名前 👩‍💻")
        await system.send("inbox/a", order, "printable again", key="café ☕ 名前 👩‍💻")
        assert ["printable"] == await system.ask("inbox/a", count)
    assert 2 == await stored_messages(make_journal, "inbox/a")  # the one send and the ask


async def test_a_key_over_the_limit_is_refused_naming_it(make_journal):
    async with open_on(make_journal, inbox) as system:
        await system.start(inbox, "a")
        longest = "é" * (MAX_KEY_BYTES // 2)  # two bytes of UTF-8 each
        assert MAX_KEY_BYTES == len(longest.encode())
        await system.send("inbox/a", order, "at the limit", key=longest)
        await system.send("inbox/a", order, "at the limit, again", key=longest)
        for key in (longest + "x", "k" * (MAX_KEY_BYTES + 1), "k" * 600, "k" * 5000):
            with pytest.raises(actors.LimitExceeded, match=f"at most {MAX_KEY_BYTES} bytes"):
                await system.send("inbox/a", order, "too long", key=key)
        assert ["at the limit"] == await system.ask("inbox/a", count)
    assert 2 == await stored_messages(make_journal, "inbox/a")  # the one send and the ask


async def test_no_stream_consumer_can_take_a_keys_name(make_journal):
    async with open_on(make_journal, feed) as system:
        await system.start(feed, "a")
        for name in (KEY_PREFIX + "collide", LEGACY_KEY_PREFIX + "collide"):
            with pytest.raises(actors.InvalidArguments, match="control character"):
                system.stream("feed/a", consumer=name)
        await system.send("feed/a", order, "before")
        for name in ("collide", "key collide", " key collide"):  # legal names, other spaces
            async with system.stream("feed/a", consumer=name) as stream:
                async for value in stream:
                    assert "before" == value
                    break
        await system.send("feed/a", order, "keyed", key="collide")  # stored: no key seen
        await system.send("feed/a", order, "keyed again", key="collide")  # not stored
        got = []
        async with system.stream("feed/a", consumer="reader") as stream:
            async for value in stream:
                got.append(value)
                if 2 == len(got):
                    break
        assert ["before", "keyed"] == got
        assert 2 == await stored_messages_now(system, "feed/a")


async def stored_messages_now(system, address: str) -> int:
    return await system.journal.read(lambda r: r.last_message_seq(instance_id(address)))


@pytest.fixture(params=["lmdb", "memory"])
def make_older_journal(request, tmp_path):
    """The journals that could hold keys written by earlier versions (under
    `LEGACY_KEY_PREFIX`): PostgreSQL refused them, so it holds none."""
    if request.param == "memory":
        shared = MemoryJournal()
        return lambda: shared
    return lambda: LMDBJournal(tmp_path / "journal")


async def test_keys_stored_by_earlier_versions_are_still_seen(make_older_journal):
    async with open_on(make_older_journal, inbox) as system:
        await system.start(inbox, "a")
        iid = instance_id("inbox/a")
        txn = Txn()  # what an earlier version's keyed send stored beside its message
        txn.set_cursor(iid, LEGACY_KEY_PREFIX + "old", 0)
        await system.journal.commit(txn)
    async with open_on(make_older_journal, inbox) as system:
        await system.send("inbox/a", order, "retried after the upgrade", key="old")
        await system.send("inbox/a", order, "new", key="new")
        await system.send("inbox/a", order, "new, retried", key="new")
        assert ["new"] == await system.ask("inbox/a", count)
        cursors = await system.journal.read(lambda r: r.cursors(instance_id("inbox/a")))
        assert {LEGACY_KEY_PREFIX + "old": 0, KEY_PREFIX + "new": 0} == cursors


def test_a_keys_cursor_name_is_told_from_a_consumers():
    assert "\x1fkey k" == key_cursor("k")  # the format journals store
    assert "\x00" not in KEY_PREFIX  # PostgreSQL's text cannot hold NUL
    assert ("k", "k", "k k") == (
        key_of(key_cursor("k")),
        key_of(LEGACY_KEY_PREFIX + "k"),
        key_of(key_cursor("k k")),
    )
    assert (None, None) == (key_of("k"), key_of("key k"))


def test_cli_send_takes_a_key(tmp_path):
    path = tmp_path / "journal"

    async def start() -> None:
        async with actors.open_system(LMDBJournal(path), processes=[inbox]) as system:
            await system.start(inbox, "a")
            await system.send("inbox/a", order, "from the system", key="k-sys")

    trio.run(start)
    first = cli_json(path, "send", "inbox/a", "order", '"cli"', "--key", "k-cli")
    assert (True, "k-cli") == (first["sent"], first["key"])
    again = cli(path, "send", "inbox/a", "order", '"cli retry"', "--key", "k-cli")
    assert 0 == again.returncode, again.stderr
    assert "had key 'k-cli' already" in again.stdout
    doc = cli_json(path, "send", "inbox/a", "order", '"dup"', "--key", "k-sys")
    assert (False, None) == (doc["sent"], doc["message"])
    shown = cli_json(path, "show", "inbox/a")
    assert ["k-cli", "k-sys"] == shown["send_keys"]
    assert {} == shown["stream"]["consumers"]  # keys are no stream consumers
    done = cli(path, "send", "inbox/a", "order", "--key", "")
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
        txn.put_instance(
            iid, address="inbox/z", process="inbox/:name", status="running", record=record
        )
        txn.set_cursor(iid, "c", 0)
        txn.set_cursor(iid, KEY_PREFIX + "k", 0)  # a key's name is stored as it is
        await journal.commit(txn)
        with journal.reader() as r:
            assert (0, None) == (r.cursor(iid, "c"), r.cursor(iid, "other"))
            assert {"c": 0, KEY_PREFIX + "k": 0} == r.cursors(iid)


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


async def test_a_retry_after_the_instance_finished_returns_normally(make_journal):
    async with open_on(make_journal, once) as system:
        handle = await system.start(once, "a")
        await system.send("once/a", order, "the only one", key="k")
        assert "the only one" == await handle.result()
        await system.send("once/a", order, "retried", key="k")  # it was taken: fine
        with pytest.raises(actors.NotDelivered, match="it completed"):
            await system.send("once/a", order, "new request", key="k2")
