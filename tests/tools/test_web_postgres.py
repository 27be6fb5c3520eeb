"""The web inspector over a PostgreSQL journal, at the HTTP level.

A system runs in the test on a schema of its own (tests/pg.py) while the
inspector's app reads it through ``PostgresJournal(..., readonly=True)``, as
``python -m actors web --journal postgresql://... --schema NAME`` opens it.
The pages and helpers are those of test_web.py (the LMDB side); here: the
running system's instances in the list and their pages, new ones through
the live update, bad input, schemas at other versions (refused, never
migrated), a lost server (503, then served again), that the inspector never
writes (a role that may only read serves every page; its sessions refuse
writes), and the ``web`` command itself beside the running system.
"""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import pytest
import trio

pytest.importorskip("starlette", reason="install the 'web' extra")
pytest.importorskip("hypercorn", reason="install the 'web' extra")
psycopg = pytest.importorskip("psycopg", reason="install the 'postgres' extra")

import actors
from actors._tools._cli._inspect import list_items
from actors._tools._web import create_app
from storage import JournalClosed, JournalCorrupt, PostgresJournal, Txn, instance_id
from storage._postgres import SCHEMA_VERSION
from tests.pg import fresh_schema
from tests.pg_proxy import Proxy
from tests.runtime_helpers import wait_status
from tests.tools.test_web import (
    ROOT,
    approval,
    boom,
    call,
    feed,
    greet,
    href,
    note,
    order,
    rows,
    steps,
    worker,
)

PROCESSES = [greet, boom, approval, worker, order, feed, steps]
STARTED = [
    "greet/ann",
    "boom/1",
    "approvals/a-1",
    "orders/o-1",
    "orders/o-1/greet/bob",
    "orders/o-1/workers/w-1",
    "feeds/f-1",
    "steps/long",
]


async def _until_exists(system: actors.ActorSystem, address: str) -> actors.Handle:
    with trio.fail_after(30):
        while (handle := system.get(address)) is None:
            await trio.sleep(0.01)
    return handle


async def _start_all(system: actors.ActorSystem) -> None:
    assert "hello ann" == await (await system.start(greet, "ann")).result()
    with pytest.raises(actors.ProcessFailed):
        await (await system.start(boom, "1")).result()
    a1 = await system.start(approval, "a-1", amount=100)
    await system.send("approvals/a-1", note, {"text": "call me"})
    await wait_status(a1, "suspended")
    o1 = await system.start(order, "o-1")
    await wait_status(await _until_exists(system, "orders/o-1/workers/w-1"), "suspended")
    await wait_status(o1, "suspended")
    f1 = await system.start(feed, "f-1")
    async with system.stream("feeds/f-1", consumer="reader") as stream:
        async for value in stream:
            if value["n"] == 1:
                break  # consumed 0 and 1: the cursor is at 2
    await wait_status(f1, "suspended")
    await wait_status(await system.start(steps, "long", count=60), "suspended")


@pytest.fixture
def schema(request: pytest.FixtureRequest) -> tuple[str, str]:
    """``(dsn, schema)``: a schema of this test's own, dropped after it."""
    return fresh_schema(request)


@pytest.fixture
async def running(schema: tuple[str, str]) -> AsyncIterator[actors.ActorSystem]:
    """A system running on the schema, with its instances started."""
    dsn, name = schema
    journal = PostgresJournal(dsn, schema=name)
    async with actors.open_system(journal, processes=PROCESSES) as system:
        await _start_all(system)
        yield system


@pytest.fixture
async def inspected(schema: tuple[str, str], running: actors.ActorSystem) -> AsyncIterator:
    """The journal opened read-only beside the running system, as ``actors web`` opens it."""
    dsn, name = schema
    async with PostgresJournal(dsn, schema=name, pool_size=2, readonly=True) as journal:
        yield journal


@pytest.fixture
def app(inspected: PostgresJournal):
    return create_app(inspected, source=inspected.describe(), poll=1.0)


def read_addresses(journal: PostgresJournal) -> list[str]:
    """What ``actors list`` lists, in its order."""
    with journal.reader() as r:
        return [i["address"] for i in list_items(r, None, None, None)[0]]


# -- a running system's instances ------------------------------------------------------


async def test_the_list_shows_the_running_systems_instances(app, inspected):
    status, headers, body = await call(app, "/")
    assert 200 == status, body
    assert "text/html; charset=utf-8" == headers["content-type"]
    expected = read_addresses(inspected)
    assert sorted(STARTED) == sorted(expected)
    assert expected == rows(body)  # most recently updated first
    assert "steps/long" == rows(body)[0]
    for status, n in (("all", 8), ("suspended", 5), ("completed", 2), ("failed", 1)):
        assert f'<span class="badge {status}">{status} <b>{n}</b></span>' in body
    assert html.escape(inspected.describe()) in body  # the page names the journal
    assert '<main id="live" data-poll="1">' in body
    # Filters run on PostgreSQL's reader as on LMDB's.
    assert ["boom/1"] == rows((await call(app, "/?status=failed"))[2])
    family = ["orders/o-1", "orders/o-1/greet/bob", "orders/o-1/workers/w-1"]
    assert sorted(family) == sorted(rows((await call(app, "/?prefix=orders/o-1"))[2]))
    assert ["orders/o-1"] == rows((await call(app, "/?process=orders/:id"))[2])


async def test_the_instance_pages_of_the_running_system(app):
    status, _, body = await call(app, href("greet/ann"))
    assert 200 == status
    assert '<span class="badge completed">completed</span>' in body
    assert '<div id="result"><pre class="value">&quot;hello ann&quot;</pre></div>' in body
    log = body[body.index('<table id="log">') :]
    assert "make_greeting" in log and "ok: &quot;hello ann&quot;" in log

    _, _, body = await call(app, href("boom/1"))
    error = body[body.index('<div id="error">') :]
    assert "ValueError: the flux capacitor is empty" in error
    assert "Traceback (most recent call last)" in error

    _, _, body = await call(app, href("approvals/a-1"))
    assert "Mailbox: 1 unread message" in body and "&quot;call me&quot;" in body
    assert "Timers: 1 timer" in body

    _, _, body = await call(app, href("orders/o-1"))
    tree = body[body.index('<ul class="tree">') :]
    assert ">orders/o-1/greet/bob</a>" in tree and ">orders/o-1/workers/w-1</a>" in tree
    assert "version 1" in body and "&quot;shipping&quot;" in body  # its export

    _, _, body = await call(app, href("feeds/f-1"))
    assert "Stream: 5 values" in body
    assert re.search(r">reader</span></td><td>2</td><td>3</td>", body)

    _, _, body = await call(app, href("steps/long") + "&logpage=2")
    assert "60 entries · page 2 of 2" in body


async def test_new_instances_and_mail_come_through_the_live_update(app, running):
    # What the page's script polls: the list's and the instance page's live part.
    _, _, before = await call(app, "/?partial=1")
    assert "greet/zed" not in rows(before)
    assert 8 == len(rows(before))
    assert "hello zed" == await (await running.start(greet, "zed")).result()
    status, _, after = await call(app, "/?partial=1")
    assert 200 == status and "<html" not in after
    assert "greet/zed" == rows(after)[0]  # the newest, on top
    assert '<span class="badge all">all <b>9</b></span>' in after

    _, _, page = await call(app, href("approvals/a-1") + "&partial=1")
    assert "Mailbox: 1 unread message" in page
    await running.send("approvals/a-1", note, {"text": "again"})
    _, _, page = await call(app, href("approvals/a-1") + "&partial=1")
    assert "Mailbox: 2 unread messages" in page and "&quot;again&quot;" in page


@pytest.mark.parametrize(
    "target, status, says",
    [
        ("/instance?address=orders/nope", 404, "no instance at &#x27;orders/nope&#x27;"),
        ("/instance?address=%FF%FE", 404, "no instance at"),
        (
            "/instance?address=a%00b",
            404,
            "no instance at &#x27;a\\x00b&#x27;",
        ),  # no NUL in SQL text
        ("/instance", 400, "address is missing"),
        ("/?status=bogus", 400, "unknown status &#x27;bogus&#x27;"),
        ("/?page=0", 400, "page must be a whole number from 1"),
        ("/?prefix=%00", 200, "no instances match."),
    ],
)
async def test_bad_input_is_a_4xx_page(app, target, status, says):
    got, headers, body = await call(app, target)
    assert status == got, body
    assert "text/html; charset=utf-8" == headers["content-type"]
    assert says in body


# -- read-only -------------------------------------------------------------------------


@pytest.fixture
def reader_role(schema: tuple[str, str], running) -> Iterator[str]:
    """A DSN for a new role that may only read the schema: USAGE on it, SELECT on its tables."""
    dsn, name = schema
    role = f"t_reader_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT USAGE ON SCHEMA "{name}" TO "{role}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{name}" TO "{role}"')
    try:
        yield psycopg.conninfo.make_conninfo(dsn, user=role)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')  # its grants
            conn.execute(f'DROP ROLE "{role}"')


async def test_a_role_that_may_only_read_serves_every_page(schema, running, reader_role):
    _dsn, name = schema
    # The role really cannot write: the server refuses it.
    with psycopg.connect(reader_role) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(f'DELETE FROM "{name}".mail')
    # Opening it read-write, as a system does, needs more (it creates and migrates).
    with pytest.raises(JournalCorrupt, match="permission denied"):
        async with PostgresJournal(reader_role, schema=name):
            pass
    # Read-only, every page is served.
    async with PostgresJournal(reader_role, schema=name, readonly=True) as journal:
        app = create_app(journal, source=journal.describe())
        status, _, body = await call(app, "/")
        assert 200 == status, body
        assert sorted(STARTED) == sorted(rows(body))
        for address in STARTED:
            for target in (href(address), href(address) + "&partial=1"):
                status, _, body = await call(app, target)
                assert 200 == status, (target, body)
        assert 200 == (await call(app, "/?partial=1&status=suspended"))[0]
        # And the journal itself refuses to write.
        txn = Txn()
        txn.set_cursor(instance_id("feeds/f-1"), "sneaky", 5)
        with pytest.raises(JournalClosed, match="is open read-only; open it without readonly=True"):
            await journal.commit(txn)
        with pytest.raises(JournalClosed, match="is open read-only"):
            journal.submit(txn)
    with running.journal.reader() as r:
        assert {"reader": 2} == r.cursors(instance_id("feeds/f-1"))


async def test_its_sessions_are_read_only_whatever_the_role(schema, running):
    # Even a superuser's session refuses writes: each one starts read-only.
    dsn, name = schema
    seen: list[str] = []
    async with PostgresJournal(dsn, schema=name, readonly=True) as journal:
        with journal.reader() as r:
            iid = instance_id("greet/ann")
            assert r.instance(iid) is not None
            conn = r._conn  # the reader's own session, to try a write on it
            seen.append(conn.execute("SHOW default_transaction_read_only").fetchone()[0])
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute(f'DELETE FROM "{name}".instances')
    assert ["on"] == seen
    # Nor can it serve as a node, which would need a lease and writes.
    journal = PostgresJournal(dsn, schema=name, readonly=True)
    journal.set_node("inspector")
    with pytest.raises(ValueError, match="is read-only; a node needs to write"):
        await journal.open()


def _version(dsn: str, name: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f'SELECT max(version) FROM "{name}".schema_version').fetchone()[0]


async def _refusal(dsn: str, name: str) -> str:
    with pytest.raises(JournalCorrupt) as refused:
        async with PostgresJournal(dsn, schema=name, readonly=True):
            pass
    return str(refused.value)


async def test_a_schema_at_another_version_is_refused_never_migrated(schema):
    dsn, name = schema
    async with PostgresJournal(dsn, schema=name):
        pass  # creates it, at this library's version
    assert SCHEMA_VERSION == _version(dsn, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{name}".schema_version (version) VALUES (%s)', [SCHEMA_VERSION + 1]
        )
    message = await _refusal(dsn, name)
    assert f"schema {name!r} at {dsn!r} is at version {SCHEMA_VERSION + 1}" in message
    assert f"this version of the library reads version {SCHEMA_VERSION}" in message
    assert "upgrade the library" in message

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{name}".schema_version WHERE version > 1')
    message = await _refusal(dsn, name)
    assert (
        f"is at version 1, and this version of the library reads version {SCHEMA_VERSION}"
        in message
    )
    assert "a read-only open never migrates it" in message
    assert 1 == _version(dsn, name)  # left as it was

    # The command says the same, and exits 5.
    done = await trio.run_process(
        [sys.executable, "-m", "actors", "web", "--journal", dsn, "--schema", name],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert 5 == done.returncode
    assert f"is at version 1, and this version of the library reads version {SCHEMA_VERSION}" in (
        done.stderr.decode()
    )


async def test_a_missing_schema_is_refused_not_created(schema):
    dsn, name = schema
    message = await _refusal(dsn, name)
    assert f"there is no schema {name!r} at {dsn!r}; check the schema's name" in message
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [name]).fetchone()
    assert found is None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    assert "holds no journal (it has no schema_version table)" in await _refusal(dsn, name)


async def test_a_lost_server_is_a_503_page_until_it_is_back(schema, running):
    dsn, name = schema
    parts = urlsplit(dsn)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    proxy.start()
    try:
        async with PostgresJournal(proxy.dsn(dsn), schema=name, readonly=True) as journal:
            app = create_app(journal, source=journal.describe())
            assert 200 == (await call(app, "/"))[0]
            proxy.stop()  # the database goes away
            for target in ("/", "/?partial=1", href("greet/ann")):
                status, _, body = await call(app, target)
                assert 503 == status, body
                assert "journal unavailable" in body and "cannot connect to PostgreSQL" in body
            proxy.start()
            status, _, body = await call(app, "/?partial=1")
            assert 200 == status and 8 == len(rows(body))
    finally:
        proxy.stop()


# -- the command -----------------------------------------------------------------------


@pytest.mark.slow  # a server in a subprocess, on real time
async def test_the_command_serves_a_running_systems_postgresql_journal(schema, running):
    dsn, name = schema
    server = subprocess.Popen(
        [sys.executable, "-m", "actors", "web", "--journal", dsn, "--schema", name, "--port", "0"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def get(url: str) -> str:
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert 200 == resp.status
            return resp.read().decode()

    try:
        first = await trio.to_thread.run_sync(server.stdout.readline)
        source = re.escape(f"PostgresJournal({dsn!r}, schema={name!r})")
        match = re.fullmatch(
            rf"actors web: inspecting {source} read-only at (http://127\.0\.0\.1:\d+/)\n", first
        )
        assert match, first + server.stderr.read()
        url = match[1]
        assert sorted(STARTED) == sorted(rows(await trio.to_thread.run_sync(get, url)))
        await (await running.start(greet, "late")).result()
        live = await trio.to_thread.run_sync(get, url + "?partial=1")
        assert "greet/late" == rows(live)[0]
        page = await trio.to_thread.run_sync(get, url + "instance?address=greet%2Flate")
        assert "hello late" in page
        with pytest.raises(urllib.error.HTTPError) as bad:
            await trio.to_thread.run_sync(get, url + "instance?address=orders/nope")
        assert 404 == bad.value.code
    finally:
        server.send_signal(signal.SIGINT)
        _out, err = await trio.to_thread.run_sync(lambda: server.communicate(timeout=30))
    assert 0 == server.returncode, err
    assert "Traceback" not in err
