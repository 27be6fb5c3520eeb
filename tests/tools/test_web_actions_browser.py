"""The inspector's actions in a real headless browser (Debian's chromium),
beside a system that runs in a child process and holds the journal (LMDB),
so each action goes the command line's way through its control socket.

Chromium is driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages ended by NUL on its fds 3 and 4),
so a test clicks what a person clicks: the action's button on the
instance's page, then the confirmation's. A page on another origin that
posts a form to the inspector, and a confirmation whose token was taken
out, are refused with the journal unchanged.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
import trio

pytest.importorskip("starlette", reason="install the 'web' extra")
pytest.importorskip("hypercorn", reason="install the 'web' extra")

from starlette.applications import Starlette
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from actors._tools._web import create_app, serve_app
from actors._tools._web._actions import ACTIONS, Runner
from storage import LMDBJournal, instance_id

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "test-output" / "web"
CHROMIUM = shutil.which("chromium")

if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("chromium is missing; .ci/run installs Debian's package")
    pytest.skip("needs Debian's chromium (apt-get install chromium)", allow_module_level=True)

pytestmark = pytest.mark.slow  # a browser, a system and the command line, on real time


SYSTEM = textwrap.dedent(
    """
    import os
    import sys
    import trio
    import actors
    from storage import LMDBJournal
    from tests.runtime_helpers import wait_status

    go, junk = actors.Signal("go"), actors.Signal("junk")
    path, fixed, charges = sys.argv[1:]
    once = actors.Retry(attempts=1)

    def book(item):
        return f"booked {item}"

    def unbook(item):
        pass

    def release(trip):
        if not os.path.exists(fixed):
            raise RuntimeError("the hotel's API is down")

    def decline(card):
        raise ValueError(f"card {card} declined")

    def charge(order):
        with open(charges, "a") as f:
            f.write(order + "\\n")
        return "charged"

    def ship(order):
        if not os.path.exists(fixed):
            raise RuntimeError("the carrier is down")
        return "shipped"

    @actors.process("holds/:id")
    async def hold(ctx, id):
        await ctx.step(book, id, compensate=unbook)
        await ctx.wait(go)

    @actors.process("notes/:id")
    async def note(ctx, id):
        return await ctx.wait(go)

    @actors.process("payments/:id")
    async def payment(ctx, id):
        await ctx.step(decline, id, retry=once)

    @actors.process("trips/:id")
    async def trip(ctx, id):
        await ctx.step(book, id, compensate=release, retry=once)
        await ctx.step(decline, id, retry=once)

    @actors.process("orders/:id")
    async def order(ctx, id):
        await ctx.step(charge, id)
        return await ctx.step(ship, id, retry=once)

    async def main():
        processes = [hold, note, payment, trip, order]
        async with actors.open_system(LMDBJournal(path), processes=processes) as system:
            for h in ("h-1", "h-2"):
                await wait_status(await system.start(hold, h), "suspended")
            await wait_status(await system.start(note, "n-1"), "suspended")
            await system.send("notes/n-1", junk, {"spam": True})
            await wait_status(await system.start(payment, "p-1"), "failed")
            for t in ("t-1", "t-2"):
                await wait_status(await system.start(trip, t), "compensation_stuck")
            await wait_status(await system.start(order, "o-1"), "failed")
            print("ready", flush=True)
            await trio.to_thread.run_sync(sys.stdin.read)  # until the test is done

    trio.run(main)
    """
)


@contextmanager
def _running(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """SYSTEM in a child process; yields (journal, the fix's file, the charges' file)."""
    script = tmp_path / "system.py"
    script.write_text(SYSTEM)
    path, fixed, charges = tmp_path / "journal", tmp_path / "fixed", tmp_path / "charges"
    child = subprocess.Popen(
        [sys.executable, str(script), str(path), str(fixed), str(charges)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "ready\n" == child.stdout.readline(), child.stderr.read()
        yield path, fixed, charges
    finally:
        child.stdin.close()
        assert 0 == child.wait(timeout=30), child.stderr.read()


class Browser:
    """Headless Chromium, one tab, driven over the DevTools protocol on a pipe."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp()
        its_in, ours_out = os.pipe()  # what we write, it reads on its fd 3
        ours_in, its_out = os.pipe()  # what it writes on its fd 4, we read

        def fds_3_and_4() -> None:  # where --remote-debugging-pipe looks
            read, write = os.dup(its_in), os.dup(its_out)  # (either may be 3 or 4)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--window-size=1280,1000",
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=fds_3_and_4,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(its_in)
        os.close(its_out)
        self.writer, self.reader = ours_out, ours_in
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable")

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        os.close(self.writer)
        os.close(self.reader)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "the browser did not answer in time"
            ready, _, _ = select.select([self.reader], [], [], left)
            if ready:
                chunk = os.read(self.reader, 1 << 16)
                assert chunk, "the browser went away"
                self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, **params: object) -> dict:
        got = self.ask(method, **params)
        assert "error" not in got, got
        return got["result"]

    def ask(self, method: str, **params: object) -> dict:
        """The browser's answer to ``method``: a result or an error."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if self.session is not None and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self.writer, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            got = self._receive(deadline)
            if got.get("id") == self.next_id:
                return got
            if "method" in got:
                self.events.append(got)

    def _loaded(self) -> None:
        deadline = time.monotonic() + 60
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            got = self._receive(deadline)
            if "method" in got:
                self.events.append(got)
        self.events.clear()

    def goto(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self._loaded()

    def run(self, script: str) -> object:
        got = self.call("Runtime.evaluate", expression=script, returnByValue=True)
        assert "exceptionDetails" not in got, got
        return got["result"].get("value")

    def click(self, selector: str) -> None:
        """Click what ``selector`` finds, and wait for the page it leads to."""
        self.events.clear()
        assert self.run(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return false; e.click(); return true; })()"
        ), selector
        self._loaded()

    def fill(self, selector: str, value: str) -> None:
        assert self.run(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            f" if (!e) return false; e.value = {json.dumps(value)}; return true; }})()"
        )

    def text(self, selector: str = "body") -> str:
        return str(self.run(f"document.querySelector({json.dumps(selector)}).innerText"))

    def text_now(self) -> str:
        """The page's text, or "" while it is between pages."""
        got = self.ask(
            "Runtime.evaluate",
            expression="document.body ? document.body.innerText : ''",
            returnByValue=True,
        )
        return str(got.get("result", {}).get("result", {}).get("value") or "")

    def screenshot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        (SHOTS / name).write_bytes(base64.b64decode(data))


def _record(journal: LMDBJournal, address: str) -> tuple:
    with journal.reader() as r:
        row = r.instance(instance_id(address))
        return row.status, row.record, r.mailbox(row.iid)


async def _until(journal: LMDBJournal, address: str, status: str) -> None:
    with trio.fail_after(30):
        while _record(journal, address)[0] != status:
            await trio.sleep(0.05)


async def _serve(nursery, journal: LMDBJournal, path: Path) -> str:
    app = create_app(journal, source=str(path), poll=60, runner=Runner(str(path)), actions=ACTIONS)
    return await nursery.start(serve_app, app, "127.0.0.1", 0)


def _act(
    browser: Browser, url: str, address: str, action: str, **fill: str
) -> tuple[str, str, str]:
    """Click ``action`` on ``address``'s page, then confirm: (what the
    confirmation said, the outcome's word, what the command printed)."""
    browser.goto(f"{url}instance?address={quote(address, safe='')}")
    for name, value in fill.items():
        browser.fill(f'form[data-action="{action}"] input[name="{name}"]', value)
    browser.click(f'form[data-action="{action}"] button')
    says = browser.text("#says")
    browser.click("#confirm button")
    return says, browser.text("#outcome"), browser.text("#said")


async def test_each_action_from_its_page_through_the_running_system(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="actors.control")
    with _running(tmp_path) as (path, fixed, _):
        async with LMDBJournal(path, readonly=True) as journal, trio.open_nursery() as nursery:
            url = await _serve(nursery, journal, path)
            browser = await trio.to_thread.run_sync(Browser)
            try:

                async def act(address: str, action: str, **fill: str) -> tuple[str, str, str]:
                    return await trio.to_thread.run_sync(
                        lambda: _act(browser, url, address, action, **fill)
                    )

                says, word, said = await act("holds/h-1", "cancel")
                assert "Its 1 saga compensation (book) do NOT run" in says
                assert ("done", True) == (word, "cancelled holds/h-1" in said), said
                await _until(journal, "holds/h-1", "cancelled")
                assert () == tuple(_record(journal, "holds/h-1")[1].compensated)

                says, word, said = await act("holds/h-2", "cancel-compensate")
                assert "run first, newest first: book; then it ends cancelled" in says
                assert "done" == word, said
                await _until(journal, "holds/h-2", "cancelled")
                assert 1 == len(_record(journal, "holds/h-2")[1].compensated)

                says, word, said = await act(
                    "notes/n-1", "send", signal="go", payload='{"by": "ann"}'
                )
                assert 'Puts the message \'go\' with payload {"by": "ann"}' in says
                assert "done" == word, said
                await _until(journal, "notes/n-1", "completed")
                assert {"by": "ann"} == _record(journal, "notes/n-1")[1].result

                says, word, said = await act("payments/p-1", "retry")
                assert "as incarnation 2" in says and "done" == word, said
                await _until(journal, "payments/p-1", "failed")
                assert 2 == _record(journal, "payments/p-1")[1].incarnation

                says, word, said = await act("trips/t-2", "abandon-compensation")
                assert "book never run" in says and "done" == word, said
                await _until(journal, "trips/t-2", "failed")

                fixed.write_text("")  # the hotel's API is back
                says, word, said = await act("trips/t-1", "resume-compensation")
                assert "1 compensation left to run, newest first: book" in says
                assert "done" == word, said
                await _until(journal, "trips/t-1", "failed")
                assert 1 == len(_record(journal, "trips/t-1")[1].compensated)

                # The command's refusal is the page's: t-1 is no longer stuck.
                await trio.to_thread.run_sync(
                    browser.goto, f"{url}confirm?action=abandon-compensation&address=trips%2Ft-1"
                )
                assert "409 · refused" in await trio.to_thread.run_sync(browser.text)
                await trio.to_thread.run_sync(browser.screenshot, "action-outcome.png")
            finally:
                await trio.to_thread.run_sync(browser.close)
            nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records if r.name == "actors.control"]
    assert [
        "cancel 'holds/h-1'",
        "cancel-compensate 'holds/h-2'",
        "send 'notes/n-1'",
        "retry 'payments/p-1'",
        "abandon-compensation 'trips/t-2'",
        "resume-compensation 'trips/t-1'",
    ] == [re.match(r"web inspector: (\S+ '[^']+')", line)[1] for line in lines]
    assert all(": done: " in line for line in lines), lines


async def test_fork_after_a_step_and_drop_a_message(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="actors.control")
    with _running(tmp_path) as (path, fixed, charges):
        async with LMDBJournal(path, readonly=True) as journal, trio.open_nursery() as nursery:
            url = await _serve(nursery, journal, path)
            browser = await trio.to_thread.run_sync(Browser)
            try:

                def fork() -> tuple[str, str, str]:
                    browser.goto(f"{url}instance?address=orders%2Fo-1")
                    browser.click('a.fork[href$="from=1"]')  # after the charge
                    says = browser.text("#says")
                    browser.click("#confirm button")
                    return says, browser.text("#outcome"), browser.text("#said")

                def drop() -> tuple[str, str, str]:
                    browser.goto(f"{url}instance?address=notes%2Fn-1")
                    browser.click("a.drop")
                    says = browser.text("#says")
                    browser.click("#confirm button")
                    return says, browser.text("#outcome"), browser.text("#said")

                fixed.write_text("")  # the carrier is back
                says, word, said = await trio.to_thread.run_sync(fork)
                assert "it keeps 1 log entry (#1 step charge)" in says
                assert "done" == word, said
                await _until(journal, "orders/o-1", "completed")
                assert "shipped" == _record(journal, "orders/o-1")[1].result
                assert ["o-1"] == charges.read_text().split()  # charged once, never again

                says, word, said = await trio.to_thread.run_sync(drop)
                assert "Removes message #1 ('junk', payload {\"spam\": true})" in says
                assert "done" == word, said
                assert [] == _record(journal, "notes/n-1")[2]
            finally:
                await trio.to_thread.run_sync(browser.close)
            nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records if r.name == "actors.control"]
    assert 2 == len(lines) and all(": done: " in line for line in lines), lines


def _attacker(target: str, fields: dict[str, str]) -> Starlette:
    """A page elsewhere that posts a form to the inspector as soon as it loads."""
    inputs = "".join(
        f'<input name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in fields.items()
    )
    page = (
        f'<html><body><form id="f" method="post" action="{html.escape(target)}">{inputs}'
        '</form><script src="/go.js"></script></body></html>'
    )

    async def index(request):
        return HTMLResponse(page)

    async def script(request):
        return Response('document.getElementById("f").submit();', media_type="text/javascript")

    return Starlette(routes=[Route("/", index), Route("/go.js", script)])


async def test_a_post_from_another_site_or_without_the_token_changes_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="actors.control")
    with _running(tmp_path) as (path, _, _):
        async with LMDBJournal(path, readonly=True) as journal, trio.open_nursery() as nursery:
            url = await _serve(nursery, journal, path)
            before = {a: _record(journal, a) for a in ("holds/h-1", "notes/n-1")}
            browser = await trio.to_thread.run_sync(Browser)
            try:
                # A real token of a real session, leaked to the other site: its
                # Origin still gives it away (and the cookie stays home).
                def token() -> str:
                    browser.goto(f"{url}confirm?action=cancel&address=holds%2Fh-1")
                    return str(browser.run('document.querySelector("input[name=token]").value'))

                leaked = await trio.to_thread.run_sync(token)
                forms = [
                    {"action": "cancel", "address": "holds/h-1"},
                    {"action": "cancel", "address": "holds/h-1", "token": leaked},
                ]
                pages = []
                for fields in forms:
                    evil = await nursery.start(
                        serve_app, _attacker(url + "act", fields), "127.0.0.1", 0
                    )
                    elsewhere = evil.replace("127.0.0.1", "localhost")  # another site
                    await trio.to_thread.run_sync(browser.goto, elsewhere)
                    with trio.fail_after(30):  # the form posts itself once its script runs
                        while "403 · refused" not in (
                            page := await trio.to_thread.run_sync(browser.text_now)
                        ):
                            await trio.sleep(0.1)
                    pages.append(page)

                # On the inspector's own confirmation, with the token taken out.
                def untokened() -> str:
                    browser.goto(f"{url}confirm?action=send&address=notes%2Fn-1&signal=go")
                    browser.run('document.querySelector("input[name=token]").remove()')
                    browser.click("#confirm button")
                    return browser.text()

                pages.append(await trio.to_thread.run_sync(untokened))
                await trio.to_thread.run_sync(browser.screenshot, "action-refused.png")
            finally:
                await trio.to_thread.run_sync(browser.close)
            after = {a: _record(journal, a) for a in ("holds/h-1", "notes/n-1")}
            nursery.cancel_scope.cancel()
    assert before == after  # nothing changed in the journal
    for page in pages[:2]:
        assert "403 · refused" in page and "not from this inspector" in page, page
        assert "http://localhost:" in page
    assert "403 · refused" in pages[2] and "token is missing" in pages[2]
    lines = [r.getMessage() for r in caplog.records if r.name == "actors.control"]
    assert 3 == len(lines) and all(": refused: " in line for line in lines), lines
