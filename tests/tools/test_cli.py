"""The ``actors`` command line against journals written here: in this process
(tests/cli_runner.py), and as a subprocess where a second process is the
point (the entry point, Ctrl-C, what ``--import`` brings in, a journal this
process holds open).

A journal with one instance in each interesting state is built once per
module (on real time: its timers are days away, and nothing waits on them);
each test copies it, so the writing commands start from the same state.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest
import trio

import actors
from actors import Retry, Signal, process
from storage import (
    JournalClosed,
    JournalCorrupt,
    LMDBJournal,
    Txn,
    instance_id,
)
from tests.cli_runner import run_in_process
from tests.runtime_helpers import wait_status

ROOT = Path(__file__).resolve().parents[2]

approve, note, go, stop = Signal("approve"), Signal("note"), Signal("go"), Signal("stop")


def make_greeting(name: str) -> str:
    return f"hello {name}"


def explode() -> None:
    raise ValueError("the flux capacitor is empty")


def book(item: str) -> str:
    return f"booking-{item}"


def unbook(item: str) -> None:
    pass


@process("greet/:name")
async def greet(ctx, name):
    return await ctx.step(make_greeting, name)


@process("boom/:id")
async def boom(ctx, id):
    await ctx.step(explode, retry=Retry(attempts=2, backoff=0.001))


@process("approvals/:id")
async def approval(ctx, id, *, amount):
    which, _ = await ctx.first(ok=ctx.wait(approve), late=ctx.sleep(3 * 86400))
    return which


@process("pay/:id")
async def pay(ctx, id):
    return {"paid": True}


@process("track/:id")
async def track(ctx, id):
    await ctx.wait(go)


@process("ship/:id")
async def ship(ctx, id):
    await ctx.spawn(track, "t1")
    await ctx.wait(go)
    return "shipped"


@process("orders/:id")
async def order(ctx, id):
    await ctx.call(pay, "p1")
    await ctx.spawn(ship, "s1")
    await ctx.wait(go)


@process("feeds/:id")
async def feed(ctx, id):
    for n in range(5):
        await ctx.emit({"n": n})
    await ctx.publish({"last": 4})
    await ctx.wait(stop)


@process("sagas/:id")
async def saga(ctx, id):
    await ctx.step(book, "room", compensate=unbook)
    await ctx.step(explode)


@process("trips/:id")
async def trip(ctx, id):
    await ctx.step(book, "flight", compensate=unbook)
    await ctx.wait(go)


@actors.serializable(name="tests.Money")
@attrs.frozen
class Money:
    cents: int
    currency: str


@process("invoices/:id")
async def invoice(ctx, id, *, total):
    await ctx.wait(go)


PROCESSES = [greet, boom, approval, pay, track, ship, order, feed, saga, trip, invoice]


async def _until_exists(system, address: str) -> actors.Handle:
    with trio.fail_after(10):
        while (handle := system.get(address)) is None:
            await trio.sleep(0.001)
    return handle


async def build(path: Path) -> None:
    """A journal with completed, failed, suspended (with mail and a timer),
    cancelled, a parent with a tree of children, a stream with a consumer,
    a saga that compensated, and one with a compensation pending."""
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        assert "hello ann" == await (await system.start(greet, "ann")).result()
        with pytest.raises(actors.ProcessFailed):
            await (await system.start(boom, "1")).result()
        a1 = await system.start(approval, "a-1", amount=100)
        await system.send("approvals/a-1", note, {"text": "call me"})
        await wait_status(a1, "suspended")
        await system.start(approval, "a-2", amount=5)
        assert await system.cancel("approvals/a-2")
        o1 = await system.start(order, "o-1")
        await wait_status(await _until_exists(system, "orders/o-1/ship/s1/track/t1"), "suspended")
        await wait_status(await _until_exists(system, "orders/o-1/ship/s1"), "suspended")
        await wait_status(o1, "suspended")
        f1 = await system.start(feed, "f-1")
        async with system.stream("feeds/f-1", consumer="reader") as stream:
            async for value in stream:
                if value["n"] == 1:
                    break  # consumed 0 and 1: the cursor is at 2
        await wait_status(f1, "suspended")
        with pytest.raises(actors.ProcessFailed):
            await (await system.start(saga, "s-1")).result()
        await wait_status(await system.start(trip, "t-1"), "suspended")
        await wait_status(await system.start(invoice, "i-1", total=Money(1250, "EUR")), "suspended")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "journal"
    trio.run(build, path)
    return path


@pytest.fixture
def journal(built, tmp_path) -> Path:
    """A fresh copy of the built journal (the writing commands change it)."""
    copy = tmp_path / "journal"
    shutil.copytree(built, copy)
    return copy


def run_cli(journal: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TZ="UTC", COLUMNS="160")
    return subprocess.run(
        [sys.executable, "-m", "actors", "--journal", str(journal), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        input=input,
        timeout=60,
        check=False,
    )


def run_json(journal: Path, *args: str) -> dict:
    done = run_cli(journal, "--json", *args)
    assert 0 == done.returncode, done.stderr + done.stdout
    return json.loads(done.stdout)


def cli(journal: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """What `run_cli` runs, in this process (see tests/cli_runner.py for when
    a subprocess is the point instead)."""
    return run_in_process(["--journal", str(journal), *args], input)


def cli_json(journal: Path, *args: str) -> dict:
    done = cli(journal, "--json", *args)
    assert 0 == done.returncode, done.stderr + done.stdout
    return json.loads(done.stdout)


def read_back(path: Path, fn):
    """Read the journal in this process, read-only."""

    async def read():
        async with LMDBJournal(path, readonly=True) as journal:
            with journal.reader() as r:
                return fn(r)

    return trio.run(read)


# -- reading ---------------------------------------------------------------------------


def test_list_is_a_table_newest_first_with_counts(journal):
    done = cli(journal, "list")
    assert 0 == done.returncode, done.stderr
    lines = done.stdout.splitlines()
    assert ["ADDRESS", "PROCESS", "STATUS", "UPDATED", "(UTC)", "DETAIL"] == lines[0].split()
    addresses = [line.split()[0] for line in lines[1:-1]]
    # Newest first: the instances the build touched last come first.
    assert "invoices/i-1" == addresses[0]
    assert "greet/ann" == addresses[-1]
    assert 12 == len(addresses)
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert "completed" == rows["greet/ann"].split()[2]
    assert "ValueError: the flux" in rows["boom/1"] or "StepFailed" in rows["boom/1"]
    assert "reason: cancelled by system.cancel" in rows["approvals/a-2"]
    assert (
        f"12 instances in {journal}: 7 suspended, 2 completed, 2 failed, 1 cancelled" == lines[-1]
    )


def test_list_filters_and_limits(journal):
    done = cli(journal, "list", "--status", "suspended", "--limit", "2")
    assert 0 == done.returncode, done.stderr
    lines = done.stdout.splitlines()
    assert 2 == len(lines) - 3  # header, 2 rows, "showing", counts
    assert {"suspended"} == {line.split()[2] for line in lines[1:3]}
    assert (
        "showing the 2 most recently updated of 7 instances matching --status suspended" in lines[3]
    )
    doc = cli_json(journal, "list", "--process", "approvals/:id")
    assert ["approvals/a-2", "approvals/a-1"] == [i["address"] for i in doc["instances"]] or [
        "approvals/a-1",
        "approvals/a-2",
    ] == sorted(i["address"] for i in doc["instances"])
    assert {"approvals/:id"} == {i["process"] for i in doc["instances"]}
    assert 12 == doc["total"] and 2 == doc["matching"] == doc["shown"]
    assert {"suspended": 7, "completed": 2, "failed": 2, "cancelled": 1} == doc["counts"]
    done = cli(journal, "list", "--status", "sleeping")
    assert 2 == done.returncode and "invalid choice" in done.stderr


def test_show_a_suspended_instance_with_mail_and_a_timer(journal):
    done = cli(journal, "show", "approvals/a-1")
    assert 0 == done.returncode, done.stderr
    text = done.stdout
    assert text.startswith("approvals/a-1  ·  suspended\n")
    assert '  input         {"amount": 100}' in text
    assert "Effect log, run 0: 1 entry" in text
    log_row = next(line for line in text.splitlines() if line.strip().startswith("2 "))
    assert ["2", "sleep", "pending", "due"] == log_row.split()[:4]
    assert "Mailbox: 1 unread message (1 received in all)" in text
    assert "note  sent " in text and '{"text": "call me"}' in text
    assert "Timers: 1 timer" in text and "effect #2" in text and "(in 2 d 23 h)" in text

    doc = cli_json(journal, "show", "approvals/a-1")
    assert "suspended" == doc["status"] and {"amount": 100} == doc["input"]
    assert [{"seq": 1, "signal": "note", "payload": {"text": "call me"}}] == [
        {k: m[k] for k in ("seq", "signal", "payload")} for m in doc["mailbox"]
    ]
    (timer,) = doc["timers"]
    assert 2 == timer["seq"] and abs(timer["due"] - doc["created"] - 3 * 86400) < 5
    assert [("sleep", "started")] == [(e["kind"], e["state"]) for e in doc["log"]]


def test_show_a_parent_with_its_tree_of_children(journal):
    done = cli(journal, "show", "orders/o-1")
    assert 0 == done.returncode, done.stderr
    tree = done.stdout.split("Children: 2 children\n")[1].split("Stream:")[0]
    assert [
        "  ├─ orders/o-1/pay/p1  completed  (call #1)",
        "  └─ orders/o-1/ship/s1  suspended  (spawn #2)",
        "     └─ orders/o-1/ship/s1/track/t1  suspended  (spawn #1)",
    ] == tree.splitlines()
    assert 'child completed: {"paid": true}' in done.stdout
    doc = cli_json(journal, "show", "orders/o-1/ship/s1")
    assert "orders/o-1" == doc["parent"] and "transient" == doc["restart"]
    assert ["orders/o-1/ship/s1/track/t1"] == [c["address"] for c in doc["children"]]


def test_show_results_errors_streams_exports_and_compensations(journal):
    completed = cli(journal, "show", "greet/ann").stdout
    assert '  result        "hello ann"' in completed
    assert "key greet/ann/1/0/make_greeting/1" in completed

    failed = cli(journal, "show", "boom/1")
    assert "StepFailed: step 'explode' failed on attempt 2" in failed.stdout
    assert "Traceback" not in failed.stdout and "--traceback" in failed.stdout
    traced = cli(journal, "show", "boom/1", "--traceback").stdout
    assert "Traceback (most recent call last)" in traced and 'raise ValueError("the flux' in traced

    feed_text = cli(journal, "show", "feeds/f-1").stdout
    assert "Stream: 5 values, 1 consumer\n  reader: cursor 2 (3 unread)" in feed_text
    assert 'Exports (version 1): {"last": 4}' in feed_text

    saga = cli_json(journal, "show", "sagas/s-1")
    assert [("book", "done", 1)] == [
        (c["step"], c["state"], c["attempts"]) for c in saga["compensations"]
    ]
    assert "ValueError" in saga["error"]["traceback"]
    trip = cli(journal, "show", "trips/t-1").stdout
    assert (
        "Compensations: 1 — registered; run only if the instance fails (or is cancelled "
        "with --compensate)\n  registered book -> tests.tools.test_cli:unbook  attempts 0"
    ) in trip

    cancelled = cli_json(journal, "show", "approvals/a-2")
    assert "cancelled by system.cancel" == cancelled["reason"]


def test_stats(journal):
    done = cli(journal, "stats")
    assert 0 == done.returncode, done.stderr
    assert "held by       no running system" in done.stdout
    assert "mail          1 unread message in 1 instance" in done.stdout
    doc = cli_json(journal, "stats")
    assert 12 == doc["instances"] and 7 == doc["by_status"]["suspended"]
    assert (1, 1, 1, 0) == (
        doc["with_mail"],
        doc["unread_messages"],
        doc["timers"],
        doc["due_timers"],
    )
    assert doc["size_bytes"] > 0 and doc["held_by_pid"] is None


def test_user_errors_are_messages_with_exit_codes(journal, tmp_path):
    done = cli(journal, "show", "orders/nope")
    assert (3, "") == (done.returncode, done.stdout)
    assert "actors: no instance at 'orders/nope'" in done.stderr and "Traceback" not in done.stderr
    doc = json.loads(cli(journal, "--json", "show", "orders/nope").stdout)
    assert 3 == doc["error"]["exit_code"] and "no instance" in doc["error"]["message"]
    for path, why in ((tmp_path / "missing", "does not exist"), (tmp_path, "holds no data.mdb")):
        done = cli(path, "list")
        assert 3 == done.returncode and f"no journal at {path}: it {why}" in done.stderr.replace(
            "the directory does", "it does"
        )
    done = cli(journal, "send", "approvals/a-1", "approve", "{not json")
    assert 2 == done.returncode and "the payload is not JSON" in done.stderr


def test_a_corrupt_record_is_listed_and_reported(journal):
    import lmdb

    env = lmdb.open(str(journal), max_dbs=16)
    db = env.open_db(b"instances")
    key = instance_id("greet/ann")
    with env.begin(write=True) as txn:
        value = txn.get(key, db=db)
        header_end = 3 + int.from_bytes(value[1:3], "big")
        txn.put(key, value[:header_end] + b"\xc1", db=db)  # 0xc1: never valid msgpack
    env.close()

    done = cli(journal, "list")
    assert 0 == done.returncode, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("greet/ann"))
    assert "completed" in row and "does not decode" in row
    assert 12 == len(done.stdout.splitlines()) - 2
    done = cli(journal, "show", "greet/ann")
    assert 5 == done.returncode and "the record of 'greet/ann' is corrupt" in done.stderr
    assert 0 == cli(journal, "stats").returncode


# -- writing ---------------------------------------------------------------------------


def test_send_appends_to_the_mailbox_and_the_instance_takes_it_on_the_next_open(journal):
    done = cli(journal, "send", "approvals/a-1", "approve", '{"by": "ann"}')
    assert 0 == done.returncode, done.stderr
    assert done.stdout.startswith("sent 'approve' to approvals/a-1 as message #2; it is suspended")

    async def reopen():
        async with actors.open_system(LMDBJournal(journal), processes=PROCESSES) as system:
            return await system.get("approvals/a-1").result()

    assert "ok" == trio.run(reopen)


def test_send_refuses_what_is_not_live(journal):
    done = cli(journal, "send", "greet/ann", "approve")
    assert 1 == done.returncode
    assert "no live instance at 'greet/ann' (it completed at " in done.stderr
    done = cli(journal, "send", "orders/o-404", "approve")
    assert 3 == done.returncode and "no instance at 'orders/o-404'" in done.stderr
    doc = json.loads(cli(journal, "--json", "send", "approvals/a-2", "approve").stdout)
    assert 1 == doc["error"]["exit_code"] and "it was cancelled" in doc["error"]["message"]
    mail = read_back(
        journal,
        lambda r: [r.last_message_seq(instance_id(a)) for a in ("greet/ann", "approvals/a-2")],
    )
    assert [0, 0] == mail  # nothing was stored


def test_cancel_cancels_children_first_as_the_runtime_does(journal):
    doc = cli_json(journal, "cancel", "orders/o-1")
    assert [
        "orders/o-1/ship/s1/track/t1",
        "orders/o-1/ship/s1",
        "orders/o-1",
    ] == doc["cancelled"]

    def statuses(r):
        return {
            a: (row.status, row.record.reason)
            for a in doc["cancelled"] + ["orders/o-1/pay/p1"]
            for row in [r.instance(instance_id(a))]
        }

    assert {
        "orders/o-1": ("cancelled", "cancelled from the actors CLI"),
        "orders/o-1/ship/s1": ("cancelled", "parent orders/o-1 cancelled"),
        "orders/o-1/ship/s1/track/t1": ("cancelled", "parent orders/o-1/ship/s1 cancelled"),
        "orders/o-1/pay/p1": ("completed", None),
    } == read_back(journal, statuses)
    done = cli(journal, "cancel", "orders/o-1")
    assert (
        1 == done.returncode
        and "nothing to cancel at 'orders/o-1': it was cancelled" in done.stderr
    )

    async def reopen():
        async with actors.open_system(LMDBJournal(journal), processes=PROCESSES) as system:
            with pytest.raises(actors.ProcessCancelled, match="cancelled from the actors CLI"):
                await system.get("orders/o-1").result()
            # Nothing of the cancelled tree is recovered (approvals/a-1, with
            # its unread note, is: it is live and has mail).
            live = {a.address for a in system.registry.live.values()}
            assert set() == live & set(doc["cancelled"])

    trio.run(reopen)


def test_cancel_removes_timers_and_tells_an_awaiting_parent(journal):
    assert 0 == cli(journal, "cancel", "approvals/a-1", "--reason", "ops: duplicate").returncode
    assert [] == read_back(journal, lambda r: r.timers(instance_id("approvals/a-1")))
    assert "ops: duplicate" == cli_json(journal, "show", "approvals/a-1")["reason"]


def test_cancel_refuses_pending_compensations_unless_forced(journal):
    done = cli(journal, "cancel", "trips/t-1")
    assert 1 == done.returncode
    assert "saga compensations are pending in trips/t-1 (1)" in done.stderr
    assert "pass --compensate to run them before it ends cancelled" in done.stderr
    assert "suspended" == cli_json(journal, "show", "trips/t-1")["status"]
    done = cli(journal, "cancel", "trips/t-1", "--force")
    assert 0 == done.returncode and "compensations not run (--force): trips/t-1" in done.stdout
    assert "cancelled" == cli_json(journal, "show", "trips/t-1")["status"]


def test_records_of_classes_the_cli_does_not_know(journal):
    doc = run_json(journal, "show", "invoices/i-1")
    assert {"$class": "tests.Money", "cents": 1250, "currency": "EUR"} == doc["input"]["total"]
    done = run_cli(journal, "cancel", "invoices/i-1")
    assert 1 == done.returncode and "--import MODULE" in done.stderr  # never written back wrong
    done = run_cli(journal, "--import", "tests.tools.test_cli", "cancel", "invoices/i-1")
    assert 0 == done.returncode, done.stderr
    assert "cancelled" == run_json(journal, "show", "invoices/i-1")["status"]


def test_tail_prints_from_the_cursor_and_moves_it(journal):
    done = cli(journal, "tail", "feeds/f-1", "--consumer", "reader")
    assert 0 == done.returncode, done.stderr
    assert ['2  {"n": 2}', '3  {"n": 3}', '4  {"n": 4}'] == [
        line.strip() for line in done.stdout.splitlines()
    ]
    assert "consumer 'reader': cursor 2, moved to 5 of 5 values" in done.stderr
    doc = cli_json(journal, "tail", "feeds/f-1", "--consumer", "reader")
    assert ([], 5, 5, False) == (
        doc["values"],
        doc["cursor_before"],
        doc["cursor_after"],
        doc["read_only"],
    )
    doc = cli_json(journal, "tail", "feeds/f-1", "--consumer", "late", "--from", "latest")
    assert ([], None, 5) == (doc["values"], doc["cursor_before"], doc["cursor_after"])
    doc = cli_json(journal, "tail", "feeds/f-1", "--consumer", "new")
    assert [{"n": n} for n in range(5)] == [v["value"] for v in doc["values"]]
    assert {"reader": 5, "late": 5, "new": 5} == read_back(
        journal, lambda r: r.cursors(instance_id("feeds/f-1"))
    )


def test_tail_follow_ends_when_the_instance_has_finished(journal):
    done = cli(journal, "--json", "tail", "greet/ann", "--consumer", "c", "--follow")
    assert (0, "") == (done.returncode, done.stdout)  # nothing emitted, and it has completed


# -- beside a running system -----------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys

    import attrs
    import trio

    import actors
    from storage import LMDBJournal


    @actors.serializable(name="tests.Money")  # open_system must decode every record
    @attrs.frozen
    class Money:
        cents: int
        currency: str


    @actors.process("ticks/:id")
    async def ticks(ctx, id, *, count):
        for n in range(count):
            await ctx.emit(n)
            await ctx.sleep(0.01)
        return count


    async def main(path):
        # control=False: no control socket, so the CLI may not write beside it
        async with actors.open_system(LMDBJournal(path), processes=[ticks], control=False) as system:
            print("ready", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            await system.start(ticks, "t-1", count=30)
            print("started", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)


    trio.run(main, sys.argv[1])
    """
)


@pytest.mark.slow  # a second process holds the journal, on real time
def test_beside_a_running_system_reads_work_and_writes_refuse(journal, tmp_path):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    holder = subprocess.Popen(
        [sys.executable, str(script), str(journal)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "ready\n" == holder.stdout.readline()

        listed = cli(journal, "list", "--status", "suspended")
        assert 0 == listed.returncode and "approvals/a-1" in listed.stdout
        shown = cli(journal, "show", "approvals/a-1")
        assert 0 == shown.returncode and "Mailbox: 1 unread message" in shown.stdout
        stats = cli_json(journal, "stats")
        assert (True, holder.pid) == (stats["held"], stats["held_by_pid"])

        for args in (
            ("send", "approvals/a-1", "approve", '{"by": "ann"}'),
            ("cancel", "approvals/a-1"),
        ):
            done = cli(journal, *args)
            assert 4 == done.returncode, done.stderr
            assert f"is owned by a running system (pid {holder.pid})" in done.stderr
            assert f"{args[0]} through that application" in done.stderr
        assert "suspended" == cli_json(journal, "show", "approvals/a-1")["status"]
        assert 1 == len(cli_json(journal, "show", "approvals/a-1")["mailbox"])

        done = cli(journal, "tail", "feeds/f-1", "--consumer", "reader")
        assert 0 == done.returncode, done.stderr
        assert ["2", "3", "4"] == [line.split()[0] for line in done.stdout.splitlines()]
        assert "without moving it" in done.stderr
        done = cli(journal, "consumers", "feeds/f-1", "--delete", "reader")
        assert 4 == done.returncode and "cannot delete consumer 'reader'" in done.stderr
        assert (
            2 == cli_json(journal, "show", "feeds/f-1")["stream"]["consumers"]["reader"]["cursor"]
        )

        holder.stdin.write("start\n")
        holder.stdin.flush()
        assert "started\n" == holder.stdout.readline()
        done = cli(
            journal,
            "--json",
            "tail",
            "ticks/t-1",
            "--consumer",
            "w",
            "--follow",
            "--interval",
            "0.02",
        )
        assert 0 == done.returncode, done.stderr
        values = [json.loads(line) for line in done.stdout.splitlines()]
        assert [{"index": n, "value": n} for n in range(30)] == values
        assert "completed" == cli_json(journal, "show", "ticks/t-1")["status"]
    finally:
        holder.stdin.close()
        assert 0 == holder.wait(timeout=30), holder.stderr.read()


# -- LMDBJournal(readonly=True) ---------------------------------------------------------


def test_a_readonly_journal_reads_takes_no_lock_and_refuses_writes(journal):
    async def check():
        async with LMDBJournal(journal, readonly=True) as ro:
            with ro.reader() as r:
                assert 12 == sum(r.count_by_status().values())
            with pytest.raises(JournalClosed, match="open read-only"):
                await ro.commit(Txn())
            with pytest.raises(JournalClosed, match="open read-only"):
                ro.submit(Txn())
            # No owner lock: another process opens the journal to write meanwhile.
            done = await trio.to_thread.run_sync(
                lambda: run_cli(journal, "send", "approvals/a-1", "approve")
            )
            assert 0 == done.returncode, done.stderr
            with ro.reader() as r:  # and this reader sees its commit
                assert 2 == len(r.mailbox(instance_id("approvals/a-1")))

    trio.run(check)


def test_a_readonly_journal_needs_a_journal(tmp_path):
    async def check():
        with pytest.raises(JournalCorrupt, match="cannot open an LMDB journal"):
            await LMDBJournal(tmp_path / "nothing", readonly=True).open()
        assert not (tmp_path / "nothing").exists()

    trio.run(check)


GROWER = textwrap.dedent(
    """
    import sys

    import trio

    from storage import InstanceRecord, LMDBJournal, Txn, instance_id


    async def main(path):
        async with LMDBJournal(path, map_size=1 << 20) as journal:
            print("ready", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            for batch in range(40):
                txn = Txn()
                for n in range(50):
                    address = f"big/{batch}-{n}"
                    record = InstanceRecord(params=[f"{batch}-{n}"], input={"blob": b"x" * 1000})
                    txn.put_instance(instance_id(address), address=address, process="big/:id",
                                     status="completed", record=record)
                await journal.commit(txn)
            print("grown", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)


    trio.run(main, sys.argv[1])
    """
)


@pytest.mark.slow  # a second process writes the journal
def test_a_readonly_journal_follows_a_map_another_process_grew(tmp_path):
    script = tmp_path / "grower.py"
    script.write_text(GROWER)
    path = tmp_path / "journal"
    grower = subprocess.Popen(
        [sys.executable, str(script), str(path)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "ready\n" == grower.stdout.readline()

        async def check():
            async with LMDBJournal(path, readonly=True) as ro:
                with ro.reader() as r:
                    assert {} == r.count_by_status()
                grower.stdin.write("go\n")
                grower.stdin.flush()
                assert "grown\n" == await trio.to_thread.run_sync(grower.stdout.readline)
                assert (path / "data.mdb").stat().st_size > 1 << 20  # past the map we opened
                with ro.reader() as r:
                    assert {"completed": 2000} == r.count_by_status()

        trio.run(check)
    finally:
        grower.stdin.close()
        assert 0 == grower.wait(timeout=30), grower.stderr.read()


def test_tail_follow_stops_quietly_on_ctrl_c(journal):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    tail = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actors",
            "--journal",
            str(journal),
            "tail",
            "feeds/f-1",
            "--consumer",
            "reader",
            "--follow",
            "--interval",
            "0.05",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = tail.stdout.readline()  # it has printed, so it is following now
    tail.send_signal(signal.SIGINT)
    rest = tail.stdout.read()
    assert (130, "") == (tail.wait(timeout=30), tail.stderr.read())
    assert ["2", "3", "4"] == [line.split()[0] for line in (first + rest).splitlines()]
    assert 5 == cli_json(journal, "show", "feeds/f-1")["stream"]["consumers"]["reader"]["cursor"]


# -- a first-time user's path ------------------------------------------------------------


def run_bare(*args: str) -> subprocess.CompletedProcess:
    """The CLI with exactly ``args`` (no --journal put first)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TZ="UTC", COLUMNS="160")
    env.pop("ACTORS_JOURNAL", None)
    return subprocess.run(
        [sys.executable, "-m", "actors", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def bare(*args: str) -> subprocess.CompletedProcess:
    """What `run_bare` runs, in this process."""
    return run_in_process(list(args))


def test_global_options_come_before_or_after_the_command(journal):
    before = bare("--journal", str(journal), "--json", "list")
    after = bare("list", "--journal", str(journal), "--json")
    assert (0, 0) == (before.returncode, after.returncode), after.stderr
    assert json.loads(before.stdout)["instances"] == json.loads(after.stdout)["instances"]
    mixed = bare("--json", "show", "greet/ann", "--journal", str(journal))
    assert "completed" == json.loads(mixed.stdout)["status"]
    # --import before and after the command: both modules are imported.
    both = run_bare(
        "--import",
        "json",
        "show",
        "invoices/i-1",
        "--journal",
        str(journal),
        "--import",
        "tests.tools.test_cli",
        "--json",
    )
    assert 0 == both.returncode, both.stderr
    total = json.loads(both.stdout)["input"]["total"]
    assert {"$class": "tests.tools.test_cli.Money", "cents": 1250, "currency": "EUR"} == total


def test_version_help_and_usage_errors(tmp_path):
    done = run_bare("--version")  # the entry point itself, once
    assert 0 == done.returncode and done.stdout.startswith("actors ")
    for command in (
        "list",
        "show",
        "send",
        "cancel",
        "resume-compensation",
        "abandon-compensation",
        "cleanup",
        "tail",
        "consumers",
        "stats",
    ):
        done = bare(command, "--help")
        assert 0 == done.returncode and "--journal PATH" in done.stdout, command
    done = bare("list")
    assert 2 == done.returncode and "--journal PATH is required" in done.stderr
    done = bare("frobnicate", "--journal", str(tmp_path))
    assert 2 == done.returncode and "invalid choice: 'frobnicate'" in done.stderr
    for args, why in (
        (("list", "--limit", "x"), "'x' is not a count"),
        (("show", "a/b", "--limit", "-1"), "'-1' is not a count"),
        (("cleanup",), "--older-than"),
        (("cleanup", "--older-than", "soon"), "'soon' is not a duration"),
        (("tail", "a/b", "--consumer", "c", "--interval", "0"), "positive"),
    ):
        done = bare(*args, "--journal", str(tmp_path))
        assert 2 == done.returncode and why in done.stderr, (args, done.stderr)
    done = bare("stats", "--journal", str(tmp_path / "missing"))
    assert 3 == done.returncode and "no journal at" in done.stderr


def test_every_argument_has_help():
    from actors._tools._cli._commands import _parser

    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [
        f"{name} {action.dest}"
        for name, sub in [("", parser), *subparsers.choices.items()]
        for action in sub._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert [] == missing


def test_list_a_subtree_and_plurals(journal):
    done = cli(journal, "list", "--prefix", "orders/o-1/ship")
    assert 0 == done.returncode, done.stderr
    lines = done.stdout.splitlines()
    assert ["orders/o-1/ship/s1/track/t1", "orders/o-1/ship/s1"] == [
        line.split()[0] for line in lines[1:-1]
    ]
    assert "12 instances in" in lines[-1]
    doc = cli_json(journal, "list", "--prefix", "orders/o-1/")
    assert 4 == doc["matching"]
    assert (
        0 == cli_json(journal, "list", "--prefix", "orders/o")["matching"]
    )  # not a prefix of words
    assert cli(journal, "list", "--prefix", "orders", "--limit", "1").stdout.splitlines()[-2] == (
        "showing the 1 most recently updated of 4 instances matching --prefix orders "
        "(--limit N for more, 0 for all)"
    )


def test_show_limits_and_says_what_a_live_instance_waits_for(journal):
    doc = cli_json(journal, "show", "orders/o-1", "--limit", "1")
    assert (2, [2]) == (doc["log_entries"], [i["seq"] for i in doc["log"]])
    text = cli(journal, "show", "orders/o-1", "--limit", "1").stdout
    assert "Effect log, run 0: 2 entries (the last 1 shown; --limit 0 for all)" in text
    assert 2 == len(cli_json(journal, "show", "orders/o-1", "--limit", "0")["log"])

    doc = cli_json(journal, "show", "approvals/a-1")
    assert [2] == [t["seq"] for t in doc["waiting"]["timers"]]
    assert ([], ["note"]) == (doc["waiting"]["children"], doc["waiting"]["unread_signals"])
    text = cli(journal, "show", "approvals/a-1").stdout
    assert "Waiting for (as far as the journal records):\n  timer #2, due " in text
    assert "(unread mail: note)" in text
    assert "waiting" not in cli_json(journal, "show", "greet/ann")


def test_a_finished_instance_shows_no_pending_effect(journal):
    assert 0 == cli(journal, "send", "approvals/a-1", "approve", "true").returncode

    async def finish():
        async with actors.open_system(LMDBJournal(journal), processes=PROCESSES) as system:
            assert "ok" == await system.get("approvals/a-1").result()

    trio.run(finish)
    doc = cli_json(journal, "show", "approvals/a-1")
    assert {"unfinished"} == {i["state"] for i in doc["log"] if i["kind"] == "sleep"}
    text = cli(journal, "show", "approvals/a-1").stdout
    assert "pending" not in text and "not fired (the instance ended first)" in text


def test_tail_peek_leaves_the_cursor(journal):
    done = cli(journal, "tail", "feeds/f-1", "--consumer", "reader", "--peek")
    assert ["2", "3", "4"] == [line.split()[0] for line in done.stdout.splitlines()]
    assert "actors: consumer 'reader': cursor 2, left at 2 of 5 values\n" == done.stderr
    assert 2 == cli_json(journal, "show", "feeds/f-1")["stream"]["consumers"]["reader"]["cursor"]
    doc = cli_json(journal, "tail", "feeds/f-1", "--consumer", "new", "--peek")
    assert (True, None, 5) == (doc["read_only"], doc["cursor_before"], len(doc["values"]))
    assert ["reader"] == list(cli_json(journal, "consumers", "feeds/f-1")["consumers"])


def test_consumers_lists_and_deletes_cursors(journal):
    done = cli(journal, "consumers", "feeds/f-1")
    assert 0 == done.returncode, done.stderr
    assert done.stdout.startswith("feeds/f-1: a stream of 5 values, 1 consumer\n")
    assert ["reader", "2", "3"] == done.stdout.splitlines()[2].split()
    done = cli(journal, "consumers", "feeds/f-1", "--delete", "nobody")
    assert (
        3 == done.returncode
        and "no consumer 'nobody' on 'feeds/f-1' (its consumers: reader)" in done.stderr
    )
    done = cli(journal, "consumers", "feeds/f-1", "--delete", "reader")
    assert 0 == done.returncode, done.stderr
    assert {} == cli_json(journal, "consumers", "feeds/f-1")["consumers"]
    done = cli(journal, "tail", "feeds/f-1", "--consumer", "reader")
    assert ["0", "1", "2", "3", "4"] == [line.split()[0] for line in done.stdout.splitlines()]
    assert 3 == cli(journal, "consumers", "feeds/nope").returncode


def test_cleanup_without_a_system(journal):
    done = cli(journal, "cleanup", "--older-than", "1d")
    assert (
        0,
        "removed 0 instances (cancelled, completed, failed, last updated more than 1 d ago)\n",
    ) == (done.returncode, done.stdout)
    doc = cli_json(
        journal, "cleanup", "--older-than", "0", "--status", "completed", "--status", "cancelled"
    )
    # The completed child orders/o-1/pay/p1 stays: its parent is live and needs it.
    assert (2, False) == (doc["removed"], doc["through_system"])
    assert {"suspended": 7, "failed": 2, "completed": 1} == cli_json(journal, "list")["counts"]
    done = cli(journal, "cleanup", "--older-than", "0s", "--status", "failed")
    assert "removed 2 instances (failed, last updated more than 0 s ago)\n" == done.stdout
    done = cli(journal, "cancel", "approvals/a-1")
    assert 0 == done.returncode, done.stderr
    done = cli(journal, "cleanup", "--older-than", "0")
    assert done.stdout.startswith("removed 1 instance (cancelled, completed, failed,")


def refuse(item: str) -> None:
    if STUCK_DESK["closed"]:
        raise RuntimeError(f"the {item} desk is closed")


STUCK_DESK = {"closed": True}


@process("stuck/:id")
async def stuck(ctx, id):
    await ctx.step(book, "flight", compensate=refuse, retry=Retry(attempts=1))
    await ctx.step(explode, retry=Retry(attempts=1))


def test_resume_and_abandon_a_stuck_compensation_without_a_system(tmp_path):
    path = tmp_path / "journal"

    async def strand():
        STUCK_DESK["closed"] = True
        async with actors.open_system(LMDBJournal(path), processes=[stuck]) as system:
            for id in ("s-1", "s-2"):
                handle = await system.start(stuck, id)
                assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")

    trio.run(strand)
    done = cli(path, "resume-compensation", "stuck/s-1")
    assert 0 == done.returncode, done.stderr
    assert done.stdout.startswith(
        "resumed stuck/s-1: it is running again, and retries 1 compensation"
    )
    assert "running" == cli_json(path, "show", "stuck/s-1")["status"]
    done = cli(path, "resume-compensation", "stuck/s-1")
    assert 1 == done.returncode and "it is not stuck compensating" in done.stderr
    assert 3 == cli(path, "abandon-compensation", "stuck/nope").returncode

    doc = cli_json(path, "abandon-compensation", "stuck/s-2")
    assert (["book"], False) == (doc["never_run"], doc["through_system"])

    async def reopen():
        STUCK_DESK["closed"] = False
        async with actors.open_system(LMDBJournal(path), processes=[stuck]) as system:
            with pytest.raises(actors.ProcessFailed):
                await system.get("stuck/s-1").result()
            assert "failed" == system.get("stuck/s-2").status

    trio.run(reopen)
    resumed = cli_json(path, "show", "stuck/s-1")
    assert ("failed", ["done"]) == (
        resumed["status"],
        [c["state"] for c in resumed["compensations"]],
    )
    abandoned = cli_json(path, "show", "stuck/s-2")
    assert ("failed", ["abandoned"]) == (
        abandoned["status"],
        [c["state"] for c in abandoned["compensations"]],
    )
