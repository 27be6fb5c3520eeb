"""`storage._log_cache.LogCache` against a model: whatever was written to a
log (appends, entries overwritten in the middle, runs dropped, instances
deleted), and whatever the reader did to the values it was given, a read
through the cache gives exactly what a read of the journal gives."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from storage import LMDBJournal, LogEntry, MemoryJournal, Txn, instance_id
from storage._log_cache import LogCache

IIDS = [instance_id(f"tally/t{i}") for i in range(2)]

values = st.one_of(
    st.integers(-5, 5),
    st.text(max_size=3),
    st.none(),
    st.lists(st.integers(0, 3), max_size=3),  # changed in place by the reader below
    st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2),
    st.tuples(st.integers(0, 3), st.lists(st.integers(0, 3), max_size=2)),
)
ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), st.sampled_from(IIDS), st.integers(0, 1), st.integers(1, 6), values
        ),
        st.tuples(st.just("started"), st.sampled_from(IIDS), st.integers(0, 1), st.integers(1, 6)),
        st.tuples(st.just("drop"), st.sampled_from(IIDS), st.integers(0, 1)),
        st.tuples(st.just("delete"), st.sampled_from(IIDS)),
        st.tuples(st.just("read"), st.sampled_from(IIDS), st.integers(0, 1)),
    ),
    max_size=40,
)


def _entry(seq: int, value: Any) -> dict[str, Any]:
    return LogEntry.build("wait", "item", b"", value=value, message=seq).to_stored()


def _meddle(value: Any) -> None:
    """What process code may do to a value it was given: change it in place."""
    if isinstance(value, list):
        value.append("touched")
    elif isinstance(value, dict):
        value["touched"] = True
    elif isinstance(value, tuple):
        for item in value:
            _meddle(item)


async def _run(journal: Any, steps: list[tuple[Any, ...]], cache: LogCache) -> None:
    async with journal:
        for op in steps:
            txn = Txn()
            if op[0] == "put":
                txn.put_log(op[1], op[2], op[3], _entry(op[3], op[4]))
            elif op[0] == "started":
                txn.put_log(op[1], op[2], op[3], LogEntry.build("step", "s", b"").to_stored())
            elif op[0] == "drop":
                txn.drop_log(op[1], op[2])
            elif op[0] == "delete":
                txn.delete_instance(op[1])
            else:
                with journal.reader() as r:
                    expected = r.entries(op[1], op[2])
                    got = cache.entries(r, op[1], op[2])
                assert expected == got
                assert list(expected) == list(got)  # by seq, as the journal gives them
                for entry in got.values():
                    _meddle(entry.value)
                continue
            await journal.commit(txn)
        # Every log it keeps reads as stored, however the reader meddled.
        for iid in IIDS:
            for run in (0, 1):
                with journal.reader() as r:
                    assert r.entries(iid, run) == cache.entries(r, iid, run)


_settings = settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_settings
@given(steps=ops, small=st.booleans())
def test_a_read_through_the_cache_gives_what_the_memory_journal_holds(steps, small):
    cache = LogCache(max_entries=5, max_bytes=200) if small else LogCache()
    trio.run(_run, MemoryJournal(), steps, cache)


@_settings
@given(steps=ops)
def test_a_read_through_the_cache_gives_what_the_lmdb_journal_holds(steps):
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(_run, LMDBJournal(Path(tmp) / "journal"), steps, LogCache(max_entries=8))


async def test_the_cache_is_bounded_and_evicts_the_least_recently_used():
    cache = LogCache(max_entries=4)
    three = [*IIDS, instance_id("tally/t2")]
    async with MemoryJournal() as journal:
        txn = Txn()
        for iid in three:
            for seq in (1, 2):
                txn.put_log(iid, 0, seq, _entry(seq, seq))
        await journal.commit(txn)
        with journal.reader() as r:
            cache.entries(r, three[0], 0)
            cache.entries(r, three[1], 0)
            cache.entries(r, three[0], 0)  # used again: now the most recent
            cache.entries(r, three[2], 0)  # over the bound: three[1]'s goes
            assert (1, 3) == (cache.hits, cache.misses)
            cache.entries(r, three[0], 0)
            cache.entries(r, three[1], 0)
            assert (2, 4) == (cache.hits, cache.misses)
        assert 2 == len(cache)
        one = LogCache(max_entries=1)  # a log over the bound alone is not kept
        with journal.reader() as r:
            assert {1, 2} == set(one.entries(r, three[0], 0))
        assert 0 == len(one)
