"""A corrupt record hides only itself: journal scans go past it and report
it, recovery marks its instance corrupt and recovers every other one, and
each call that addresses it raises `JournalCorrupt` naming database and key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from actors import Context, Signal, process
from storage import (
    CorruptRecord,
    InstanceRecord,
    JournalCorrupt,
    LMDBJournal,
    MemoryJournal,
    Txn,
    instance_id,
)
from tests.conftest import BACKENDS
from tests.pg import fresh_schema
from tests.runtime_helpers import Opener, wait_status

ROOT = Path(__file__).resolve().parents[2]
go = Signal("go")
NAMES = ["a", "b", "c", "d", "e", "f"]
BAD = "d"  # in the middle of the status index's order (by id): c e f d a b


@process("echo/:name")
async def echo(ctx: Context, name: str) -> str:
    payload = await ctx.wait(go)
    return f"hello {name} {payload}"


def damage(path: Path, database: bytes, key: bytes, how: str) -> None:
    """Overwrite part of one stored value with bytes that never decode."""
    env = lmdb.open(str(path), max_dbs=16)
    try:
        with env.begin(write=True, db=env.open_db(database)) as txn:
            value = txn.get(key)
            assert value is not None
            if how == "record":  # the record after the header
                header_end = 3 + int.from_bytes(value[1:3], "big")
                broken = value[:header_end] + b"\xc1\xc1"
            elif how == "header":  # the header itself: address and process unreadable
                broken = value[:3] + b"\xc1" * (len(value) - 3)
            else:  # a log entry or a message: the whole value
                broken = b"\xc1" + value[1:]
            txn.put(key, broken)
    finally:
        env.close()


def assert_names(exc: JournalCorrupt, database: str, key: bytes) -> None:
    assert (database, key) == (exc.database, exc.key)
    assert f"database {database!r}" in str(exc) and key.hex() in str(exc)


# -- the scans -------------------------------------------------------------------------


async def _three_instances(journal) -> None:
    txn = Txn()
    for name in ("x", "y", "z"):
        iid = instance_id(f"p/{name}")
        txn.put_instance(
            iid,
            address=f"p/{name}",
            process="p/:n",
            status="running",
            record=InstanceRecord(params=[name]),
        )
    await journal.commit(txn)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_instances_goes_past_a_corrupt_record_and_reports_it(backend, tmp_path, request):
    memory = MemoryJournal()
    if backend == "postgres":
        from storage import PostgresJournal

        dsn, schema = fresh_schema(request)
        make = lambda: PostgresJournal(dsn, schema=schema)  # noqa: E731
    elif backend == "lmdb":
        make = lambda: LMDBJournal(tmp_path / "j")  # noqa: E731
    else:
        make = lambda: memory  # noqa: E731
    async with make() as journal:
        await _three_instances(journal)
    bad = instance_id("p/y")
    if backend == "postgres":
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{schema}".instances SET record = %s WHERE iid = %s', [b"\xc1", bad]
            )
    elif backend == "lmdb":
        damage(tmp_path / "j", b"instances", bad, "record")
    else:
        status, proc, address, _ = memory._instances[bad]
        memory._instances[bad] = (status, proc, address, b"\xc1")
    async with make() as journal:
        with journal.reader() as r:
            with pytest.raises(JournalCorrupt) as info:
                list(r.instances())  # without a list for them, the scan stops
            assert_names(info.value, "instances", bad)
            corrupt: list[CorruptRecord] = []
            rows = list(r.instances("running", corrupt=corrupt))
            assert {"p/x", "p/z"} == {row.address for row in rows}
            assert 1 == len(corrupt)
            found = corrupt[0]
            assert (bad, "p/y", "p/:n", "running") == (
                found.iid,
                found.address,
                found.process,
                found.status,
            )
            assert_names(found.error, "instances", bad)
            assert [] == list(r.instances("completed", corrupt=corrupt))
            assert ["p/x", "p/z"] == sorted(
                row.address for row in r.instances(process="p/:n", corrupt=[])
            )


async def test_a_record_whose_header_is_broken_is_reported_and_can_be_marked(tmp_path):
    async with LMDBJournal(tmp_path / "j") as journal:
        await _three_instances(journal)
    bad = instance_id("p/x")
    damage(tmp_path / "j", b"instances", bad, "header")
    async with LMDBJournal(tmp_path / "j") as journal:
        corrupt: list[CorruptRecord] = []
        with journal.reader() as r:
            assert ["p/y", "p/z"] == sorted(row.address for row in r.instances(corrupt=corrupt))
        assert [(bad, None, "p/:n", "running")] == [
            (c.iid, c.address, c.process, c.status) for c in corrupt
        ]
        txn = Txn()
        txn.set_status(bad, "corrupt")  # needs nothing of the broken header
        await journal.commit(txn)
        with journal.reader() as r:
            assert {"running": 2, "corrupt": 1} == r.count_by_status()
            corrupt.clear()
            assert [] == list(r.instances("corrupt", corrupt=corrupt))
            assert ["corrupt"] == [c.status for c in corrupt]


# -- recovery and the calls that address a corrupt instance ----------------------------


def run_cli(path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TZ="UTC", COLUMNS="160")
    return subprocess.run(
        [sys.executable, "-m", "actors", "--journal", str(path), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def _every_call_raises(system, address: str, database: str, key: bytes) -> None:
    assert "corrupt" == system.get(address).status
    with pytest.raises(JournalCorrupt) as info:
        await system.send(address, go, 1)
    assert_names(info.value, database, key)
    assert address in str(info.value)
    with pytest.raises(JournalCorrupt) as info:
        await system.get(address).result()
    assert_names(info.value, database, key)
    with pytest.raises(JournalCorrupt) as info:
        await system.cancel(address)
    assert_names(info.value, database, key)
    with pytest.raises(JournalCorrupt) as info:
        await system.signal_with_start(echo, BAD, signal=go, payload=1)
    assert_names(info.value, database, key)


async def _start_all_as_if_crashed_mid_run(opener) -> None:
    """Start every instance, then leave them all ``running`` in the journal,
    as a system killed mid-run would: recovery then runs each at once."""
    async with opener(echo) as system:
        for name in NAMES:
            await system.start(echo, name)
    async with opener.journal() as journal:
        txn = Txn()
        for name in NAMES:
            txn.set_status(instance_id(f"echo/{name}"), "running")
        await journal.commit(txn)


async def _the_others_run(system, payload: int, *, recovered: bool) -> None:
    others = [name for name in NAMES if name != BAD]
    if recovered:  # recovery ran each at once, not only when its mail came
        assert {instance_id(f"echo/{n}") for n in others} == (
            set(system.registry.live) | set(system.registry.activating)
        )
    for name in others:
        await system.send(f"echo/{name}", go, payload)
        assert f"hello {name} {payload}" == await system.get(f"echo/{name}").result()


@pytest.mark.parametrize("how", ["record", "header"])
async def test_recovery_skips_a_corrupt_instance_and_recovers_all_others(opener, how, caplog):
    await _start_all_as_if_crashed_mid_run(opener)
    bad = instance_id(f"echo/{BAD}")
    damage(opener.path, b"instances", bad, how)

    async with opener(echo) as system:
        assert any("is not recovered" in r.getMessage() for r in caplog.records)
        await _the_others_run(system, 1, recovered=True)
        await _every_call_raises(system, f"echo/{BAD}", "instances", bad)
        statuses = {info.id: info.status async for info in system.query()}
        assert {f"echo/{n}" for n in NAMES if n != BAD} == {
            a for a, s in statuses.items() if s == "completed"
        }
        # query lists it when its address still reads (the header is intact).
        assert ("corrupt" if how == "record" else None) == statuses.get(f"echo/{BAD}")

    # Marked in the journal: a later system (which does not scan it again) says the same.
    async with opener(echo) as system:
        await _every_call_raises(system, f"echo/{BAD}", "instances", bad)

    done = run_cli(opener.path, "show", f"echo/{BAD}")
    assert 5 == done.returncode
    assert "database 'instances'" in done.stderr and bad.hex() in done.stderr
    done = run_cli(opener.path, "list")
    assert 0 == done.returncode, done.stderr
    row = next(line for line in done.stdout.splitlines() if "corrupt" in line)
    assert (f"echo/{BAD}" in row) == (how == "record")


async def test_a_corrupt_message_marks_its_instance_when_it_runs(opener):
    async with opener(echo) as system:
        for name in NAMES:
            await system.start(echo, name)
    bad = instance_id(f"echo/{BAD}")
    async with LMDBJournal(opener.path) as journal:  # mail left while no system ran
        txn = Txn()
        txn.append_message(bad, ["go", 1, 0.0])
        (seq,) = await journal.commit(txn)
    key = bad + seq.to_bytes(8, "big")
    damage(opener.path, b"mail", key, "value")

    async with opener(echo) as system:
        handle = system.get(f"echo/{BAD}")
        assert "corrupt" == await wait_status(handle, "corrupt")
        await _every_call_raises(system, f"echo/{BAD}", "mail", key)
        await _the_others_run(system, 2, recovered=False)
    async with opener(echo) as system:
        await _every_call_raises(system, f"echo/{BAD}", "mail", key)
    done = run_cli(opener.path, "show", f"echo/{BAD}")
    assert 5 == done.returncode
    assert "database 'mail'" in done.stderr and key.hex() in done.stderr


async def test_recovery_skips_a_corrupt_instance_in_memory_too(tmp_path):
    opener = Opener(tmp_path, "memory")
    await _start_all_as_if_crashed_mid_run(opener)
    bad = instance_id(f"echo/{BAD}")
    journal = opener.journal()
    status, proc, address, _ = journal._instances[bad]
    journal._instances[bad] = (status, proc, address, b"\xc1\xc1")

    async with opener(echo) as system:
        await _the_others_run(system, 3, recovered=True)
        await _every_call_raises(system, f"echo/{BAD}", "instances", bad)
    async with opener(echo) as system:
        await _every_call_raises(system, f"echo/{BAD}", "instances", bad)
