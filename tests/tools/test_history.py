"""Histories you can take home: ``export`` writes an instance's records as a
portable file, `actors.testing.replay_history` replays it against local
code, and ``import`` puts it into another journal where it resumes. From
LMDB and from PostgreSQL, through the command line and `actors.testing`."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors._tools._cli import main as cli_main
from actors.testing import import_history, replay_history
from storage import LMDBJournal
from tests.runtime_helpers import virtual_wall, wait_status

ROOT = Path(__file__).resolve().parents[2]

approved = Signal("approved")
CHARGED: list[str] = []
SHIPPED: list[str] = []


@pytest.fixture(autouse=True)
def _fresh():
    CHARGED.clear()
    SHIPPED.clear()


def charge(order_id: str, amount: int) -> dict:
    CHARGED.append(order_id)
    return {"charged": amount, "at": dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)}


def reserve(order_id: str) -> tuple:
    return ("reserved", order_id)


@process("orders/:order_id")
async def order(ctx: Context, order_id: str, *, amount: int) -> dict:
    charged = await ctx.step(charge, order_id, amount)
    await ctx.step(reserve, order_id)
    which, value = await ctx.first(ok=ctx.wait(approved), late=ctx.sleep(3 * 86400))
    if which == "late":
        return {"order": order_id, "late": True}
    return {"order": order_id, "by": value["by"], "charged": charged["charged"]}


# Changed code, as a developer's laptop has it: the same process, a step renamed ...
@process("orders/:order_id")
async def order_renamed(ctx: Context, order_id: str, *, amount: int) -> dict:
    charged = await ctx.step(charge, order_id, amount, name="charge_card")
    await ctx.step(reserve, order_id)
    _, value = await ctx.first(ok=ctx.wait(approved), late=ctx.sleep(3 * 86400))
    return {"order": order_id, "charged": charged["charged"], "value": value}


# ... or two steps swapped.
@process("orders/:order_id")
async def order_reordered(ctx: Context, order_id: str, *, amount: int) -> dict:
    await ctx.step(reserve, order_id)
    charged = await ctx.step(charge, order_id, amount)
    _, value = await ctx.first(ok=ctx.wait(approved), late=ctx.sleep(3 * 86400))
    return {"order": order_id, "charged": charged["charged"], "value": value}


def ship(parcel: str) -> str:
    SHIPPED.append(parcel)
    return f"shipped {parcel}"


@process("parcel/:parcel_id")
async def parcel(ctx: Context, parcel_id: str) -> str:
    await ctx.wait(approved)
    return await ctx.step(ship, parcel_id)


@process("shipments/:shipment_id")
async def shipment(ctx: Context, shipment_id: str) -> dict:
    shipped = await ctx.call(parcel, "p-1")
    return {"shipment": shipment_id, "parcel": shipped}


class Store:
    """A journal store (LMDB or a PostgreSQL schema) and how the CLI names it."""

    def __init__(self, kind: str, make, argv: list[str]) -> None:
        self.kind = kind
        self.make = make
        self.argv = argv  # --journal's value, then options that go after the command

    def open(self, *processes):
        return actors.open_system(self.make(), list(processes), now=virtual_wall)

    async def cli(self, *args: str) -> int:
        return await cli(self.argv[0], *args, *self.argv[1:])


async def cli(journal: str, *args: str) -> int:
    """The command line, in this process (in a worker thread: it runs trio itself)."""
    return await trio.to_thread.run_sync(cli_main, ["--journal", journal, *args])


def lmdb_store(path: Path) -> Store:
    return Store("lmdb", lambda: LMDBJournal(path), [str(path)])


def postgres_store(request) -> Store:
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)
    return Store("postgres", lambda: PostgresJournal(dsn, schema=schema), [dsn, "--schema", schema])


@pytest.fixture(params=["lmdb", "postgres"])
def production(request, tmp_path) -> Store:
    """Where the instance ran: an LMDB journal, or a PostgreSQL schema."""
    if request.param == "lmdb":
        return lmdb_store(tmp_path / "production")
    return postgres_store(request)


async def run_until_waiting(store: Store, *starts: tuple) -> None:
    """Start instances and let each reach its wait for ``approved``, then close."""
    async with store.open(order, shipment, parcel) as system:
        handles = [await system.start(proc, *params, **input) for proc, params, input in starts]
        for handle in handles:
            assert "suspended" == await wait_status(handle, "suspended")


async def export(store: Store, address: str, path: Path) -> dict:
    assert 0 == await store.cli("export", address, "--output", str(path))
    return json.loads(path.read_text())


# -- replay ----------------------------------------------------------------------------


async def test_a_history_replays_on_its_code_and_a_planted_divergence_is_found(
    production, tmp_path
):
    await run_until_waiting(production, (order, ("o-17",), {"amount": 100}))
    path = tmp_path / "order-17.history"
    doc = await export(production, "orders/o-17", path)
    assert ["orders/o-17"] == [one["address"] for one in doc["instances"]]

    assert [] == await replay_history(path, [order])

    # A step renamed: the entry where the history and the code part is named.
    (renamed,) = await replay_history(path, [order_renamed])
    assert ("orders/o-17", "suspended") == (renamed.address, renamed.status)
    entries = {e["effect"]: e for e in doc["instances"][0]["runs"][0]["log"]}
    assert "charge" == entries[renamed.position]["name"]
    assert {"k": "step", "n": "charge"} == renamed.expected
    assert "charge" in renamed.message and "charge_card" in renamed.message

    # Two steps swapped: found at the first of them.
    (swapped,) = await replay_history(path, [order_reordered])
    assert renamed.position == swapped.position
    assert {"k": "step", "n": "charge"} == swapped.expected
    assert "reserve" in swapped.message

    # A definition missing is a problem too, not a silent pass.
    (missing,) = await replay_history(path, [parcel])
    assert "not among the processes given" in missing.message


async def test_a_finished_instance_replays_to_its_end(tmp_path):
    store = lmdb_store(tmp_path / "production")
    async with store.open(order) as system:
        handle = await system.start(order, "o-1", amount=5)
        await wait_status(handle, "suspended")
        await system.send("orders/o-1", approved, {"by": "ann"})
        assert "ann" == (await handle.result())["by"]
    path = tmp_path / "o-1.history"
    doc = await export(store, "orders/o-1", path)
    assert "completed" == doc["instances"][0]["status"]
    assert [] == await replay_history(path, [order])
    (problem,) = await replay_history(path, [order_reordered])
    assert "completed" == problem.status


# -- import and resume ---------------------------------------------------------------


async def test_an_imported_instance_resumes_and_finishes_without_repeating_a_step(
    production, tmp_path
):
    await run_until_waiting(production, (order, ("o-17",), {"amount": 100}))
    assert ["o-17"] == CHARGED
    path = tmp_path / "order-17.history"
    await export(production, "orders/o-17", path)

    laptop = lmdb_store(tmp_path / "laptop")  # no journal there yet: import makes one
    assert 0 == await laptop.cli("import", str(path))
    async with laptop.open(order) as system:
        handle = system.get("orders/o-17")
        assert handle is not None and "suspended" == handle.status
        await system.send("orders/o-17", approved, {"by": "ann"})
        assert {"order": "o-17", "by": "ann", "charged": 100} == await handle.result()
    assert ["o-17"] == CHARGED  # the charge recorded before the export did not run again

    # The production journal is as it was: the instance still waits there.
    async with production.open(order) as system:
        assert "suspended" == system.get("orders/o-17").status


async def test_a_history_imports_into_postgresql_through_the_testing_kit(request, tmp_path):
    source = lmdb_store(tmp_path / "production")
    await run_until_waiting(source, (order, ("o-5",), {"amount": 7}))
    path = tmp_path / "o-5.history"
    await export(source, "orders/o-5", path)
    target = postgres_store(request)
    assert ["orders/o-5"] == await import_history(path, target.make())
    async with target.open(order) as system:
        await system.send("orders/o-5", approved, {"by": "bo"})
        assert {"order": "o-5", "by": "bo", "charged": 7} == await system.get("orders/o-5").result()
    assert ["o-5"] == CHARGED


async def test_timers_come_along_and_fire_in_the_new_journal(tmp_path, autojump_clock):
    source = lmdb_store(tmp_path / "production")
    await run_until_waiting(source, (order, ("o-9",), {"amount": 1}))
    path = tmp_path / "o-9.history"
    doc = await export(source, "orders/o-9", path)
    (timer,) = doc["instances"][0]["timers"]
    t0 = trio.current_time()
    target = LMDBJournal(tmp_path / "laptop")
    await import_history(path, target)
    async with actors.open_system(LMDBJournal(tmp_path / "laptop"), [order], now=virtual_wall) as s:
        assert {"order": "o-9", "late": True} == await s.get("orders/o-9").result()
        # It fired when the exported due time came, three days after the wait began.
        assert timer["due"] <= virtual_wall() < timer["due"] + 1
    assert trio.current_time() - t0 == pytest.approx(3 * 86400, abs=1)


async def test_children_come_along_and_the_tree_finishes_in_the_new_journal(production, tmp_path):
    async with production.open(shipment, parcel) as system:
        await system.start(shipment, "s-1")
        child = None
        while child is None:
            await trio.sleep(0.01)
            child = system.get("shipments/s-1/parcel/p-1")
        await wait_status(child, "suspended")
    path = tmp_path / "s-1.history"
    doc = await export(production, "shipments/s-1", path)
    assert ["shipments/s-1", "shipments/s-1/parcel/p-1"] == [
        one["address"] for one in doc["instances"]
    ]
    assert [] == await replay_history(path, [shipment, parcel])
    target = LMDBJournal(tmp_path / "laptop")
    assert ["shipments/s-1", "shipments/s-1/parcel/p-1"] == await import_history(path, target)
    async with actors.open_system(
        LMDBJournal(tmp_path / "laptop"), [shipment, parcel], now=virtual_wall
    ) as system:
        await system.send("shipments/s-1/parcel/p-1", approved, None)
        assert {"shipment": "s-1", "parcel": "shipped p-1"} == await system.get(
            "shipments/s-1"
        ).result()
    assert ["p-1"] == SHIPPED


async def test_import_refuses_an_existing_instance_unless_told_to_replace_it(tmp_path):
    source = lmdb_store(tmp_path / "production")
    await run_until_waiting(source, (order, ("o-3",), {"amount": 3}))
    path = tmp_path / "o-3.history"
    await export(source, "orders/o-3", path)
    laptop = lmdb_store(tmp_path / "laptop")
    async with laptop.open(order) as system:
        handle = await system.start(order, "o-3", amount=999)  # another instance, there first
        await wait_status(handle, "suspended")
        await system.send("orders/o-3", approved, {"by": "local"})
        await handle.result()

    with pytest.raises(actors.AlreadyStarted, match=r"'orders/o-3'.*completed.*replace"):
        await import_history(path, laptop.make())
    done = await trio.to_thread.run_sync(lambda: run_cli(laptop.argv[0], "import", str(path)))
    assert 1 == done.returncode
    assert "an instance is there already (completed" in done.stderr
    assert "--replace" in done.stderr
    async with laptop.open(order) as system:  # left as it was
        assert {"order": "o-3", "by": "local", "charged": 999} == await system.get(
            "orders/o-3"
        ).result()

    assert 0 == await laptop.cli("import", str(path), "--replace")
    async with laptop.open(order) as system:
        handle = system.get("orders/o-3")
        assert "suspended" == handle.status
        await system.send("orders/o-3", approved, {"by": "ann"})
        assert {"order": "o-3", "by": "ann", "charged": 3} == await handle.result()


# -- what is refused -------------------------------------------------------------------


def run_cli(journal: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TZ="UTC")
    return subprocess.run(
        [sys.executable, "-m", "actors", "--journal", journal, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
        text=True,
    )


@pytest.mark.slow  # several interpreters start, one per command
async def test_export_to_stdout_and_the_errors_of_both_commands(tmp_path):
    source = lmdb_store(tmp_path / "production")
    await run_until_waiting(source, (order, ("o-17",), {"amount": 100}))
    journal = source.argv[0]

    def commands() -> dict[str, subprocess.CompletedProcess]:
        path = tmp_path / "order-17.history"
        out = run_cli(journal, "export", "orders/o-17")
        path.write_text(out.stdout)
        doc = json.loads(path.read_text())
        (tmp_path / "v2.history").write_text(json.dumps({**doc, "version": 2}))
        (tmp_path / "junk.history").write_text("{ not json")
        (tmp_path / "other.json").write_text(json.dumps({"format": "something-else"}))
        damaged = json.loads(path.read_text())
        damaged["instances"][0]["runs"][0]["log"][0]["kind"] = 7
        (tmp_path / "damaged.history").write_text(json.dumps(damaged))
        return {
            "stdout": out,
            "unknown": run_cli(journal, "export", "orders/nope"),
            "v2": run_cli(journal, "import", str(tmp_path / "v2.history")),
            "junk": run_cli(journal, "import", str(tmp_path / "junk.history")),
            "other": run_cli(journal, "import", str(tmp_path / "other.json")),
            "damaged": run_cli(journal, "import", str(tmp_path / "damaged.history")),
            "absent": run_cli(journal, "import", str(tmp_path / "absent.history")),
            "schema": run_cli(journal, "export", "orders/o-17", "--schema", "x"),
        }

    done = await trio.to_thread.run_sync(commands)
    assert 0 == done["stdout"].returncode, done["stdout"].stderr
    assert "orders/o-17" == json.loads(done["stdout"].stdout)["address"]
    assert 3 == done["unknown"].returncode
    assert "no instance at 'orders/nope' to export" in done["unknown"].stderr
    assert 5 == done["v2"].returncode
    assert "format version 2" in done["v2"].stderr and "upgrade" in done["v2"].stderr
    assert 5 == done["junk"].returncode and "not JSON" in done["junk"].stderr
    assert 5 == done["other"].returncode and "'something-else'" in done["other"].stderr
    assert 5 == done["damaged"].returncode
    assert "['log'][0]['kind']" in done["damaged"].stderr
    assert 3 == done["absent"].returncode
    assert 2 == done["schema"].returncode
    # Nothing of the refused files was written: the journal holds its one instance.
    async with source.open(order) as system:
        assert ["orders/o-17"] == [i.id async for i in system.query()]


async def test_replay_history_refuses_what_it_cannot_read(tmp_path):
    path = tmp_path / "h.history"
    path.write_text(json.dumps({"format": "actors-history", "version": 99, "instances": []}))
    with pytest.raises(actors.HistoryFormatError, match="version 99") as refused:
        await replay_history(path, [order])
    assert 99 == refused.value.version
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(actors.HistoryFormatError, match="not JSON"):
        await replay_history(path, [order])


async def test_a_child_exported_alone_replays_but_is_not_imported_without_its_parent(tmp_path):
    source = lmdb_store(tmp_path / "production")
    async with source.open(shipment, parcel) as system:
        await system.start(shipment, "s-1")
        child = None
        while child is None:
            await trio.sleep(0.01)
            child = system.get("shipments/s-1/parcel/p-1")
        await wait_status(child, "suspended")
    alone = tmp_path / "p-1.history"
    doc = await export(source, "shipments/s-1/parcel/p-1", alone)
    assert ["shipments/s-1/parcel/p-1"] == [one["address"] for one in doc["instances"]]
    assert [] == await replay_history(alone, [parcel])

    laptop = LMDBJournal(tmp_path / "laptop")
    with pytest.raises(
        actors.InvalidArguments, match=r"without its parent 'shipments/s-1'.*export"
    ):
        await import_history(alone, laptop)
    async with laptop:
        with laptop.reader() as r:
            assert [] == list(r.instances())  # nothing was written

    # With its parent in the journal, the child alone may replace its own copy.
    await export(source, "shipments/s-1", tmp_path / "s-1.history")
    await import_history(tmp_path / "s-1.history", LMDBJournal(tmp_path / "laptop"))
    imported = await import_history(alone, LMDBJournal(tmp_path / "laptop"), replace=True)
    assert ["shipments/s-1/parcel/p-1"] == imported


@pytest.mark.slow  # the command line runs in a subprocess beside the system
async def test_beside_a_running_system_export_reads_and_import_is_refused(tmp_path):
    store = lmdb_store(tmp_path / "production")
    await run_until_waiting(store, (order, ("o-1",), {"amount": 1}))
    await export(store, "orders/o-1", tmp_path / "o-1.history")
    async with store.open(order) as system:
        exported, imported = await trio.to_thread.run_sync(
            lambda: (
                run_cli(store.argv[0], "export", "orders/o-1"),
                run_cli(store.argv[0], "import", str(tmp_path / "o-1.history"), "--replace"),
            )
        )
        assert "suspended" == system.get("orders/o-1").status
    assert 0 == exported.returncode, exported.stderr
    assert "orders/o-1" == json.loads(exported.stdout)["address"]
    assert 4 == imported.returncode
    assert "a running system (pid" in imported.stderr and "stop it, import" in imported.stderr


async def test_a_history_imported_into_postgresql_beside_a_running_node_takes_mail(
    request, tmp_path
):
    source = lmdb_store(tmp_path / "production")
    await run_until_waiting(source, (order, ("o-2",), {"amount": 2}))
    path = tmp_path / "o-2.history"
    await export(source, "orders/o-2", path)
    target = postgres_store(request)
    async with target.open(order) as system:
        assert 0 == await target.cli("import", str(path))
        assert "suspended" == system.get("orders/o-2").status
        await system.send("orders/o-2", approved, {"by": "cy"})
        with trio.fail_after(10):
            result = await system.get("orders/o-2").result()
    assert {"order": "o-2", "by": "cy", "charged": 2} == result
    assert ["o-2"] == CHARGED


@process("orders/:order_id")
async def order_new_input(ctx: Context, order_id: str, *, total: int) -> dict:
    return {"order": order_id, "total": total}


async def test_an_input_the_code_no_longer_takes_is_a_problem(tmp_path):
    await run_until_waiting(lmdb_store(tmp_path / "p"), (order, ("o-4",), {"amount": 4}))
    path = tmp_path / "o-4.history"
    await export(lmdb_store(tmp_path / "p"), "orders/o-4", path)
    (problem,) = await replay_history(path, [order_new_input])
    assert ("orders/o-4", 0) == (problem.address, problem.position)
    assert "do not fit" in problem.message and "'amount'" in problem.message
