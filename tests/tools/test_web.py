"""The web inspector at the HTTP level: its ASGI app called directly over a
journal written here, and ``python -m actors web`` as a subprocess.

The journal is built once per module on real time (its timers are days away);
the app reads it read-only, as the command does. The browser tests are in
test_web_browser.py.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
import trio

pytest.importorskip("starlette", reason="install the 'web' extra")
pytest.importorskip("hypercorn", reason="install the 'web' extra")

import actors
from actors import Signal, process
from actors._tools._cli._inspect import list_items
from actors._tools._web import create_app
from storage import LMDBJournal, instance_id
from tests.runtime_helpers import wait_status

ROOT = Path(__file__).resolve().parents[2]

go, note = Signal("go"), Signal("note")

# Rendered as markup, this would mark the page; rendered as text, it is inert.
XSS = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"
XSS_PAYLOAD = "</pre><script>document.body.setAttribute('data-pwned','2')</script>"


def make_greeting(name: str) -> str:
    return f"hello {name}"


def explode() -> None:
    raise ValueError("the flux capacitor is empty")


def book(item: str) -> str:
    return f"booking-{item}"


def unbook(item: str) -> None:
    pass


_crashes = {"workers/w-1": 1}  # runs of the worker that crash before it settles


@process("greet/:name")
async def greet(ctx, name):
    return await ctx.step(make_greeting, name)


@process("boom/:id")
async def boom(ctx, id):
    await ctx.step(explode)


@process("approvals/:id")
async def approval(ctx, id, *, amount):
    which, _ = await ctx.first(ok=ctx.wait(go), late=ctx.sleep(3 * 86400))
    return which


@process("workers/:id")
async def worker(ctx, id):
    address = f"workers/{id}"
    if _crashes.get(address, 0) > 0:
        _crashes[address] -= 1
        raise RuntimeError("the worker tripped")
    await ctx.wait(go)


@process("orders/:id")
async def order(ctx, id):
    await ctx.call(greet, "bob")
    await ctx.spawn(worker, "w-1")
    await ctx.publish({"stage": "shipping"})
    await ctx.wait(go)


@process("feeds/:id")
async def feed(ctx, id):
    for n in range(5):
        await ctx.emit({"n": n})
    await ctx.wait(go)


@process("sagas/:id")
async def saga(ctx, id):
    await ctx.step(book, "room", compensate=unbook)
    await ctx.step(explode)


@process("notes/:id")
async def notes(ctx, id, *, text):
    await ctx.wait(go)


@process("steps/:id")
async def steps(ctx, id, *, count):
    for n in range(count):
        await ctx.step(make_greeting, f"n{n}")
    await ctx.wait(go)


PROCESSES = [greet, boom, approval, worker, order, feed, saga, notes, steps]


async def _until_exists(system, address: str) -> actors.Handle:
    with trio.fail_after(10):
        while (handle := system.get(address)) is None:
            await trio.sleep(0.001)
    return handle


async def build(path: Path) -> None:
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
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
        with pytest.raises(actors.ProcessFailed):
            await (await system.start(saga, "s-1")).result()
        x = await system.start(notes, XSS, text=XSS_PAYLOAD)
        await system.send(f"notes/{XSS}", note, {"html": XSS_PAYLOAD})
        await wait_status(x, "suspended")
        await wait_status(await system.start(steps, "long", count=120), "suspended")


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("web") / "journal"
    trio.run(build, path)
    return path


@pytest.fixture
async def opened(journal):
    """The journal opened read-only, as ``actors web`` opens it (once per process)."""
    async with LMDBJournal(journal, readonly=True) as j:
        yield j


@pytest.fixture
def app(opened, journal):
    return create_app(opened, source=str(journal), poll=1.0)


async def call(app, target: str, *, method: str = "GET", host: str = "127.0.0.1", headers=()):
    """One request through the ASGI app: (status, headers, body text);
    ``headers`` are sent besides Host, as ``(name, value)`` bytes."""
    path, _, query = target.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(b"host", host.encode()), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    answered = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], answered, body.decode()


def rows(body: str) -> list[str]:
    """The addresses of the list's rows, in order."""
    return [html.unescape(a) for a in re.findall(r'<tr data-address="([^"]*)"', body)]


def read_items(opened: LMDBJournal) -> list[dict]:
    """What ``actors list`` lists, in its order."""
    with opened.reader() as r:
        return list_items(r, None, None, None)[0]


def href(address: str) -> str:
    return "/instance?address=" + quote(address, safe="")


# -- the list -----------------------------------------------------------------------


async def test_the_list_shows_every_instance_newest_first_with_counts(app, opened):
    status, headers, body = await call(app, "/")
    assert 200 == status
    assert "text/html; charset=utf-8" == headers["content-type"]
    expected = [i["address"] for i in read_items(opened)]
    assert 10 == len(expected)
    assert expected == rows(body)
    for status, n in (("all", 10), ("suspended", 6), ("completed", 2), ("failed", 2)):
        assert f'<span class="badge {status}">{status} <b>{n}</b></span>' in body
    assert "cancelled <b>" not in body  # statuses with none are left out
    assert '<main id="live" data-poll="1">' in body
    assert '<script src="/static/live.js" defer></script>' in body


async def test_filters_by_status_process_and_prefix(app, opened):
    items = read_items(opened)

    async def shown(query: str) -> list[str]:
        status, _, body = await call(app, "/?" + query)
        assert 200 == status, body
        return rows(body)

    assert [i["address"] for i in items if i["status"] == "failed"] == await shown("status=failed")
    assert ["orders/o-1"] == await shown("process=orders/:id")
    # An address and those below it, as `actors list --prefix` keeps them.
    family = [a for a in (i["address"] for i in items) if a.startswith("orders/o-1")]
    assert 3 == len(family)
    assert family == await shown("prefix=orders/o-1/")
    assert family == await shown("prefix=orders/o-1")
    assert [] == await shown("prefix=orders/o")
    assert ["orders/o-1/workers/w-1"] == await shown(
        "prefix=orders/&status=suspended&process=workers/:id"
    )
    assert [] == await shown("prefix=nothing-here")
    _, _, body = await call(app, "/?prefix=nothing-here")
    assert "no instances match." in body
    # The counts stay those of the whole journal; the filters stay in the form.
    _, _, body = await call(app, "/?status=completed&prefix=greet%2F")
    assert '<span class="badge all">all <b>10</b></span>' in body
    assert '<option value="completed" selected>completed</option>' in body
    assert 'name="prefix" value="greet/"' in body


async def test_pages_of_the_list(app, opened):
    expected = [i["address"] for i in read_items(opened)]
    got = []
    for page in (1, 2, 3, 4):
        status, _, body = await call(app, f"/?per=4&page={page}")
        assert 200 == status
        assert f"10 matching · page {page} of 3" in body
        got.append(rows(body))
    assert [expected[0:4], expected[4:8], expected[8:10], []] == got
    _, _, body = await call(app, "/?per=4&page=2&status=suspended")
    assert 'href="/?status=suspended&amp;per=4">← newer</a>' in body
    assert 'href="/?status=suspended&amp;page=3&amp;per=4">older →</a>' not in body
    _, _, body = await call(app, "/?per=4&page=4")
    assert "no instances on page 4; there are 3." in body


async def test_partial_is_the_polled_part_alone(app):
    status, _, body = await call(app, "/?status=failed&partial=1")
    assert 200 == status
    assert body.startswith('<div class="counts">') and "<html" not in body
    assert ["sagas/s-1", "boom/1"] == rows(body)


# -- an instance --------------------------------------------------------------------


async def test_an_instance_page_shows_input_result_and_log(app):
    status, _, body = await call(app, href("greet/ann"))
    assert 200 == status
    assert '<h1 id="address">greet/ann</h1>' in body
    assert '<span class="badge completed">completed</span>' in body
    assert "&quot;ann&quot;" in body  # its params
    assert '<div id="result"><pre class="value">&quot;hello ann&quot;</pre></div>' in body
    log = body[body.index('<table id="log">') :]
    assert "make_greeting" in log and "ok: &quot;hello ann&quot;" in log


async def test_an_error_with_its_traceback_and_compensations(app, opened):
    with opened.reader() as r:
        stored = r.instance(instance_id("sagas/s-1")).record.error["traceback"]
    assert "Traceback (most recent call last)" in stored
    _, _, body = await call(app, href("sagas/s-1"))
    error = body[body.index('<div id="error">') :]
    assert "ValueError: the flux capacitor is empty" in error
    shown = re.search(r'<pre class="trace">(.*?)</pre>', error, re.S)
    assert stored == html.unescape(shown[1])
    comps = body[body.index('<table id="compensations">') :]
    assert ">done<" in comps and "unbook" in comps and "&quot;room&quot;" in comps


async def test_mailbox_and_timers(app):
    _, _, body = await call(app, href("approvals/a-1"))
    assert "Mailbox: 1 unread message" in body
    mail = body[body.index('<table id="mailbox">') :]
    assert ">note<" in mail and "&quot;call me&quot;" in mail
    assert "Timers: 1 timer" in body
    assert re.search(r'<table id="timers">.*in 2 d 23 h', body, re.S)


async def test_supervision_tree_restarts_exports_and_links(app):
    _, _, body = await call(app, href("orders/o-1"))
    assert "none (top level)" in body
    tree = body[body.index('<ul class="tree">') :]
    assert f'href="{html.escape(href("orders/o-1/greet/bob"))}">orders/o-1/greet/bob</a>' in tree
    assert (
        f'href="{html.escape(href("orders/o-1/workers/w-1"))}">orders/o-1/workers/w-1</a>' in tree
    )
    assert "(call #" in tree and "(spawn #" in tree
    assert "version 1" in body and "&quot;shipping&quot;" in body  # exports

    _, _, body = await call(app, href("orders/o-1/workers/w-1"))
    assert (
        f'child of <a class="mono" href="{html.escape(href("orders/o-1"))}">orders/o-1</a>' in body
    )
    assert "(restart: transient)" in body
    restarts = body[body.index('<table id="restarts">') :]
    assert "the worker tripped" in restarts


async def test_stream_with_its_consumers_cursors(app):
    _, _, body = await call(app, href("feeds/f-1"))
    assert "Stream: 5 values" in body
    consumers = body[body.index('<table id="consumers">') :]
    assert re.search(r">reader</span></td><td>2</td><td>3</td>", consumers)


async def test_the_effect_log_is_paged(app):
    def seqs(body: str) -> list[int]:
        log = body[
            body.index('<table id="log">') : body.index("</table>", body.index('<table id="log">'))
        ]
        return [int(s) for s in re.findall(r"<tr><td>(\d+)</td>", log)]

    _, _, first = await call(app, href("steps/long"))
    _, _, third = await call(app, href("steps/long") + "&logpage=3")
    assert list(range(1, 51)) == seqs(first)  # 120 steps; the wait is not logged until it ends
    assert list(range(101, 121)) == seqs(third)
    assert "120 entries · page 3 of 3" in third
    assert 'logpage=2">← earlier</a>' in third and "later →" not in third
    _, _, small = await call(app, href("steps/long") + "&logpage=2&per=10")
    assert seqs(first)[10:20] == seqs(small)


# -- user data stays text -------------------------------------------------------------


async def test_markup_in_addresses_and_payloads_renders_inert(app):
    address = f"notes/{XSS}"
    for target in ("/", "/?partial=1", href(address), href(address) + "&partial=1"):
        status, _, body = await call(app, target)
        assert 200 == status
        assert "<img" not in body and "<script>document" not in body, target
        assert html.escape(XSS) in body, target
    _, _, body = await call(app, href(address))
    # The input and the mail payload, as JSON text.
    assert 2 == body.count(html.escape(XSS_PAYLOAD))


async def test_security_headers_on_every_answer(app):
    for target in ("/", href("greet/ann"), "/static/live.js", "/nope", "/?page=x"):
        _, headers, _ = await call(app, target)
        assert "script-src 'self';" in headers["content-security-policy"], target
        assert "nosniff" == headers["x-content-type-options"]


async def test_assets_are_served_from_the_package(app):
    status, headers, body = await call(app, "/static/live.js")
    assert (200, "text/javascript; charset=utf-8") == (status, headers["content-type"])
    assert "partial" in body and "http" not in body.replace(
        "https://", ""
    )  # nothing fetched from elsewhere
    status, headers, _ = await call(app, "/static/inspector.css")
    assert (200, "text/css; charset=utf-8") == (status, headers["content-type"])


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, status, says",
    [
        ("/?status=bogus", 400, "unknown status &#x27;bogus&#x27;; one of running"),
        ("/?status=%3Cb%3E", 400, "unknown status &#x27;&lt;b&gt;&#x27;"),
        ("/?page=0", 400, "page must be a whole number from 1, not &#x27;0&#x27;"),
        ("/?page=-1", 400, "page must be a whole number from 1"),
        ("/?page=abc", 400, "page must be a whole number from 1"),
        ("/?page=%D9%A3", 400, "page must be a whole number from 1"),  # an Arabic-Indic 3
        ("/?page=99999999999999999999", 400, "page must be a whole number from 1"),
        ("/?per=501", 400, "per must be at most 500, not 501"),
        ("/?partial=yes", 400, "partial must be 0 or 1"),
        ("/?colour=red", 400, "unknown query parameter &#x27;colour&#x27;; this page takes status"),
        ("/?status=failed&status=completed", 400, "status&#x27; is given 2 times"),
        ("/instance", 400, "address is missing"),
        ("/instance?address=", 400, "address is missing"),
        ("/instance?address=orders/nope", 404, "no instance at &#x27;orders/nope&#x27;"),
        ("/instance?address=%FF%FE", 404, "no instance at"),
        ("/instance?address=a%00b", 404, "no instance at &#x27;a\\x00b&#x27;"),
        ("/instance?address=greet/ann&logpage=x", 400, "logpage must be a whole number"),
        ("/instance?address=greet/ann&bogus=1", 400, "unknown query parameter &#x27;bogus&#x27;"),
        ("/nope", 404, "nothing at &#x27;/nope&#x27;"),
        ("/static/../pyproject.toml", 404, "nothing at"),
        ("/static/other.js", 404, "no file &#x27;/static/other.js&#x27; here"),
    ],
)
async def test_bad_input_is_a_4xx_page(app, target, status, says):
    got, headers, body = await call(app, target)
    assert status == got, body
    assert "text/html; charset=utf-8" == headers["content-type"]
    assert says in body
    assert '<a href="/">all instances</a>' in body


async def test_only_reads(app):
    for method in ("POST", "PUT", "DELETE"):
        status, _, body = await call(app, "/", method=method)
        assert 405 == status and "this inspector only reads: use GET" in body
    status, _, body = await call(app, "/", method="HEAD")
    assert 200 == status


async def test_other_host_names_are_refused(app):
    # A page elsewhere that points its own name at 127.0.0.1 cannot read the inspector.
    status, _, _ = await call(app, "/", host="evil.example:8080")
    assert 400 == status
    for host in ("127.0.0.1:8080", "localhost:8080"):
        assert 200 == (await call(app, "/", host=host))[0]


# -- the command ----------------------------------------------------------------------


def run_web(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "actors", "web", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow  # a server in a subprocess, on real time
def test_the_command_serves_on_127_0_0_1_and_says_so(journal):
    server = run_web("--journal", str(journal), "--port", "0")
    try:
        first = server.stdout.readline()
        match = re.fullmatch(
            r"actors web: inspecting (.+) read-only at (http://127\.0\.0\.1:\d+/)\n", first
        )
        assert match, first + server.stderr.read()
        assert str(journal) == match[1]
        assert (
            "listening on 127.0.0.1 (this machine only); Ctrl-C stops it\n"
            == server.stdout.readline()
        )
        with urllib.request.urlopen(match[2], timeout=10) as resp:
            assert 200 == resp.status
            assert "orders/o-1/workers/w-1" in resp.read().decode()
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(match[2] + "instance?address=orders/nope", timeout=10)
        assert 404 == bad.value.code
    finally:
        server.send_signal(signal.SIGINT)
        _out, err = server.communicate(timeout=30)
    assert 0 == server.returncode, err  # Ctrl-C stops it gracefully
    assert "Traceback" not in err


def test_the_command_refuses_what_it_cannot_serve(journal, tmp_path):
    # A directory or a postgresql:// URL (test_web_postgres.py serves one).
    done = subprocess.run(
        [sys.executable, "-m", "actors", "web", "--journal", "mysql://localhost/db"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 2 == done.returncode
    assert "give an LMDB journal's directory, or a PostgreSQL journal's URL" in done.stderr

    done = subprocess.run(
        [sys.executable, "-m", "actors", "web", "--journal", str(journal), "--schema", "orders"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 2 == done.returncode
    assert "--schema names the schema of a PostgreSQL journal" in done.stderr

    done = subprocess.run(
        [sys.executable, "-m", "actors", "--journal", str(tmp_path / "none"), "web"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 3 == done.returncode
    assert "the directory does not exist" in done.stderr

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "actors", "web", "--journal", str(journal), "--port", str(port)],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert 1 == done.returncode
    assert (
        f"cannot listen on 127.0.0.1:{port}" in done.stderr and "pick another --port" in done.stderr
    )

    # Without the 'web' extra, the command says what to install.
    blocked = "import sys; sys.modules['starlette'] = None; from actors._tools._cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", blocked, "web", "--journal", str(journal)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 2 == done.returncode
    assert (
        "needs the 'web' extra" in done.stderr and "pip install 'trio-actors[web]'" in done.stderr
    )

    for bad in (("--port", "70000"), ("--interval", "0"), ("--interval", "nan")):
        done = subprocess.run(
            [sys.executable, "-m", "actors", "web", "--journal", str(journal), *bad],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert 2 == done.returncode, bad


# -- corrupt records ------------------------------------------------------------------


async def test_a_corrupt_record_is_listed_and_its_page_says_so(journal, tmp_path):
    import lmdb

    copy = tmp_path / "journal"
    shutil.copytree(journal, copy)
    env = lmdb.open(str(copy), max_dbs=16)
    db = env.open_db(b"instances")
    key = instance_id("greet/ann")
    with env.begin(write=True) as txn:
        value = txn.get(key, db=db)
        header_end = 3 + int.from_bytes(value[1:3], "big")
        txn.put(key, value[:header_end] + b"\xc1", db=db)  # 0xc1: never valid msgpack
    env.close()

    async with LMDBJournal(copy, readonly=True) as opened:
        app = create_app(opened, source=str(copy))
        status, _, body = await call(app, "/")
        assert 200 == status and 10 == len(rows(body))
        row = body[body.index('<tr data-address="greet/ann">') :].split("</tr>")[0]
        assert "does not decode" in row and "<a " not in row  # listed, with no page to open
        status, _, body = await call(app, href("greet/ann"))
        assert 500 == status
        assert (
            "corrupt record" in body
            and "the record of &#x27;greet/ann&#x27; does not decode" in body
        )
        assert 200 == (await call(app, href("boom/1")))[0]
