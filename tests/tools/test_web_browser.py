"""The web inspector in a real headless browser (Debian's chromium), beside a
system that runs in a child process and holds the journal (LMDB), or runs
on a schema of its own (PostgreSQL, tests/pg.py).

The inspector is served here, in the test's trio run, with the app that
``actors web`` serves, over the journal opened read-only as the command opens
it. Chromium loads the pages with ``--dump-dom`` (the DOM after the page's
script ran) and ``--screenshot``; the screenshots are written to
build/test-output/web/ for people to look at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
import trio

pytest.importorskip("starlette", reason="install the 'web' extra")
pytest.importorskip("hypercorn", reason="install the 'web' extra")

import storage
from actors._tools._web import create_app, serve_app
from storage import Journal, LMDBJournal
from tests.pg import fresh_schema

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "test-output" / "web"
CHROMIUM = shutil.which("chromium")

if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("chromium is missing; .ci/run installs Debian's package")
    pytest.skip("needs Debian's chromium (apt-get install chromium)", allow_module_level=True)

pytestmark = pytest.mark.slow  # a browser and a second process, on real time

XSS = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"

# The running system: starts instances, then one more each time it is asked.
SYSTEM = textwrap.dedent(
    """
    import sys
    import trio
    import actors
    from storage import LMDBJournal, PostgresJournal
    from tests.runtime_helpers import wait_status

    go = actors.Signal("go")

    def reserve(item):
        return f"reserved {item}"

    def charge(amount):
        return {"charged": amount}

    @actors.process("jobs/:id")
    async def job(ctx, id, *, items):
        for item in items:
            await ctx.step(reserve, item)
        await ctx.step(charge, 10 * len(items))
        await ctx.sleep(2 * 86400)
        await ctx.wait(go)

    @actors.process("notes/:id")
    async def note(ctx, id, *, text):
        await ctx.wait(go)

    def refuse(card):
        raise ValueError(f"card {card} declined")

    @actors.process("payments/:id")
    async def payment(ctx, id, *, card):
        return await ctx.step(refuse, card, retry=actors.Retry(attempts=1))

    @actors.process("orders/:id")
    async def order(ctx, id):
        await ctx.call(job, "j-0", items=["gift"])
        await ctx.publish({"stage": "packing"})
        await ctx.wait(go)

    @actors.process("quotes/:id")
    async def quote(ctx, id, *, amount):
        return {"total": amount * 1.2}

    async def main(path, xss, schema=None):
        processes = [job, note, payment, order, quote]
        journal = PostgresJournal(path, schema=schema) if schema else LMDBJournal(path)
        async with actors.open_system(journal, processes=processes) as system:
            await (await system.start(quote, "q-1", amount=100)).result()
            try:
                await (await system.start(payment, "p-1", card="4242")).result()
            except actors.ProcessFailed:
                pass
            await wait_status(await system.start(order, "o-1"), "suspended")
            for n in range(1, 4):
                h = await system.start(job, f"j-{n}", items=[f"item-{i}" for i in range(n)])
                await wait_status(h, "suspended")
            await system.send("jobs/j-1", go, {"by": "ann"})
            h = await system.start(note, xss, text=xss)
            await wait_status(h, "suspended")
            print("ready", flush=True)
            # Read in a worker thread: a read in the trio thread would stop
            # the system meanwhile (its deferred writes among the rest).
            while line := await trio.to_thread.run_sync(sys.stdin.readline):
                h = await system.start(job, line.strip(), items=["late"])
                await wait_status(h, "suspended")
                print("started", flush=True)

    trio.run(main, *sys.argv[1:])
    """
)


class _DOM(HTMLParser):
    """What the tests look for in a dumped DOM: rows, ids' text, images, body attributes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[str] = []
        self.images = 0
        self.body: dict[str, str | None] = {}
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and "data-address" in found:
            self.rows.append(found["data-address"] or "")
        if tag == "img":
            self.images += 1
        if tag == "body":
            self.body = found

    def handle_data(self, data: str) -> None:
        self.text.append(data)


class _Recorder:
    """Wraps the app: counts full pages and polls of the list, and can hold
    polls until the test lets them through."""

    def __init__(self, app) -> None:
        self.app = app
        self.pages: list[str] = []
        self.polls = 0
        self.page_served = trio.Event()
        self.release = trio.Event()
        self.release.set()

    async def __call__(self, scope, receive, send) -> None:
        is_list = scope["type"] == "http" and scope["path"] == "/"
        if not is_list:
            await self.app(scope, receive, send)
            return
        if b"partial=1" in scope["query_string"]:
            self.polls += 1
            await self.release.wait()
            await self.app(scope, receive, send)
            return
        body: list[bytes] = []

        async def keep(message) -> None:
            if message["type"] == "http.response.body":
                body.append(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, keep)
        self.pages.append(b"".join(body).decode())
        self.page_served.set()


@contextmanager
def _running(tmp_path: Path, where: str, *schema: str) -> Iterator[subprocess.Popen]:
    """SYSTEM in a child process, on the journal at ``where`` (in ``schema``, for PostgreSQL)."""
    script = tmp_path / "system.py"
    script.write_text(SYSTEM)
    child = subprocess.Popen(
        [sys.executable, str(script), where, XSS, *schema],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "ready\n" == child.stdout.readline(), child.stderr.read()
        yield child
    finally:
        child.stdin.close()
        assert 0 == child.wait(timeout=30), child.stderr.read()


@pytest.fixture
def system(tmp_path):
    """A system in a child process holding an LMDB journal; yields (journal path, process)."""
    path = tmp_path / "journal"
    with _running(tmp_path, str(path)) as child:
        yield path, child


@pytest.fixture
def pg_system(request, tmp_path):
    """A system in a child process on a PostgreSQL schema; yields (dsn, schema, process)."""
    pytest.importorskip("psycopg", reason="install the 'postgres' extra")
    dsn, schema = fresh_schema(request)
    with _running(tmp_path, dsn, schema) as child:
        yield dsn, schema, child


async def browse(url: str, *, screenshot: Path | None = None, wait_ms: int = 0) -> str:
    """Chromium's DOM of ``url`` after ``wait_ms`` of the page's time (and a screenshot)."""
    with tempfile.TemporaryDirectory() as profile:
        args = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--window-size=1280,1100",
            f"--user-data-dir={profile}",
        ]
        if wait_ms:
            args.append(f"--virtual-time-budget={wait_ms}")
        if screenshot is not None:
            SHOTS.mkdir(parents=True, exist_ok=True)
            await _chromium([*args, f"--screenshot={screenshot}", url])
            assert screenshot.stat().st_size > 10_000  # a rendered page, not a blank one
        return await _chromium([*args, "--dump-dom", url])


async def _chromium(args: list[str]) -> str:
    with trio.fail_after(90):
        done = await trio.run_process(args, capture_stdout=True, capture_stderr=True, check=False)
    assert 0 == done.returncode, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode()


async def _serve(nursery, journal: Journal, source: Path | str, wrap=lambda app: app):
    app = wrap(create_app(journal, source=str(source), poll=0.5))
    url = await nursery.start(serve_app, app, "127.0.0.1", 0)
    return app, url


async def test_the_list_shows_the_running_systems_instances(system):
    path, _ = system
    async with LMDBJournal(path, readonly=True) as journal, trio.open_nursery() as nursery:
        _, url = await _serve(nursery, journal, path)
        dom = _DOM(await browse(url, screenshot=SHOTS / "list.png", wait_ms=1500))
        nursery.cancel_scope.cancel()
    assert {
        "quotes/q-1",
        "payments/p-1",
        "orders/o-1",
        "orders/o-1/jobs/j-0",
        "jobs/j-1",
        "jobs/j-2",
        "jobs/j-3",
        f"notes/{XSS}",
    } == set(dom.rows)
    assert f"notes/{XSS}" == dom.rows[0]  # started last: the newest, on top
    text = "".join(dom.text)
    assert "all 8" in text and "suspended 6" in text
    assert "completed 1" in text and "failed 1" in text
    assert "card 4242 declined" in text
    assert "live, updated" in text  # the page's script polled the server
    # Markup in an address shows as text and never runs.
    assert XSS in text
    assert (0, None) == (dom.images, dom.body.get("data-pwned"))


async def test_an_instance_page_shows_its_log(system):
    path, _ = system
    address = "jobs/j-3"
    async with LMDBJournal(path, readonly=True) as journal, trio.open_nursery() as nursery:
        _, url = await _serve(nursery, journal, path)
        page = f"{url}instance?address={quote(address, safe='')}"
        dom = _DOM(await browse(page, screenshot=SHOTS / "instance.png", wait_ms=1500))
        xss = _DOM(
            await browse(
                f"{url}instance?address={quote('notes/' + XSS, safe='')}",
                screenshot=SHOTS / "instance-markup.png",
                wait_ms=1500,
            )
        )
        tree = _DOM(
            await browse(
                f"{url}instance?address=orders%2Fo-1",
                screenshot=SHOTS / "instance-tree.png",
                wait_ms=1500,
            )
        )
        nursery.cancel_scope.cancel()
    text = "".join(dom.text)
    assert address in text
    for line in ("reserved item-0", "reserved item-1", "reserved item-2", "charged", "sleep"):
        assert line in text, line
    assert "Timers: 1 timer" in text and "live, updated" in text
    assert f"notes/{XSS}" in "".join(xss.text)
    tree_text = "".join(tree.text)
    assert "orders/o-1/jobs/j-0" in tree_text and "(call #1)" in tree_text
    assert "waiting for the child" in tree_text  # its log: the call is pending
    assert (0, None) == (xss.images, xss.body.get("data-pwned"))


async def test_a_new_instance_appears_without_reload(system):
    path, child = system
    async with LMDBJournal(path, readonly=True) as journal, trio.open_nursery() as nursery:
        recorder, url = await _serve(nursery, journal, path, _Recorder)
        recorder.release = trio.Event()  # hold the page's polls until the instance exists
        dom_text: list[str] = []

        async def load() -> None:
            dom_text.append(await browse(url, wait_ms=4000))

        nursery.start_soon(load)
        with trio.fail_after(90):
            await recorder.page_served.wait()

        def start_one() -> str:
            child.stdin.write("j-new\n")
            child.stdin.flush()
            return child.stdout.readline()

        assert "started\n" == await trio.to_thread.run_sync(start_one)
        recorder.release.set()
        with trio.fail_after(120):
            while not dom_text:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert 1 == len(recorder.pages)  # loaded once, never reloaded
    assert "jobs/j-new" not in recorder.pages[0]
    assert recorder.polls >= 1
    dom = _DOM(dom_text[0])
    assert "jobs/j-new" == dom.rows[0]  # the newest, on top
    assert {"jobs/j-1", "jobs/j-2", "jobs/j-3"} <= set(dom.rows)
    assert "all 9" in "".join(dom.text)


async def test_on_postgresql_the_pages_show_the_running_system_and_update_live(pg_system):
    dsn, schema, child = pg_system
    opened = storage.PostgresJournal(dsn, schema=schema, pool_size=2, readonly=True)
    async with opened as journal, trio.open_nursery() as nursery:
        source = journal.describe()
        _, url = await _serve(nursery, journal, source)
        recorder, live_url = await _serve(nursery, journal, source, _Recorder)
        listed = _DOM(await browse(url, screenshot=SHOTS / "list-postgres.png", wait_ms=1500))
        page = f"{url}instance?address=jobs%2Fj-3"
        shown = _DOM(await browse(page, screenshot=SHOTS / "instance-postgres.png", wait_ms=1500))

        recorder.release = trio.Event()  # hold the page's polls until the instance exists
        dom_text: list[str] = []

        async def load() -> None:
            dom_text.append(await browse(live_url, wait_ms=4000))

        nursery.start_soon(load)
        with trio.fail_after(90):
            await recorder.page_served.wait()

        def start_one() -> str:
            child.stdin.write("j-new\n")
            child.stdin.flush()
            return child.stdout.readline()

        assert "started\n" == await trio.to_thread.run_sync(start_one)
        recorder.release.set()
        with trio.fail_after(120):
            while not dom_text:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert {
        "quotes/q-1",
        "payments/p-1",
        "orders/o-1",
        "orders/o-1/jobs/j-0",
        "jobs/j-1",
        "jobs/j-2",
        "jobs/j-3",
        f"notes/{XSS}",
    } == set(listed.rows)
    assert f"notes/{XSS}" == listed.rows[0]
    text = "".join(listed.text)
    assert "all 8" in text and "suspended 6" in text and "card 4242 declined" in text
    assert f"schema='{schema}'" in text and "live, updated" in text
    assert (0, None) == (listed.images, listed.body.get("data-pwned"))
    text = "".join(shown.text)
    for line in ("reserved item-0", "reserved item-1", "reserved item-2", "charged", "sleep"):
        assert line in text, line
    assert "Timers: 1 timer" in text and "live, updated" in text
    # A new instance, started by the running system, appears without a reload.
    assert 1 == len(recorder.pages) and "jobs/j-new" not in recorder.pages[0]
    assert recorder.polls >= 1
    dom = _DOM(dom_text[0])
    assert "jobs/j-new" == dom.rows[0]
    assert "all 9" in "".join(dom.text)
