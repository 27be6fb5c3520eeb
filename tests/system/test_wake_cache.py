"""A wake decodes only what its run's log gained since the last wake (the
system's `storage._log_cache.LogCache`), and answers the same as a wake
that reads the whole log from disk: across a restart (which starts with
no cache), after another writer changed the log behind the cache (an
operator's tool, another node on a shared PostgreSQL journal), after a
retry, and whatever the process did to the values it was given."""

from __future__ import annotations

import os
from typing import Any

import attrs
import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import Txn, instance_id

item = Signal("item")
done = Signal("done")

IID = instance_id("tally/t")


@process("tally/:id")
async def tally(ctx: Context, id: str, *, fail_at: Any = "never") -> list[Any]:
    seen: list[Any] = []
    while True:
        which, got = await ctx.receive(item, done)
        if which is done:
            return seen
        if got == fail_at:
            raise RuntimeError(f"{got!r} is not welcome")
        if isinstance(got, list):
            got.append("touched")  # the value it was given, changed in place
        seen.append(got)


PAYLOADS = [1, "two", [3], {"four": 4}, (5, [6]), None, 7.5]
# What the run returns: each list it took once touched, however often replayed.
EXPECTED = [1, "two", [3, "touched"], {"four": 4}, (5, [6]), None, 7.5]


async def _out_of_memory(system: Any, iid: bytes = IID) -> None:
    """Until the instance took its mail and left memory (passivated)."""
    with trio.fail_after(20):
        while iid in system.registry.live or await system.journal.read(lambda r: r.mailbox(iid)):
            await trio.sleep(0.005)


async def _feed(system: Any, payloads: list[Any], address: str = "tally/t") -> None:
    for payload in payloads:
        await system.send(address, item, payload)
        await _out_of_memory(system, instance_id(address))


async def test_a_wake_from_the_cache_answers_as_one_from_disk_across_a_restart(make_journal):
    async with actors.open_system(make_journal(), processes=[tally], passivate_after=0) as system:
        await system.start(tally, "t")
        await _out_of_memory(system)
        await _feed(system, PAYLOADS[:4])
        logs = system.registry.logs
        # The first wake found no log; the second read it from disk; each
        # later one, only the part it gained.
        assert (2, 1) == (logs.hits, logs.misses)
    async with actors.open_system(make_journal(), processes=[tally], passivate_after=0) as system:
        logs = system.registry.logs
        assert 0 == len(logs)  # a restart starts with none
        await _feed(system, PAYLOADS[4:])
        assert (2, 1) == (logs.hits, logs.misses)
        await system.send("tally/t", done)
        assert EXPECTED == await system.get("tally/t").result()


async def _change_behind(journal: Any, old: Any, new: Any) -> None:
    """Rewrite, in place, the log entry of the take of ``old`` to hold ``new``
    (as an operator's tool or another node could)."""

    def read(r: Any) -> tuple[int, dict[int, Any]]:
        run = r.instance(IID).record.run
        return run, r.entries(IID, run)

    run, log = await journal.read(read)
    [seq] = [seq for seq, entry in log.items() if entry.kind == "wait" and entry.value == old]
    txn = Txn()
    txn.put_log(IID, run, seq, attrs.evolve(log[seq], value=new).to_stored())
    await journal.commit(txn)


async def test_a_log_changed_behind_the_cache_is_read_again(make_journal):
    async with actors.open_system(make_journal(), processes=[tally], passivate_after=0) as system:
        await system.start(tally, "t")
        await _out_of_memory(system)
        await _feed(system, [1, 2, 3])  # the log of its takes of 1 and 2 is kept
        # Its first entry, before the last kept one: a log's length and last
        # entry are no check (the runtime too overwrites entries in place).
        await _change_behind(system.journal, 1, 10)
        await system.send("tally/t", done)
        assert [10, 2, 3] == await system.get("tally/t").result()
        assert system.registry.logs.misses == 2  # the first wake's, and the changed log's


async def test_a_retried_instance_is_not_answered_from_the_failed_runs_log(make_journal):
    async with actors.open_system(make_journal(), processes=[tally], passivate_after=0) as system:
        await system.start(tally, "t", fail_at="boom")
        await _out_of_memory(system)
        await _feed(system, [1, 2, "boom"])
        with pytest.raises(actors.ProcessFailed):
            await system.get("tally/t").result()
        # Run again from the top, each message it took put back: taken again live.
        handle = await system.retry("tally/t", input={"fail_at": "never"})
        await _out_of_memory(system)
        await _feed(system, [[4]])
        await system.send("tally/t", done)
        assert [1, 2, "boom", [4, "touched"]] == await handle.result()


async def test_a_log_another_node_changed_is_read_again(request):
    if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
        pytest.skip("PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)

    def journal() -> PostgresJournal:
        return PostgresJournal(dsn, schema=schema, lease_timeout=3.0)

    with trio.fail_after(60):
        async with (
            actors.open_system(journal(), processes=[tally], node="a", passivate_after=0) as a,
            actors.open_system(journal(), processes=[tally], node="b", passivate_after=0) as b,
        ):
            await a.start(tally, "t")
            await _out_of_memory(a)
            await _feed(a, [1, 2, 3])
            assert a.registry.logs.hits >= 1
            # Node b's connection writes the change; node a wakes the instance.
            await _change_behind(b.journal, 1, 10)
            await a.send("tally/t", done)
            assert [10, 2, 3] == await a.get("tally/t").result()
