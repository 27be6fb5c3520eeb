"""The command line on a PostgreSQL journal named by URL.

The reading commands (list, show, stats, queues, schedules) take
``--journal postgresql://... --schema NAME``, the options before or after
the command, and open it read-only (``PostgresJournal(readonly=True)``);
most writing ones write as a brief node (tests/tools/test_cli_postgres_writes.py);
the rest refuse with a message that says where to do it instead.
"""

from __future__ import annotations

import json

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


@process("waits/:id")
async def waiter(ctx: Context, id: str) -> str:
    await ctx.emit({"id": id})
    await ctx.wait(go)
    return id


@pytest.fixture
def schema(request: pytest.FixtureRequest) -> tuple[str, str]:
    return fresh_schema(request)


def _populate(dsn: str, name: str) -> None:
    async def run() -> None:
        async with actors.open_system(PostgresJournal(dsn, schema=name), [waiter]) as system:
            handle = await system.start(waiter, "w-1")
            await system.send(handle.id, note, {"text": "left unread"})
            await wait_status(handle, "suspended")
            done = await system.start(waiter, "w-2")
            await system.send(done.id, go)
            assert "w-2" == await done.result()

    trio.run(run)


def test_reading_commands_take_a_postgresql_url_with_options_anywhere(schema):
    dsn, name = schema
    _populate(dsn, name)

    listed = run_in_process(["list", "--journal", dsn, "--schema", name, "--json"])
    assert (0, "") == (listed.returncode, listed.stderr)
    statuses = {i["address"]: i["status"] for i in json.loads(listed.stdout)["instances"]}
    assert {"waits/w-1": "suspended", "waits/w-2": "completed"} == statuses

    # the global options before the command, as README's examples write them
    shown = run_in_process(["--schema", name, "--journal", dsn, "show", "waits/w-1"])
    assert 0 == shown.returncode, shown.stderr
    assert "waits/w-1" in shown.stdout and "note" in shown.stdout  # its unread message

    stats = run_in_process(["--journal", dsn, "stats", "--schema", name, "--json"])
    assert 0 == stats.returncode, stats.stderr
    doc = json.loads(stats.stdout)
    assert ({"suspended": 1, "completed": 1}, 1) == (doc["by_status"], doc["unread_messages"])

    peeked = run_in_process(
        ["tail", "waits/w-1", "--consumer", "ops", "--peek", "--journal", dsn, "--schema", name]
    )
    assert (0, '0  {"id": "w-1"}') == (peeked.returncode, peeked.stdout.strip())
    cursors = run_in_process(["consumers", "waits/w-1", "--journal", dsn, "--schema", name])
    assert 0 == cursors.returncode, cursors.stderr
    assert "a stream of 1 value, 0 consumers" in cursors.stdout  # the peek moved nothing

    mail = run_in_process(["mail", "waits/w-1", "--journal", dsn, "--schema", name, "--json"])
    assert 0 == mail.returncode, mail.stderr
    assert [("note", {"text": "left unread"})] == [
        (m["signal"], m["payload"]) for m in json.loads(mail.stdout)["unread"]
    ]

    for command in ("queues", "schedules"):
        done = run_in_process([command, "--journal", dsn, "--schema", name])
        assert (command, 0) == (command, done.returncode), done.stderr

    missing = run_in_process(["show", "waits/nobody", "--journal", dsn, "--schema", name])
    assert 3 == missing.returncode
    assert "no instance at 'waits/nobody'" in missing.stderr


def test_every_writing_command_takes_a_postgresql_url(schema):
    # None is refused for its journal any more (what each writes:
    # tests/tools/test_cli_postgres_writes.py); each answers about the instance.
    dsn, name = schema
    _populate(dsn, name)
    for command, code, said in (
        (["tail", "waits/w-1", "--consumer", "ops"], 0, "consumer 'ops': cursor (new), moved to"),
        (["consumers", "waits/w-1", "--delete", "ops"], 0, "deleted consumer 'ops'"),
        (["resume-compensation", "waits/w-1"], 1, "it is not stuck compensating"),
        (["abandon-compensation", "waits/w-1"], 1, "it is not stuck compensating"),
        (["cleanup", "--older-than", "1d"], 0, "removed 0 instances"),
    ):
        done = run_in_process([*command, "--journal", dsn, "--schema", name])
        assert (command, code) == (command, done.returncode), done.stderr
        assert said in done.stdout + done.stderr
        assert "LMDB" not in done.stderr
    # nothing else was written: the instance still waits
    listed = run_in_process(["list", "--journal", dsn, "--schema", name, "--json"])
    statuses = {i["address"]: i["status"] for i in json.loads(listed.stdout)["instances"]}
    assert "suspended" == statuses["waits/w-1"]


def test_schema_with_a_directory_is_refused(tmp_path):
    done = run_in_process(["list", "--journal", str(tmp_path), "--schema", "x"])
    assert 2 == done.returncode
    assert "--schema names the schema of a PostgreSQL journal" in done.stderr
