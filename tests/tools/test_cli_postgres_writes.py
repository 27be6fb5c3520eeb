"""The command line's writing commands on a PostgreSQL journal named by URL.

The command runs as a brief node of its own (`actors._tools._cli._access.writing_at`):
a write to an instance no live node runs is claimed and fenced, and once the
command ends a node's takeover runs what it left live; a write to one that
a live node runs goes through that node as another node's would (a send is
stored and notifies it, a cancel is asked of it, a retry wakes it) or, for a
drop, is refused naming it. Nodes here are systems in the test's own trio
run (``node=``); the command line runs in a thread (`run_in_process`).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio

pytest.importorskip("psycopg", reason="install the 'postgres' extra")

import actors
from actors import Context, Signal, process
from storage import PostgresJournal
from tests.cli_runner import run_in_process
from tests.pg import fresh_schema
from tests.runtime_helpers import wait_status

go = Signal("go")
note = Signal("note")
shipped = Signal("shipped", identity=("order_id",))
BROKEN = {"flaky": True, "desk": True}  # whether flaky's step, unbook fail (set by the tests)


@process("waits/:id")
async def waiter(ctx: Context, id: str) -> str:
    await ctx.wait(go)
    return id


def _check() -> str:
    if BROKEN["flaky"]:
        raise RuntimeError("broken")
    return "fixed"


@process("flaky/:id")
async def flaky(ctx: Context, id: str) -> str:
    return await ctx.step(_check)


def charge(id: str) -> str:
    return id


def unbook(id: str) -> None:
    if BROKEN["desk"]:
        raise RuntimeError("the desk is closed")


@process("bookings/:id")
async def booking(ctx: Context, id: str) -> None:
    await ctx.step(charge, id, compensate=unbook, retry=actors.Retry(attempts=1))
    raise RuntimeError("no seats")


@process("emits/:id")
async def emitter(ctx: Context, id: str) -> None:
    for n in range(3):
        await ctx.emit({"n": n})
    await ctx.wait(go)


@process("orders/:order_id", listens=[shipped])
async def order(ctx: Context, order_id: str) -> object:
    _, payload = await ctx.receive(shipped)
    return payload


PROCS = [waiter, flaky, booking, emitter, order]


@pytest.fixture
def schema(request: pytest.FixtureRequest) -> tuple[str, str]:
    BROKEN.update(flaky=True, desk=True)
    return fresh_schema(request)


def node(dsn: str, name: str, node: str):
    return actors.open_system(PostgresJournal(dsn, schema=name), PROCS, node=node)


async def cli(schema: tuple[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    dsn, name = schema
    return await trio.to_thread.run_sync(
        run_in_process, [*args, "--journal", dsn, "--schema", name]
    )


async def status_of(schema: tuple[str, str], address: str) -> str:
    done = await cli(schema, "list", "--json")
    assert 0 == done.returncode, done.stderr
    return {i["address"]: i["status"] for i in json.loads(done.stdout)["instances"]}[address]


async def suspended_with_no_node(schema: tuple[str, str], id: str) -> None:
    async with node(*schema, "a") as system:
        await wait_status(await system.start(waiter, id), "suspended")


async def failed_with_no_node(schema: tuple[str, str], id: str) -> None:
    async with node(*schema, "a") as system:
        handle = await system.start(flaky, id)
        await wait_status(handle, "failed")


async def test_a_send_to_an_instance_no_node_runs_is_taken_once_a_node_runs_it(schema):
    await suspended_with_no_node(schema, "w-1")
    sent = await cli(schema, "send", "waits/w-1", "go")
    assert (0, "") == (sent.returncode, sent.stderr)
    assert "as message #" in sent.stdout
    async with node(*schema, "b") as system:
        handle = system.get("waits/w-1")
        assert handle is not None
        with trio.fail_after(5):
            assert "w-1" == await handle.result()


async def test_a_send_while_a_node_runs_it_reaches_that_node(schema):
    async with node(*schema, "a") as system:
        handle = await system.start(waiter, "w-1")
        await wait_status(handle, "suspended")
        sent = await cli(schema, "send", "waits/w-1", "go")
        assert (0, "") == (sent.returncode, sent.stderr)
        with trio.fail_after(5):
            assert "w-1" == await handle.result()


async def test_a_keyed_send_on_postgresql_is_stored_once(schema):
    await suspended_with_no_node(schema, "w-1")
    first = await cli(schema, "send", "waits/w-1", "note", '{"n": 1}', "--key", "req-1")
    again = await cli(schema, "send", "waits/w-1", "note", '{"n": 2}', "--key", "req-1")
    assert (0, 0) == (first.returncode, again.returncode), again.stderr
    assert "had key 'req-1' already" in again.stdout
    mail = await cli(schema, "mail", "waits/w-1", "--json")
    assert [{"n": 1}] == [m["payload"] for m in json.loads(mail.stdout)["unread"]]


async def test_a_cancel_of_an_instance_a_live_node_runs_is_done_by_that_node(schema):
    async with node(*schema, "a") as system:
        handle = await system.start(waiter, "w-1")
        await wait_status(handle, "suspended")
        done = await cli(schema, "cancel", "waits/w-1", "--json")
        assert (0, "") == (done.returncode, done.stderr)
        doc = json.loads(done.stdout)
        assert ("a", ["waits/w-1"]) == (doc["through_node"], doc["cancelled"])
        with trio.fail_after(5):
            assert "cancelled" == await wait_status(handle, "cancelled")
        assert "a" == json.loads((await cli(schema, "show", "waits/w-1", "--json")).stdout).get(
            "owner", "a"
        )


async def test_a_cancel_of_an_instance_no_node_runs_is_written_by_the_command(schema):
    await suspended_with_no_node(schema, "w-1")
    done = await cli(schema, "cancel", "waits/w-1", "--reason", "by hand")
    assert (0, "") == (done.returncode, done.stderr)
    assert "cancelled waits/w-1 (suspended before): by hand" in done.stdout
    assert "cancelled" == await status_of(schema, "waits/w-1")
    async with node(*schema, "b") as system:  # a node that opens leaves it so
        handle = system.get("waits/w-1")
        assert handle is not None and "cancelled" == handle.status


async def test_a_retry_of_a_failed_instance_its_live_node_owns_runs_there(schema):
    async with node(*schema, "a") as system:
        handle = await system.start(flaky, "f-1")
        await wait_status(handle, "failed")
        BROKEN["flaky"] = False
        done = await cli(schema, "retry", "flaky/f-1")
        assert (0, "") == (done.returncode, done.stderr)
        assert "as incarnation 2" in done.stdout
        again = system.get("flaky/f-1")
        assert again is not None
        with trio.fail_after(5):
            assert "completed" == await wait_status(again, "completed")
            assert "fixed" == await again.result()


async def test_a_retry_with_no_node_running_is_taken_over_by_the_next(schema):
    await failed_with_no_node(schema, "f-1")
    BROKEN["flaky"] = False
    done = await cli(schema, "retry", "flaky/f-1")
    assert (0, "") == (done.returncode, done.stderr)
    async with node(*schema, "b") as system:
        handle = system.get("flaky/f-1")
        assert handle is not None
        with trio.fail_after(5):
            assert "fixed" == await handle.result()


async def test_two_racing_retries_make_one_incarnation(schema):
    # Two operators on two machines: two processes (run_in_process swaps
    # this process's stdout, so two at once would mix their output).
    await failed_with_no_node(schema, "f-1")
    results: list[subprocess.CompletedProcess[bytes]] = []
    dsn, name = schema
    command = [sys.executable, "-m", "actors", "retry", "flaky/f-1", "--json"]
    command += ["--journal", dsn, "--schema", name]

    async def one() -> None:
        results.append(
            await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        nursery.start_soon(one)
    codes = sorted(r.returncode for r in results)
    assert 0 == codes[0] and codes[1] != 0, [r.stderr for r in results]
    won = next(r for r in results if r.returncode == 0)
    assert 2 == json.loads(won.stdout)["incarnation"]
    lost = next(r for r in results if r.returncode != 0)
    said = lost.stdout + lost.stderr  # (with --json, the error is on stdout)
    assert b"not retried" in said or b"cannot retry" in said, said
    shown = json.loads((await cli(schema, "show", "flaky/f-1", "--json")).stdout)
    assert 2 == shown["incarnation"]


async def test_a_fork_on_postgresql_runs_on_the_next_node(schema):
    await failed_with_no_node(schema, "f-1")
    BROKEN["flaky"] = False
    done = await cli(
        schema,
        "fork",
        "flaky/f-1",
        "--from",
        "0",
        "--to",
        "flaky/f-2",
        "--import",
        "tests.tools.test_cli_postgres_writes",
    )
    assert (0, "") == (done.returncode, done.stderr)
    async with node(*schema, "b") as system:
        handle = system.get("flaky/f-2")
        assert handle is not None
        with trio.fail_after(5):
            assert "fixed" == await handle.result()


async def test_a_drop_is_refused_while_another_node_runs_it_and_done_when_none_does(schema):
    async with node(*schema, "a") as system:
        handle = await system.start(waiter, "w-1")
        await system.send(handle.id, note, {"n": 1})
        await wait_status(handle, "suspended")
        refused = await cli(schema, "mail", "waits/w-1", "--drop", "1")
        assert 1 == refused.returncode
        assert "node 'a' runs it" in refused.stderr
        assert "drop it through that node" in refused.stderr
    mail = await cli(schema, "mail", "waits/w-1", "--json")
    assert 1 == len(json.loads(mail.stdout)["unread"])  # nothing was dropped
    dropped = await cli(schema, "mail", "waits/w-1", "--drop", "1")
    assert (0, "") == (dropped.returncode, dropped.stderr)
    mail = await cli(schema, "mail", "waits/w-1", "--json")
    assert [] == json.loads(mail.stdout)["unread"]
    letters = await cli(schema, "mail", "waits/w-1", "--dropped", "--json")
    assert [{"n": 1}] == [d["payload"] for d in json.loads(letters.stdout)["dropped"]]


async def test_a_tail_moves_its_cursor_beside_the_node_that_runs_it(schema):
    async with node(*schema, "a") as system:
        handle = await system.start(emitter, "e-1")
        await wait_status(handle, "suspended")
        done = await cli(schema, "tail", "emits/e-1", "--consumer", "ops", "--json")
        assert (0, "") == (done.returncode, done.stderr)
        doc = json.loads(done.stdout)
        assert (False, None, 3) == (doc["read_only"], doc["cursor_before"], doc["cursor_after"])
        assert [{"n": 0}, {"n": 1}, {"n": 2}] == [v["value"] for v in doc["values"]]
        again = json.loads(
            (await cli(schema, "tail", "emits/e-1", "--consumer", "ops", "--json")).stdout
        )
        assert (3, []) == (again["cursor_before"], again["values"])  # consumed: not again
        shown = json.loads((await cli(schema, "consumers", "emits/e-1", "--json")).stdout)
        assert {"ops": {"cursor": 3, "unread": 0}} == shown["consumers"]
        deleted = await cli(schema, "consumers", "emits/e-1", "--delete", "ops")
        assert (0, "") == (deleted.returncode, deleted.stderr)
        assert "deleted consumer 'ops'" in deleted.stdout
        shown = json.loads((await cli(schema, "consumers", "emits/e-1", "--json")).stdout)
        assert {} == shown["consumers"]
        assert "suspended" == handle.status  # the node that runs it ran on


async def test_a_cleanup_on_postgresql_removes_ended_instances_only(schema):
    await failed_with_no_node(schema, "f-1")
    async with node(*schema, "a") as system:
        await wait_status(await system.start(waiter, "w-1"), "suspended")
        done = await cli(schema, "cleanup", "--older-than", "0", "--json")
        assert (0, "") == (done.returncode, done.stderr)
        assert 1 == json.loads(done.stdout)["removed"]
    listed = json.loads((await cli(schema, "list", "--json")).stdout)["instances"]
    assert [("waits/w-1", "suspended")] == [(i["address"], i["status"]) for i in listed]


async def stuck(system: actors.ActorSystem, id: str) -> None:
    await wait_status(await system.start(booking, id), "compensation_stuck")


async def test_a_resumed_compensation_runs_on_the_live_node_that_owns_it(schema):
    async with node(*schema, "a") as system:
        await stuck(system, "b-1")
        BROKEN["desk"] = False
        done = await cli(schema, "resume-compensation", "bookings/b-1")
        assert (0, "") == (done.returncode, done.stderr)
        assert "resumed bookings/b-1: it is running again, and retries 1 compensation" in (
            done.stdout
        )
        handle = system.get("bookings/b-1")
        assert handle is not None
        with trio.fail_after(5):
            assert "failed" == await wait_status(handle, "failed")  # compensated, then failed
    shown = json.loads((await cli(schema, "show", "bookings/b-1", "--json")).stdout)
    assert "failed" == shown["status"]


async def test_a_resumed_compensation_with_no_node_running_is_taken_over(schema):
    async with node(*schema, "a") as system:
        await stuck(system, "b-1")
    BROKEN["desk"] = False
    done = await cli(schema, "resume-compensation", "bookings/b-1")
    assert (0, "") == (done.returncode, done.stderr)
    assert "running" == await status_of(schema, "bookings/b-1")
    async with node(*schema, "b") as system:
        handle = system.get("bookings/b-1")
        assert handle is not None
        with trio.fail_after(5):
            assert "failed" == await wait_status(handle, "failed")


async def test_an_abandoned_compensation_on_postgresql_ends_failed_once(schema):
    async with node(*schema, "a") as system:
        await stuck(system, "b-1")
        done = await cli(schema, "abandon-compensation", "bookings/b-1")
        assert (0, "") == (done.returncode, done.stderr)
        assert "abandoned the compensation of bookings/b-1: it has failed" in done.stdout
        assert "failed" == await status_of(schema, "bookings/b-1")
        again = await cli(schema, "abandon-compensation", "bookings/b-1")
        assert 1 == again.returncode
        assert "it is not stuck compensating" in again.stderr


async def test_a_signal_on_postgresql_is_routed_along_the_imported_processes(schema):
    async with node(*schema, "a") as system:
        handle = await system.start(order, "o-1")
        await wait_status(handle, "suspended")
        args = ["signal", "shipped", '{"by": "cli"}', "--identity", "order_id=o-1"]
        refused = await cli(schema, *args)
        assert 2 == refused.returncode
        assert "no process of the --import'ed modules (none) listens to 'shipped'" in (
            refused.stderr
        )
        done = await cli(
            schema, *args, "--import", "tests.tools.test_cli_postgres_writes", "--json"
        )
        assert (0, "") == (done.returncode, done.stderr)
        assert 1 == json.loads(done.stdout)["reached"]
        with trio.fail_after(5):
            assert {"by": "cli"} == await handle.result()
        nobody = await cli(
            schema,
            "signal",
            "shipped",
            "--identity",
            "order_id=o-2",
            "--import",
            "tests.tools.test_cli_postgres_writes",
        )
        assert (0, "") == (nobody.returncode, nobody.stderr)
        assert "0 instance(s) reached" in nobody.stdout
