"""Records of every shape a damaged journal can hold: each read reports
`JournalCorrupt` naming database and key (never struct.error, AttributeError
or IndexError), and no write overwrites a message or stream value that a
damaged counter numbers again."""

from __future__ import annotations

import copy
from contextlib import aclosing
from pathlib import Path

import attrs
import lmdb
import msgpack
import pytest
import trio

import actors
import storage
from actors import Context, Signal, process
from storage import (
    InstanceRecord,
    JournalCorrupt,
    LMDBJournal,
    MemoryJournal,
    Txn,
    encode,
    instance_id,
)
from tests import journal_damage as jd
from tests.runtime_helpers import virtual_wall

IID = instance_id("p/x")
OTHER = instance_id("p/y")
RUN_SEQ = (0).to_bytes(4, "big") + (1).to_bytes(4, "big")


def put(path: Path, database: str, key: bytes, value: bytes | None) -> None:
    """Write (or with None delete) one raw record, as damage would."""
    env = lmdb.open(str(path), max_dbs=16)
    try:
        db = env.open_db(database.encode())
        with env.begin(write=True, db=db) as txn:
            if value is None:
                txn.delete(key)
            else:
                txn.put(key, value)
    finally:
        env.close()


def assert_names(exc: JournalCorrupt, database: str, key: bytes) -> None:
    assert (database, key) == (exc.database, exc.key)
    assert f"database {database!r}" in str(exc) and key.hex() in str(exc)


async def _filled(path: Path) -> None:
    async with LMDBJournal(path) as journal:
        txn = Txn()
        for iid, address in ((IID, "p/x"), (OTHER, "p/y")):
            txn.put_instance(
                iid,
                address=address,
                process="p/:n",
                status="running",
                record=InstanceRecord(params=["x"], input={}),
            )
            txn.put_log(iid, 0, 1, {"k": "step", "n": "s", "v": 1})
            txn.append_message(iid, ["go", 1, 0.0])
            txn.add_timer(iid, 0, 2, 100.0)
            txn.append_stream(iid, {"i": 0})
            txn.set_cursor(iid, "c", 1)
        await journal.commit(txn)


# (database, key, stored value, the read that meets it, database and key it names)
SHAPES = [
    ("counters", IID + b"m", b"\x01\x02\x03", lambda r: r.last_message_seq(IID), None),
    ("counters", IID + b"s", b"\x01" * 9, lambda r: r.stream_length(IID), None),
    ("counters", IID + b"s", b"\x01" * 9, lambda r: r.stream(IID), None),
    (
        "timer_ids",
        IID + RUN_SEQ[:4] + (2).to_bytes(4, "big"),
        b"\x00",
        lambda r: r.timers(IID),
        None,
    ),
    ("cursors", IID + b"c", b"", lambda r: r.cursors(IID), None),
    ("cursors", IID + b"\xff\xfe", (1).to_bytes(8, "big"), lambda r: r.cursors(IID), None),
    ("log", IID + RUN_SEQ, msgpack.packb([1, 2]), lambda r: r.log(IID, 0), None),
    ("log", IID + RUN_SEQ, msgpack.packb({"k": 5}), lambda r: r.log(IID, 0), None),
    ("log", IID + RUN_SEQ, msgpack.packb({"v": 1}), lambda r: r.log(IID, 0), None),
    (
        "log",
        IID + RUN_SEQ,
        msgpack.packb({"k": "step", "e": "boom"}),
        lambda r: r.log(IID, 0),
        None,
    ),
    ("mail", IID + (1).to_bytes(8, "big"), msgpack.packb({"n": 0}), lambda r: r.mailbox(IID), None),
    ("mail", IID + (1).to_bytes(8, "big"), msgpack.packb([7, 1]), lambda r: r.mailbox(IID), None),
    (
        "mail",
        IID + (1).to_bytes(8, "big"),
        msgpack.packb(["\x00cancel", 1]),
        lambda r: r.mailbox(IID),
        None,
    ),
    (
        "mail",
        IID + (9).to_bytes(8, "big"),
        msgpack.packb(["go", 2, 0.0]),
        lambda r: r.mailbox(IID),
        ("counters", IID + b"m"),
    ),
    (
        "stream",
        IID + (3).to_bytes(8, "big"),
        msgpack.packb(1),
        lambda r: r.stream(IID),
        ("counters", IID + b"s"),
    ),
    ("stream", IID + (0).to_bytes(8, "big"), None, lambda r: r.stream(IID), None),
]


@pytest.mark.parametrize(("database", "key", "value", "read", "names"), SHAPES)
async def test_every_damaged_shape_reads_as_journal_corrupt(
    tmp_path, database, key, value, read, names
):
    path = tmp_path / "j"
    await _filled(path)
    put(path, database, key, value)
    journal = LMDBJournal(path)
    journal.check_shapes = True
    async with journal:
        with journal.reader() as r:
            with pytest.raises(JournalCorrupt) as info:
                read(r)
            assert_names(info.value, *(names or (database, key)))
            # The other instance reads as it was written.
            assert [(1, ["go", 1, 0.0])] == r.mailbox(OTHER)
            assert [(0, {"i": 0})] == r.stream(OTHER)
            assert {1: {"k": "step", "n": "s", "v": 1}} == r.log(OTHER, 0)


def _seq(seq: int) -> bytes:
    return IID + RUN_SEQ[:4] + seq.to_bytes(4, "big")


_ENTRY = msgpack.packb({"k": "wait", "n": "go", "h": b"", "v": 1, "m": 1})
_OTHER_ENTRY = msgpack.packb({"k": "step", "n": "s", "h": b"", "v": {"x": [1, 2]}})


# {seq or key: stored bytes} written into a log that has a good entry at seq 1,
# and the key the error names: a run's log is read in one pass, and each entry
# must still hold exactly one value of the entry's shape.
ENTRY_DAMAGE = [
    ({2: _ENTRY + _ENTRY}, _seq(2)),  # two values in one
    ({2: _ENTRY[:-1]}, _seq(2)),  # cut short
    ({2: b""}, _seq(2)),
    ({2: msgpack.packb({"k": 5})}, _seq(2)),
    ({2: msgpack.packb({"k": "sleep", "n": "", "h": b""})}, _seq(2)),  # a timer without its due
    # one and a half values, then the other half: read in one stream they
    # would make two whole entries
    ({1: _ENTRY + _OTHER_ENTRY[:5], 2: _OTHER_ENTRY[5:]}, _seq(1)),
    ({_seq(2) + b"x": _ENTRY}, _seq(2) + b"x"),  # a key longer than the layout's
]


@pytest.mark.parametrize(
    ("damage", "named"),
    ENTRY_DAMAGE,
    ids=[
        "two values",
        "cut short",
        "empty",
        "a kind of 5",
        "a timer without its due time",
        "one value over two entries",
        "a longer key",
    ],
)
async def test_a_damaged_entry_in_a_run_s_log_is_named(tmp_path, damage, named):
    path = tmp_path / "j"
    await _filled(path)
    for where, value in damage.items():
        put(path, "log", _seq(where) if isinstance(where, int) else where, value)
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            with pytest.raises(JournalCorrupt) as info:
                r.entries(IID, 0)
            assert_names(info.value, "log", named)
            assert [1] == list(r.entries(OTHER, 0))


async def test_a_run_s_log_of_several_shapes_reads_in_order(tmp_path):
    path = tmp_path / "j"
    await _filled(path)
    for seq, value in ((2, _OTHER_ENTRY), (3, _ENTRY), (4, msgpack.packb({"k": "emit"}))):
        put(path, "log", _seq(seq), value)
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            log = r.entries(IID, 0)
    assert [1, 2, 3, 4] == list(log)
    assert [("step", 1), ("step", {"x": [1, 2]}), ("wait", 1), ("emit", storage.NO_VALUE)] == [
        (entry.kind, entry.value) for entry in log.values()
    ]


@pytest.mark.parametrize(
    "record",
    [
        {"run": "1"},
        {"inc": None},
        {"params": "x"},
        {"input": [1]},
        {"parent": 3},
        {"restarts": [1]},
        [1, 2],
        "s",
        7,
    ],
)
async def test_an_instance_record_of_another_shape_is_reported(tmp_path, record):
    path = tmp_path / "j"
    await _filled(path)
    async with LMDBJournal(path) as journal:
        txn = Txn()
        txn.put_instance_encoded(
            IID, address="p/x", process="p/:n", status="running", record=encode(record)
        )
        await journal.commit(txn)
        journal.check_shapes = True
        with journal.reader() as r:
            with pytest.raises(JournalCorrupt) as info:
                r.instance(IID)
            assert_names(info.value, "instances", IID)
            broken: list = []
            assert ["p/y"] == [row.address for row in r.instances(corrupt=broken)]
            assert [(IID, "p/x")] == [(b.iid, b.address) for b in broken]


async def test_a_header_of_another_shape_is_reported(tmp_path):
    path = tmp_path / "j"
    await _filled(path)
    header = msgpack.packb([1, 2])
    put(path, "instances", IID, b"\x01" + len(header).to_bytes(2, "big") + header + b"\x80")
    put(path, "instances", OTHER, b"")  # emptied altogether
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            for iid in (IID, OTHER):
                with pytest.raises(JournalCorrupt) as info:
                    r.instance(iid)
                assert_names(info.value, "instances", iid)
        txn = Txn()
        txn.set_status(OTHER, "corrupt")  # marking works on an emptied record too
        await journal.commit(txn)


# -- no write overwrites ---------------------------------------------------------------


async def test_a_lost_mail_counter_fails_the_send_and_keeps_the_unread_message(tmp_path):
    path = tmp_path / "j"
    await _filled(path)
    put(path, "counters", IID + b"m", None)
    async with LMDBJournal(path) as journal:
        outcomes: dict[int, object] = {}

        async def send(iid: bytes, n: int) -> None:
            txn = Txn()
            txn.append_message(iid, ["go", n, 0.0])
            try:
                outcomes[n] = await journal.commit(txn)
            except JournalCorrupt as exc:
                outcomes[n] = (exc.database, exc.key)

        async with trio.open_nursery() as nursery:  # one group commit
            for n in range(10):
                nursery.start_soon(send, IID if n == 5 else OTHER, n)
        assert ("mail", IID + (1).to_bytes(8, "big")) == outcomes.pop(5)
        # The other nine sends of the batch committed (the first message is from _filled).
        assert [[seq] for seq in range(2, 11)] == sorted(outcomes.values())  # type: ignore[type-var]
        with journal.reader() as r:
            assert 0 == r.last_message_seq(IID)
            with pytest.raises(JournalCorrupt) as info:  # the reader sees the lost counter
                r.mailbox(IID)
            assert_names(info.value, "counters", IID + b"m")
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(db=env.open_db(b"mail")) as txn:
        assert msgpack.packb(["go", 1, 0.0]) == txn.get(IID + (1).to_bytes(8, "big"))
    env.close()


async def test_a_lost_stream_counter_fails_the_emit_and_keeps_the_value(tmp_path):
    path = tmp_path / "j"
    await _filled(path)
    put(path, "counters", IID + b"s", None)
    async with LMDBJournal(path) as journal:
        txn = Txn()
        txn.append_stream(IID, "again")
        with pytest.raises(JournalCorrupt) as info:
            await journal.commit(txn)
        assert_names(info.value, "stream", IID + (0).to_bytes(8, "big"))
        with journal.reader() as r:
            with pytest.raises(JournalCorrupt) as info:
                r.stream(IID)
            assert_names(info.value, "counters", IID + b"s")
            assert [(0, {"i": 0})] == r.stream(OTHER)


async def test_a_lost_mail_counter_fails_the_send_in_memory_too():
    journal = MemoryJournal()
    async with journal:
        txn = Txn()
        txn.append_message(IID, ["go", 1, 0.0])
        txn.append_message(IID, ["go", 2, 0.0])
        assert [1, 2] == await journal.commit(txn)
        del journal._mail_next[IID]
        txn = Txn()
        txn.append_message(OTHER, ["go", 3, 0.0])
        txn.append_message(IID, ["go", 4, 0.0])
        with pytest.raises(JournalCorrupt) as info:
            await journal.commit(txn)
        assert_names(info.value, "mail", IID + (1).to_bytes(8, "big"))
        with journal.reader() as r:
            assert [] == r.mailbox(OTHER)  # nothing of the failed transaction applied
            with pytest.raises(JournalCorrupt) as info:
                r.mailbox(IID)
            assert_names(info.value, "counters", IID + b"m")
        txn = Txn()
        txn.delete_instance(IID)
        txn.append_message(IID, ["go", 5, 0.0])  # a fresh mailbox numbers from 1 again
        assert [1] == await journal.commit(txn)


# -- through the runtime and the command line --------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("base") / "j"
    jd.build(path)
    return path


def _key(base: Path, database: str, address: str, nth: int = 0) -> bytes:
    iid = instance_id(address)
    return [k for d, k in jd.records(base) if d == database and jd.instance_of(d, k) == iid][nth]


@pytest.mark.parametrize(
    ("database", "address", "value"),
    [
        ("counters", jd.WAITER, b"\x00\x01"),  # the mail counter
        ("log", jd.SLEEPER, msgpack.packb([1, 2])),
        ("log", jd.EMITTER, msgpack.packb({"k": 7})),
        ("mail", jd.WAITER, msgpack.packb({"n": 0})),
        ("mail", jd.WAITER, msgpack.packb("go")),
        ("timer_ids", jd.SLEEPER, b"\x01\x02"),
        ("instances", jd.SLEEPER, None),  # reshaped record, below
    ],
)
def test_a_damaged_instance_is_marked_corrupt_and_shown(base, tmp_path, database, address, value):
    path = tmp_path / "j"
    jd.copy_journal(base, path)
    key = _key(base, database, address)
    if value is None:
        jd.damage(path, database, key, "reshape", {"run": "zero"})
    else:
        put(path, database, key, value)
    outcomes = jd.check(path, database, key)
    assert "corrupt" == outcomes[address]
    assert {a: "ok" for a in jd.ADDRESSES if a != address} == {
        a: o for a, o in outcomes.items() if a != address
    }
    code, _out, err = jd.show(path, address)
    assert 5 == code
    assert "Traceback" not in err and f"database '{database}'" in err and key.hex() in err


@pytest.mark.parametrize(("value", "index"), [(b"\x01\x02\x03", None), (None, 0)])
def test_a_damaged_cursor_or_a_lost_stream_value_marks_its_instance_corrupt(
    base, tmp_path, value, index
):
    path = tmp_path / "j"
    jd.copy_journal(base, path)
    if index is None:
        database, key = "cursors", _key(base, "cursors", jd.EMITTER)  # consumer "c"
    else:
        database, key = "stream", instance_id(jd.EMITTER) + (2).to_bytes(8, "big")
    put(path, database, key, value)

    async def main() -> None:
        async with jd.open_system(path) as system:
            with pytest.raises(JournalCorrupt) as info:
                async with system.stream(jd.EMITTER, "fresh" if index is not None else "c") as s:
                    async for _ in s:
                        pass
            assert_names(info.value, database, key)
            # The emitter (live, waiting) is stopped and marked corrupt, as if
            # its run had met the record; calls on it say so.
            with trio.fail_after(10):
                async with aclosing(system.get(jd.EMITTER).status_changes()) as changes:
                    async for status in changes:
                        if status == "corrupt":
                            break
            with pytest.raises(JournalCorrupt):
                await system.send(jd.EMITTER, jd.stop)
            # The other instances work.
            await system.send(jd.WAITER, Signal("a"), "a1")
            assert ["a1", "b1"] == await system.get(jd.WAITER).result()
        async with jd.open_system(path) as system:  # still corrupt after a restart
            assert "corrupt" == system.get(jd.EMITTER).status
            with pytest.raises(JournalCorrupt):
                await system.get(jd.EMITTER).result()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- the memory journal, damaged the same ways ----------------------------------------------


@pytest.fixture(scope="module")
def memory_base() -> MemoryJournal:
    journal = MemoryJournal()
    jd.build(journal)
    return journal


def _memory_damage(journal: MemoryJournal, store: str, address: str, how: str) -> None:
    iid = instance_id(address)
    if store == "counter":
        del journal._mail_next[iid]
        return
    if store == "instances":
        status, process, addr, data = journal._instances[iid]
        journal._instances[iid] = (status, process, addr, _mangled(data, how))
        return
    if store == "stream":
        journal._streams[iid][0] = _mangled(journal._streams[iid][0], how)
        return
    if store == "log":
        entries = next(e for e in journal._logs[iid].values() if e)
    else:
        entries = journal._mail[iid]
    seq = min(entries)
    entries[seq] = _mangled(entries[seq], how)


def _mangled(data: bytes, how: str) -> bytes:
    return {
        "flip": b"\xc1" + data[1:],
        "truncate": data[: len(data) // 2],
        "reshape": msgpack.packb([1, {"k": 2}]),
    }[how]


@pytest.mark.parametrize(
    ("store", "address", "how"),
    [
        ("instances", a, how)
        for a in (jd.WAITER, jd.SLEEPER, jd.EMITTER)
        for how in ("flip", "truncate", "reshape")
    ]
    + [("log", a, how) for a in (jd.SLEEPER, jd.EMITTER) for how in ("flip", "reshape")]
    + [("mail", jd.WAITER, how) for how in ("flip", "truncate", "reshape")]
    + [("stream", jd.EMITTER, how) for how in ("flip", "truncate")]
    + [("counter", jd.WAITER, "delete")],
)
def test_a_damaged_memory_journal_hides_only_the_damaged_instance(memory_base, store, address, how):
    journal = copy.deepcopy(memory_base)
    _memory_damage(journal, store, address, how)
    outcomes = jd.check_memory(journal, address)
    assert "corrupt" == outcomes[address]
    assert {a: "ok" for a in jd.ADDRESSES if a != address} == {
        a: o for a, o in outcomes.items() if a != address
    }


@process("kw/:n")
async def takes_x(ctx: Context, n: str, x: int = 0) -> int:
    await ctx.wait(jd.go)
    return x


async def test_input_the_process_does_not_take_does_not_end_the_system(tmp_path, autojump_clock):
    path = tmp_path / "j"
    async with actors.open_system(LMDBJournal(path), processes=[takes_x], now=virtual_wall) as s:
        await s.start(takes_x, "a", x=1)
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            row = r.instance(instance_id("kw/a"))
        txn = Txn()
        txn.put_instance(
            row.iid,
            address=row.address,
            process=row.process,
            status="running",
            record=attrs.evolve(row.record, input={"y": 1}),
        )
        await journal.commit(txn)
    async with actors.open_system(LMDBJournal(path), processes=[takes_x], now=virtual_wall) as s:
        handle = s.get("kw/a")
        with trio.fail_after(10):
            while handle.last_error is None:
                await trio.sleep(0.01)
        assert "suspended" == handle.status
        assert (
            "InvalidArguments" in handle.last_error and "cancel the instance" in handle.last_error
        )


async def test_a_damaged_timer_key_stops_no_timer_scan(tmp_path):
    path = tmp_path / "j"
    await _filled(path)
    lost = (100_000_000).to_bytes(8, "big") + IID + RUN_SEQ[:4] + (2).to_bytes(4, "big")
    put(path, "timers", lost, None)
    put(path, "timers", b"\x00\x01", b"")  # too short to name a timer
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            assert [(OTHER, 2)] == [(t.iid, t.seq) for t in r.due_timers(1000.0)]
            assert 100.0 == r.next_due()
            with pytest.raises(JournalCorrupt) as info:  # the instance's own read reports it
                r.timers(IID)
            assert_names(info.value, "timers", lost)
            assert [2] == [t.seq for t in r.timers(OTHER)]


async def test_a_send_that_meets_a_damaged_mail_counter_marks_its_instance_corrupt(
    base, tmp_path, autojump_clock
):
    """The counter says the next message takes a number an unread message
    holds: the send writes nothing and raises, and the instance is marked
    corrupt, so result() and cancel() raise at once instead of waiting on
    an instance that can never take mail again."""
    path = tmp_path / "j"
    jd.copy_journal(base, path)
    put(path, "counters", _key(base, "counters", jd.WAITER), b"\x00" * 8)  # next: 1, taken
    async with jd.open_system(path) as system:
        handle = system.get(jd.WAITER)
        with pytest.raises(storage.JournalCorrupt) as sent:
            await system.send(jd.WAITER, jd.a, "a1")
        assert "mail" == sent.value.database
        # (A live instance stops where it waits and is marked then: wait for it.)
        with trio.fail_after(5), pytest.raises(storage.JournalCorrupt):
            await handle.result()
        assert "corrupt" == handle.status
        with pytest.raises(storage.JournalCorrupt):
            await system.cancel(jd.WAITER)
        # The others are untouched.
        assert 2 == await system.get(jd.SLEEPER).result()
    async with jd.open_system(path) as system:
        assert "corrupt" == system.get(jd.WAITER).status


@pytest.mark.skipif(
    __import__("os").environ.get("ACTORS_TEST_POSTGRES", "1") == "0", reason="PostgreSQL off"
)
async def test_a_damaged_mail_counter_on_postgresql_marks_its_instance_corrupt(request):
    import psycopg

    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)
    async with actors.open_system(
        PostgresJournal(dsn, schema=schema), processes=[jd.waiter]
    ) as system:
        handle = await system.start(jd.waiter, "w")
        await system.send(jd.WAITER, jd.b, "b1")  # unread: it waits for a first
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'UPDATE "{schema}".counters SET next = 0 WHERE kind = 1')
        with pytest.raises(storage.JournalCorrupt) as sent:
            await system.send(jd.WAITER, jd.a, "a1")
        assert "mail" == sent.value.database
        # The live instance stops where it waits and is marked corrupt.
        with trio.fail_after(5), pytest.raises(storage.JournalCorrupt):
            await handle.result()
        assert "corrupt" == handle.status
