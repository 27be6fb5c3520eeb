"""What ``show`` and the inspector's instance page say about an instance that
decided a race and waits for something else, and about a long value or error
in its log: only what it waits for now, and every value whole.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import trio

pytest.importorskip("starlette", reason="install the 'web' extra")

import actors
from actors import Signal, process
from actors._tools._web import create_app
from storage import LMDBJournal, instance_id
from tests.runtime_helpers import wait_status

ROOT = Path(__file__).resolve().parents[2]

msg, more = Signal("msg"), Signal("more")
REASON = (
    "the carrier's API answered 503 Service Unavailable for order o-1: retry after "
    "the maintenance window ends at 04:00 UTC"
)
LONG = {"label": "parcel " + "x" * 120, "carrier": "acme"}


def call_carrier(order: str) -> None:
    raise RuntimeError(REASON)


def make_label(order: str) -> dict:
    return LONG


@process("racers/:id")
async def racer(ctx, id):
    await ctx.first(msg=ctx.wait(msg), late=ctx.sleep(86400))  # the message wins
    await ctx.sleep(3600)  # what it waits for now
    await ctx.wait(more)


@process("slow/:id")
async def slow(ctx, id):
    await ctx.wait(more)


@process("callers/:id")
async def caller(ctx, id):
    await ctx.first(msg=ctx.wait(msg), child=ctx.call(slow, id))  # the message wins
    await ctx.wait(more)


@process("poison/:id")
async def poisoned(ctx, id):
    _, payload = await ctx.receive(msg)
    raise ValueError(f"cannot handle {payload}")


@process("shipments/:id")
async def shipment(ctx, id):
    await ctx.step(make_label, id)
    await ctx.settled(ctx.step(call_carrier, id, retry=actors.Retry(attempts=1)))
    await ctx.wait(more)


async def build(path: Path) -> None:
    processes = [racer, shipment, slow, caller, poisoned]
    async with actors.open_system(LMDBJournal(path), processes=processes) as system:
        r = await system.start(racer, "r-1")
        await wait_status(r, "suspended")
        await system.send("racers/r-1", msg, "first")
        await wait_status(await system.start(shipment, "o-1"), "suspended")
        c = await system.start(caller, "c-1")
        child = await _until_exists(system, "callers/c-1/slow/c-1")
        await wait_status(child, "suspended")
        await system.send("callers/c-1", msg, "first")
        await wait_status(child, "cancelled")
        await wait_status(c, "suspended")
        await system.send("callers/c-1", Signal("junk"), {"spam": 1})
        (junk,) = [m for m in await system.mail("callers/c-1") if m.signal == "junk"]
        await system.drop_message("callers/c-1", junk.id)
        p = await system.start(poisoned, "p-1")
        await wait_status(p, "suspended")
        await system.send("poison/p-1", msg, {"bad": 1})
        await wait_status(p, "failed")
        with trio.fail_after(10):  # until it took the message and armed the next timer
            while len(await _log_of(system, "racers/r-1")) < 3 or r.status != "suspended":
                await trio.sleep(0.01)


async def _until_exists(system, address: str) -> actors.Handle:
    with trio.fail_after(10):
        while (handle := system.get(address)) is None:
            await trio.sleep(0.001)
    return handle


async def _log_of(system, address: str) -> dict:
    iid = instance_id(address)

    def read(r):
        return r.log(iid, r.instance(iid).record.run)

    return await system.journal.read(read)


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("show") / "journal"
    trio.run(build, path)
    return path


def show(journal: Path, address: str, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "actors", "--journal", str(journal), *more, "show", address],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_show_lists_only_the_timer_it_waits_for_now(journal):
    doc = json.loads(show(journal, "racers/r-1", "--json").stdout)
    assert [3] == [t["seq"] for t in doc["waiting"]["timers"]]  # not #2, which lost the race
    assert [3] == [t["seq"] for t in doc["timers"]]
    assert [("wait", "done"), ("sleep", "lost"), ("sleep", "started")] == [
        (i["kind"], i["state"]) for i in doc["log"]
    ]
    text = show(journal, "racers/r-1").stdout
    waiting = text[text.index("Waiting for") : text.index("Mailbox")]
    assert "timer #3" in waiting and "timer #2" not in waiting
    assert "not pending: it lost a race" in text


def test_show_does_not_wait_for_a_child_that_lost_a_race(journal):
    doc = json.loads(show(journal, "callers/c-1", "--json").stdout)
    assert [] == doc["waiting"]["children"]
    assert [("cancelled", "callers/c-1/slow/c-1")] == [
        (n["status"], n["address"]) for n in doc["children"]
    ]
    text = show(journal, "callers/c-1").stdout
    assert "callers/c-1/slow/c-1 to end" not in text


async def _page(journal: Path, address: str) -> str:
    async with LMDBJournal(journal, readonly=True) as opened:
        app = create_app(opened, source=str(journal))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/instance",
            "raw_path": b"/instance",
            "root_path": "",
            "query_string": f"address={quote(address, safe='')}".encode(),
            "headers": [(b"host", b"127.0.0.1")],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8080),
        }
        sent: list[dict] = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)
    assert 200 == sent[0]["status"]
    return html.unescape(b"".join(m.get("body", b"") for m in sent[1:]).decode())


async def test_the_page_says_the_lost_timer_waits_for_nothing(journal):
    page = await _page(journal, "racers/r-1")
    assert "not pending: it lost a race" in page
    assert 1 == page.count(">pending<")  # only #3


async def test_the_page_shows_long_values_and_errors_whole(journal):
    page = await _page(journal, "shipments/o-1")
    # The outcome line is cut; the whole value and error are folded under it.
    assert "ok: {" in page and "…" in page
    assert '<details id="entry-1"><summary>whole</summary>' in page
    assert LONG["label"] in page
    assert f"RuntimeError: {REASON}" in page
    assert (
        f"step 'call_carrier' failed on attempt 1 (of 'shipments/o-1'): RuntimeError: {REASON}"
        in page
    )
    assert "raise RuntimeError(REASON)" in page  # the traceback, folded too


async def test_the_page_names_the_message_a_failed_run_was_handling_and_the_dropped(journal):
    page = await _page(journal, "poison/p-1")
    assert "failed while handling message #1 msg (taken at effect #1)" in page
    assert '"bad": 1' in page
    assert "drop it…" not in page  # a read-only inspector offers no action
    page = await _page(journal, "callers/c-1")
    assert "dropped: 1 message (actors mail callers/c-1 --dropped)" in page
