"""The inspector's actions at the HTTP level (``actors web --allow-actions``):
the session token and the Origin check, the confirmation page, what a
read-only inspector refuses, and an action done by the command line with its
audit line. The app is called directly over a journal no system holds, so
the command line writes to it directly; test_web_actions_browser.py drives
every action in Chromium beside a running system.
"""

from __future__ import annotations

import html
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pytest
import trio
import trio.testing

pytest.importorskip("starlette", reason="install the 'web' extra")

import actors
from actors import Signal, process
from actors._tools._web import create_app
from actors._tools._web._actions import ACTIONS, Runner
from actors._tools._web._guard import TOKEN_SECONDS, Guard, origin_matches
from storage import LMDBJournal, instance_id
from tests.runtime_helpers import wait_status

ROOT = Path(__file__).resolve().parents[2]
go = Signal("go")
ORIGIN = "http://127.0.0.1:8080"


def book(item: str) -> str:
    return f"booked {item}"


def unbook(item: str) -> None:
    pass


def decline(card: str) -> None:
    raise ValueError(f"card {card} declined")


@process("holds/:id")
async def hold(ctx, id):
    await ctx.step(book, id, compensate=unbook)
    await ctx.wait(go)


@process("payments/:id")
async def payment(ctx, id):
    await ctx.step(decline, id)


@process("greet/:name")
async def greet(ctx, name):
    return f"hello {name}"


@process("poison/:id")
async def poisoned(ctx, id):
    _, payload = await ctx.receive(go)
    raise ValueError(f"cannot handle {payload}")


async def build(path: Path) -> None:
    processes = [hold, payment, greet, poisoned]
    async with actors.open_system(LMDBJournal(path), processes=processes) as system:
        await wait_status(await system.start(hold, "h-1"), "suspended")
        await wait_status(await system.start(payment, "p-1"), "failed")
        await (await system.start(greet, "ann")).result()
        p = await system.start(poisoned, "x-1")
        await wait_status(p, "suspended")
        await system.send("poison/x-1", go, {"bad": 1})
        await wait_status(p, "failed")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("actions") / "journal"
    trio.run(build, path)
    return path


@pytest.fixture
def journal(built, tmp_path) -> Path:
    """A copy of the built journal: the tests act on it."""
    copy = tmp_path / "journal"
    shutil.copytree(built, copy)
    return copy


@pytest.fixture
async def opened(journal):
    async with LMDBJournal(journal, readonly=True) as j:
        yield j


GUARD = Guard()


@pytest.fixture
def app(opened, journal):
    return create_app(
        opened, source=str(journal), runner=Runner(str(journal)), actions=ACTIONS, guard=GUARD
    )


@pytest.fixture
def read_only(opened, journal):
    return create_app(opened, source=str(journal))


async def call(app, target: str, *, method: str = "GET", headers=(), body: bytes = b""):
    """One request through the ASGI app: (status, headers, body text)."""
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
        "headers": [
            *([] if any(k == "host" for k, _ in headers) else [(b"host", b"127.0.0.1:8080")]),
            *((k.encode(), v.encode()) for k, v in headers),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    sent: list[dict] = []
    chunks = [body]

    async def receive():
        return {"type": "http.request", "body": chunks.pop() if chunks else b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    got = {}
    for k, v in start["headers"]:
        got.setdefault(k.decode().lower(), []).append(v.decode())
    return start["status"], got, text.decode()


def session_cookie(session: str) -> tuple[str, str]:
    return "cookie", f"{GUARD.cookie}={session}"


async def post(
    app,
    fields: dict,
    *,
    origin: str | None = ORIGIN,
    session: str | None = None,
    token: str | None = None,
    extra=(),
):
    headers = [("content-type", "application/x-www-form-urlencoded"), *extra]
    if origin is not None:
        headers.append(("origin", origin))
    if session is not None:
        headers.append(session_cookie(session))
    form = dict(fields, **({"token": token} if token is not None else {}))
    return await call(app, "/act", method="POST", headers=headers, body=urlencode(form).encode())


def tok(session: str, form: dict) -> str:
    """A token of ``session`` for the confirmation of exactly ``form``."""
    rest = {k: v for k, v in form.items() if k not in ("action", "address") and v != ""}
    return GUARD.token(session, form["action"], form["address"], rest)


def record(journal: LMDBJournal, address: str):
    """What an action would change: the instance's status, record and mail."""
    with journal.reader() as r:
        row = r.instance(instance_id(address))
        return row.status, row.record, r.mailbox(row.iid)


def text_of(body: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


# -- the token and the origin ---------------------------------------------------------


@pytest.mark.parametrize(
    "origin, host, ok",
    [
        ("http://127.0.0.1:8080", "127.0.0.1:8080", True),
        ("https://inspector.example", "inspector.example", True),  # TLS ends at a proxy
        ("http://LOCALHOST:8080", "localhost:8080", True),
        ("http://127.0.0.1:8081", "127.0.0.1:8080", False),  # another port: another origin
        ("http://evil.example", "127.0.0.1:8080", False),
        ("http://127.0.0.1:8080.evil.example", "127.0.0.1:8080", False),
        ("http://user@127.0.0.1:8080", "127.0.0.1:8080", False),
        ("http://127.0.0.1:8080/", "127.0.0.1:8080", False),
        ("ftp://127.0.0.1:8080", "127.0.0.1:8080", False),
        ("null", "127.0.0.1:8080", False),
        ("", "127.0.0.1:8080", False),
        (None, "127.0.0.1:8080", False),
    ],
)
def test_origin_must_name_the_host_the_request_went_to(origin, host, ok):
    assert ok == origin_matches(origin, host)


def test_a_token_belongs_to_one_confirmation_of_one_session_of_one_server():
    guard = Guard()
    one, two = guard.new_session(), guard.new_session()
    assert one != two and 43 == len(one)
    what = ("send", "holds/h-1", {"signal": "go"})

    def redeems(session, token, action="send", address="holds/h-1", fields=None):
        fields = {"signal": "go"} if fields is None else fields
        return None is guard.redeem(session, token, action, address, fields)

    assert not redeems(two, guard.token(one, *what))  # another session's
    assert not redeems(one, Guard().token(one, *what))  # another server's (or before a restart)
    assert not redeems(one, guard.token(one, *what)[:-1])
    assert not redeems(one, "") and not redeems(None, guard.token(one, *what))
    assert not redeems(one, "é" * 64) and not redeems(one, "1.2.3.4")
    # bound to the action, its address and its fields
    assert not redeems(one, guard.token(one, *what), action="drop", fields={})
    assert not redeems(one, guard.token(one, *what), address="holds/h-2")
    assert not redeems(one, guard.token(one, *what), fields={"signal": "go", "key": "k"})
    # once
    token = guard.token(one, *what)
    assert redeems(one, token)
    assert "used already" in guard.redeem(one, token, *what)
    assert redeems(one, guard.token(one, *what))  # a fresh confirmation acts again
    assert one == guard.session({guard.cookie: one})
    assert None is guard.session({guard.cookie: "short"}) is guard.session({})
    assert guard.cookie != Guard().cookie  # two inspectors on one host keep their own


def test_a_token_expires_after_an_hour_and_forgets_its_nonce_then():
    now = [1_800_000_000.0]
    guard = Guard(clock=lambda: now[0])
    session = guard.new_session()
    what = ("cancel", "holds/h-1", {})
    late, fresh = guard.token(session, *what), guard.token(session, *what)
    assert None is guard.redeem(session, fresh, *what)
    now[0] += TOKEN_SECONDS
    assert "over an hour old" in guard.redeem(session, late, *what)
    assert "over an hour old" in guard.redeem(session, fresh, *what)
    guard.redeem(session, guard.token(session, *what), *what)
    assert 1 == len(guard._redeemed)  # the expired nonce is forgotten, the new one kept


def test_the_refusals_say_why():
    s = GUARD.new_session()
    ok = dict(origin=ORIGIN, host="127.0.0.1:8080", fetch_site="same-origin", session=s)
    assert None is GUARD.refusal(**ok)
    assert None is GUARD.refusal(**dict(ok, fetch_site=None))  # an older browser says nothing
    assert "comes from http://evil.example, not from this inspector" in GUARD.refusal(
        **dict(ok, origin="http://evil.example")
    )
    assert "from a page that does not say where" in GUARD.refusal(**dict(ok, origin=None))
    assert "cross-site, not same-origin" in GUARD.refusal(**dict(ok, fetch_site="cross-site"))
    assert "no inspector session" in GUARD.refusal(**dict(ok, session=None))
    assert "token is missing or not for this action" in GUARD.redeem(s, None, "cancel", "a/b", {})


# -- read-only unless allowed ---------------------------------------------------------


async def test_a_read_only_inspector_offers_nothing_and_refuses_every_post(read_only, opened):
    status, _, body = await call(read_only, "/instance?address=holds%2Fh-1")
    assert 200 == status
    assert 'id="actions"' not in body and "/confirm" not in body
    assert '<span class="muted" id="mode">read-only</span>' in body
    before = record(opened, "holds/h-1")
    status, _, body = await call(read_only, "/confirm?action=cancel&address=holds%2Fh-1")
    assert 405 == status and "start it with --allow-actions" in body
    s = GUARD.new_session()
    for token in (tok(s, {"action": "cancel", "address": "holds/h-1"}), None):
        status, _, body = await post(
            read_only, {"action": "cancel", "address": "holds/h-1"}, session=s, token=token
        )
        assert 405 == status and "this inspector only reads" in body
    assert before == record(opened, "holds/h-1")


async def test_the_panel_offers_what_applies_to_the_status(app):
    def offered(body: str) -> list[str]:
        return re.findall(r'data-action="([^"]+)"', body)

    _, _, body = await call(app, "/instance?address=holds%2Fh-1")
    assert ["cancel", "cancel-compensate", "send"] == offered(body)
    assert '<span class="muted" id="mode">actions allowed</span>' in body
    assert 'class="fork"' not in body  # a live instance cannot be forked
    _, _, body = await call(app, "/instance?address=payments%2Fp-1")
    assert ["retry"] == offered(body)
    assert "To fork, pick a log entry below" in body
    fork = "/confirm?action=fork&amp;address=payments%2Fp-1&amp;from=1"
    assert f'<a class="fork" href="{fork}">fork after this…</a>' in body  # on each entry
    _, _, body = await call(app, "/instance?address=greet%2Fann")
    assert [] == offered(body) and 'class="fork"' not in body  # no entries to fork from


# -- the confirmation -----------------------------------------------------------------


async def test_the_confirmation_says_what_will_happen_and_holds_the_token(app, journal):
    status, headers, body = await call(app, "/confirm?action=cancel&address=holds%2Fh-1")
    assert 200 == status
    said = text_of(body)
    assert "Cancels holds/h-1 (now suspended)" in said
    assert "Its 1 saga compensation (book) do NOT run" in said
    assert (
        f"actors --journal {journal} cancel --force --reason=cancelled from the web "
        "inspector -- holds/h-1" in said
    )
    (cookie,) = headers["set-cookie"]
    session = re.match(rf"{GUARD.cookie}=([A-Za-z0-9_-]+);", cookie)[1]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    form = re.search(r'<form id="confirm" method="post" action="/act">(.*?)</form>', body)[1]
    first = re.search(r'name="token" value="([^"]+)"', form)[1]
    # The same session keeps its cookie; each confirmation has a token of its own,
    # for what it confirms.
    _, headers, body = await call(
        app,
        "/confirm?action=cancel-compensate&address=holds%2Fh-1",
        headers=[session_cookie(session)],
    )
    second = re.search(r'name="token" value="([^"]+)"', body)[1]
    assert "set-cookie" not in headers and first != second
    assert "not for this action" in GUARD.redeem(
        session, first, "cancel-compensate", "holds/h-1", {}
    )
    assert None is GUARD.redeem(session, first, "cancel", "holds/h-1", {})
    assert None is GUARD.redeem(session, second, "cancel-compensate", "holds/h-1", {})
    assert "run first, newest first: book; then it ends cancelled" in text_of(body)

    _, _, body = await call(
        app,
        "/confirm?"
        + urlencode(
            {"action": "send", "address": "holds/h-1", "signal": "go", "payload": '{"by": "ann"}'}
        ),
    )
    assert (
        'Puts the message \'go\' with payload {"by": "ann"} in the mailbox of holds/h-1'
        in text_of(body)
    )
    _, _, body = await call(app, "/confirm?action=retry&address=payments%2Fp-1")
    assert "as incarnation 2, with the same params and the input it had" in text_of(body)
    _, _, body = await call(app, "/confirm?action=fork&address=payments%2Fp-1&from=1")
    assert "it keeps 1 log entry (#1 step decline)" in text_of(body)
    assert "runs on after entry #1 with the current code" in text_of(body)


@pytest.mark.parametrize(
    "query, status, says",
    [
        (
            {"action": "retry", "address": "holds/h-1"},
            409,
            "cannot retry 'holds/h-1': it is suspended",
        ),
        (
            {"action": "cancel", "address": "greet/ann"},
            409,
            "cannot cancel 'greet/ann': it is completed",
        ),
        ({"action": "explode", "address": "holds/h-1"}, 400, "unknown action 'explode'"),
        ({"action": "cancel"}, 400, "address is missing"),
        ({"action": "cancel", "address": "holds/nope"}, 404, "no instance at 'holds/nope'"),
        ({"action": "send", "address": "holds/h-1"}, 400, "signal is missing"),
        (
            {"action": "send", "address": "holds/h-1", "signal": "go", "payload": "{nope"},
            400,
            "payload is not JSON",
        ),
        (
            {"action": "retry", "address": "payments/p-1", "input": "[1]"},
            400,
            "input must be a JSON object",
        ),
        (
            {"action": "fork", "address": "greet/ann", "from": "-1"},
            400,
            "from must be a log entry's number",
        ),
        (
            {"action": "cancel", "address": "holds/h-1", "force": "1"},
            400,
            "cancel takes no fields, not force",
        ),
    ],
)
async def test_what_cannot_be_confirmed_is_a_4xx_page(app, query, status, says):
    got, _, body = await call(app, "/confirm?" + urlencode(query))
    assert status == got, body
    assert says in html.unescape(body)


# -- a POST from elsewhere ------------------------------------------------------------


async def test_a_post_without_the_sessions_token_or_from_elsewhere_changes_nothing(
    app, opened, caplog
):
    caplog.set_level(logging.INFO, logger="actors.control")
    before = record(opened, "holds/h-1")
    s = GUARD.new_session()
    cancel = {"action": "cancel", "address": "holds/h-1"}
    refused = [
        await post(app, cancel, session=s),  # no token
        await post(app, cancel, session=s, token=tok(GUARD.new_session(), cancel)),  # another's
        await post(app, cancel, session=None, token=tok(s, cancel)),  # no session cookie
        await post(app, cancel, session=s, token=tok(s, cancel), origin="http://evil.example"),
        await post(app, cancel, session=s, token=tok(s, cancel), origin=None),
        await post(
            app, cancel, session=s, token=tok(s, cancel), extra=[("sec-fetch-site", "cross-site")]
        ),
    ]
    assert [403] * 6 == [status for status, _, _ in refused]
    assert "not from this inspector" in html.unescape(refused[3][2])
    assert before == record(opened, "holds/h-1")
    lines = [r for r in caplog.records if r.name == "actors.control"]
    assert 6 == len(lines) and all(r.levelno == logging.WARNING for r in lines)
    assert (
        "web inspector: cancel 'holds/h-1' from 127.0.0.1: refused: refused: the request "
        "comes from http://evil.example" in lines[3].getMessage()
    )
    # A page elsewhere that points its own name at this address (DNS rebinding)
    # is refused by its Host, whatever its Origin.
    status, _, _ = await call(
        app,
        "/act",
        method="POST",
        headers=[
            ("host", "evil.example:8080"),
            ("origin", "http://evil.example:8080"),
            ("content-type", "application/x-www-form-urlencoded"),
            session_cookie(s),
        ],
        body=urlencode(dict(cancel, token=tok(s, cancel))).encode(),
    )
    assert 400 == status
    assert before == record(opened, "holds/h-1")
    # What a refused POST names goes to the log quoted, on one line.
    await post(app, {"action": "x\nforged line", "address": "a\nb"})
    assert (
        "web inspector: 'x\\nforged line' 'a\\nb' from 127.0.0.1: refused: "
        in caplog.records[-1].getMessage()
    )
    # Not a form, or a form repeated: refused before anything is read.
    status, _, _ = await call(
        app, "/act", method="POST", headers=[("origin", ORIGIN)], body=b'{"action": "cancel"}'
    )
    assert 415 == status
    assert "'?' '?' from 127.0.0.1: refused: an action is a form" in caplog.records[-1].getMessage()
    status, _, _ = await post(
        app,
        {"action": "cancel", "address": "holds/h-1", "force": "1"},
        session=s,
        token=tok(s, {"action": "cancel", "address": "holds/h-1", "force": "1"}),
    )
    assert 400 == status
    assert (
        "cancel 'holds/h-1' from 127.0.0.1: refused: cancel takes no fields, not force"
        in caplog.records[-1].getMessage()
    )
    assert 405 == (await call(app, "/act"))[0]


# -- an action, done by the command line ----------------------------------------------


async def test_an_action_is_the_commands_and_is_audited(app, opened, caplog):
    caplog.set_level(logging.INFO, logger="actors.control")
    s = GUARD.new_session()
    send = {"action": "send", "address": "holds/h-1", "signal": "go", "payload": '{"by": "ann"}'}
    status, _, body = await post(app, send, session=s, token=tok(s, send))
    assert 200 == status, body
    said = text_of(body)
    assert "done" in said and "sent 'go' to holds/h-1 as message #1" in said
    status, _, mail = record(opened, "holds/h-1")
    assert "suspended" == status
    assert [("go", {"by": "ann"})] == [(m[0], m[1]) for _, m in mail]

    cancel = {"action": "cancel", "address": "holds/h-1"}
    status, _, body = await post(app, cancel, session=s, token=tok(s, cancel))
    assert 200 == status, body
    assert "cancelled holds/h-1 (suspended before)" in text_of(body)
    assert "cancelled" == record(opened, "holds/h-1")[0]

    # The command's refusal is the page's, with its exit code's answer.
    retry = {"action": "retry", "address": "greet/ann"}
    status, _, body = await post(app, retry, session=s, token=tok(s, retry))
    assert 409 == status
    assert "refused" in text_of(body) and "greet/ann" in text_of(body)
    assert "completed" == record(opened, "greet/ann")[0]

    lines = [r.getMessage() for r in caplog.records if r.name == "actors.control"]
    assert 3 == len(lines)
    assert lines[0].startswith(
        "web inspector: send 'holds/h-1' (payload='{\"by\": \"ann\"}' "
        "signal='go') from 127.0.0.1: done: sent 'go'"
    )
    assert lines[1].startswith("web inspector: cancel 'holds/h-1' from 127.0.0.1: done: cancelled")
    assert lines[2].startswith("web inspector: retry 'greet/ann' from 127.0.0.1: refused: ")
    actions_of = [r.actors_action for r in caplog.records if r.name == "actors.control"]
    assert ["send", "cancel", "retry"] == actions_of


async def test_a_fork_with_no_system_running_takes_the_code_from_the_inspectors_imports(
    opened, journal
):
    runner = Runner(str(journal), imports=("tests.tools.test_web_actions",))
    app = create_app(opened, source=str(journal), runner=runner, actions=ACTIONS, guard=GUARD)
    _, _, body = await call(app, "/confirm?action=fork&address=payments%2Fp-1&from=1")
    assert 'id="fork-to"' in body  # the same fork, to another address instead
    _, _, body = await call(
        app, "/confirm?action=fork&address=payments%2Fp-1&from=1&to=payments%2Fp-9"
    )
    said = text_of(body)
    assert "Makes a new incarnation of payments/p-9 from run 0 of payments/p-1 (now failed)" in said
    assert (
        "--import tests.tools.test_web_actions fork --from=1 --to=payments/p-9 -- payments/p-1"
        in said
    )
    assert 'id="fork-to"' not in body
    s = GUARD.new_session()
    fork = {"action": "fork", "address": "payments/p-1", "from": "1"}
    status, _, body = await post(app, fork, session=s, token=tok(s, fork))
    assert 200 == status, body
    with opened.reader() as r:
        row = r.instance(instance_id("payments/p-1"))
    assert (2, "running") == (row.record.incarnation, row.status)  # it runs when a system opens


async def test_drop_the_message_a_failed_run_was_handling(app, opened):
    _, _, body = await call(app, "/instance?address=poison%2Fx-1")
    assert (
        '<a class="drop" id="drop-handling" href="/confirm?action=drop&amp;address='
        'poison%2Fx-1&amp;message=1">drop it…</a>' in body
    )
    _, _, body = await call(app, "/confirm?action=drop&address=poison%2Fx-1&message=1")
    assert (
        "Removes message #1 ('go', payload {\"bad\": 1}) from the message its failed run "
        "was handling (now failed)" in text_of(body)
    )
    s = GUARD.new_session()
    drop = {"action": "drop", "address": "poison/x-1", "message": "1"}
    status, _, body = await post(app, drop, session=s, token=tok(s, drop))
    assert 200 == status, body
    _, _, body = await call(app, "/instance?address=poison%2Fx-1")
    assert "dropped: 1 message" in body


async def test_a_value_that_looks_like_an_option_is_not_one(app):
    s = GUARD.new_session()
    cancel = {"action": "cancel", "address": "-h"}
    status, _, body = await post(app, cancel, session=s, token=tok(s, cancel))
    assert 404 == status  # "-h" is an address here, and there is none
    assert "no instance at '-h'" in text_of(body)


async def test_a_command_that_does_not_answer_in_time_is_stopped(journal, opened):
    before = record(opened, "holds/h-1")
    slow = Runner(str(journal), timeout=0.01)  # not even Python starts in that time
    outcome = await slow.run(ACTIONS["cancel"], "holds/h-1", {})
    assert (124, "no answer in time") == (outcome.code, outcome.word)
    assert "gave no answer within 0.01 s and was stopped" in outcome.text
    assert before == record(opened, "holds/h-1")


# -- the command ----------------------------------------------------------------------


def _web(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "actors", "web", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_actions_need_an_lmdb_journal():
    done = _web("--allow-actions", "--journal", "postgresql://nobody@127.0.0.1:1/none")
    _out, err = done.communicate(timeout=60)
    assert 2 == done.returncode
    assert "--allow-actions needs an LMDB journal" in err and "drop --allow-actions" in err


@pytest.mark.slow  # a server in a subprocess, on real time
def test_the_command_with_actions_says_so_and_offers_them(journal):
    server = _web("--journal", str(journal), "--port", "0", "--allow-actions")
    try:
        first = server.stdout.readline()
        match = re.fullmatch(
            r"actors web: inspecting (.+) with actions allowed at "
            r"(http://127\.0\.0\.1:\d+/)\n",
            first,
        )
        assert match, first + server.stderr.read()
        assert server.stdout.readline().startswith(
            "actions: cancel, cancel-compensate, retry, fork, send, drop, resume-compensation, "
            "abandon-compensation; each is confirmed first and logged (actors.control)"
        )
        with urllib.request.urlopen(match[2] + "instance?address=holds%2Fh-1", timeout=10) as resp:
            assert 'data-action="cancel"' in resp.read().decode()
        evil = urllib.request.Request(
            match[2] + "act",
            data=b"action=cancel&address=holds%2Fh-1",
            method="POST",
            headers={
                "Origin": "http://evil.example",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(evil, timeout=10)
        assert 403 == refused.value.code
    finally:
        server.send_signal(signal.SIGINT)
        _out, err = server.communicate(timeout=30)
    assert 0 == server.returncode, err
    # The audit line, on stderr: nothing configured logging in the command.
    assert (
        "actors.control WARNING web inspector: cancel 'holds/h-1' from 127.0.0.1: refused: "
        "refused: the request comes from http://evil.example" in err
    )


# -- bounds: every refusal audited, large payloads, one token one action -------------


def _audited(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "actors.control"]


@pytest.mark.parametrize(
    "form, says",
    [
        ({"action": "cancel", "address": "holds/h-1\x00x"}, "address holds a control character"),
        ({"action": "send", "address": "holds/h-1", "signal": "g\x00o"}, "signal holds a control"),
        (
            {"action": "send", "address": "holds/h-1", "signal": "go", "key": "k\x00"},
            "key holds a control character",
        ),
        (
            {"action": "send", "address": "holds/h-1", "signal": "go", "payload": "[" * 100_000},
            "payload nests too deep to read",
        ),
    ],
    ids=["nul-address", "nul-signal", "nul-key", "deep-payload"],
)
async def test_a_malformed_action_is_refused_with_an_audit_line(app, opened, caplog, form, says):
    caplog.set_level(logging.INFO, logger="actors.control")
    before = record(opened, "holds/h-1")
    s = GUARD.new_session()
    status, _, body = await post(app, form, session=s, token=tok(s, form))
    assert (400, True) == (status, says in text_of(body))
    (line,) = _audited(caplog)
    assert "refused" in line and says in line and "\x00" not in line
    assert before == record(opened, "holds/h-1")


async def test_a_payload_of_a_mebibyte_goes_to_the_command_on_its_stdin(app, opened, caplog):
    # One argv string may be at most 128 KiB: the payload rides on stdin.
    caplog.set_level(logging.INFO, logger="actors.control")
    big = "x" * 1_000_000
    send = {"action": "send", "address": "holds/h-1", "signal": "go", "payload": f'"{big}"'}
    s = GUARD.new_session()
    status, _, body = await post(app, send, session=s, token=tok(s, send))
    assert 200 == status, text_of(body)[-500:]
    _, _, mail = record(opened, "holds/h-1")
    assert [("go", big)] == [(m[0], m[1]) for _, m in mail]
    (line,) = _audited(caplog)
    assert "(1000002 bytes)" in line and len(line) < 1000  # the audit line names its size


async def test_a_token_does_one_confirmed_action_once(app, opened, caplog):
    caplog.set_level(logging.INFO, logger="actors.control")
    _, headers, body = await call(
        app, "/confirm?" + urlencode({"action": "send", "address": "holds/h-1", "signal": "go"})
    )
    session = re.match(rf"{GUARD.cookie}=([A-Za-z0-9_-]+);", headers["set-cookie"][0])[1]
    token = re.search(r'name="token" value="([^"]+)"', body)[1]
    # The send confirmation's token does not drop, nor cancel, nor send elsewhere.
    for form in (
        {"action": "drop", "address": "holds/h-1", "message": "1"},
        {"action": "cancel", "address": "holds/h-1"},
        {"action": "send", "address": "payments/p-1", "signal": "go"},
        {"action": "send", "address": "holds/h-1", "signal": "stop"},
    ):
        status, _, body = await post(app, form, session=session, token=token)
        assert (form["action"], 403) == (form["action"], status)
        assert "not for this action" in text_of(body)
    before = record(opened, "holds/h-1")
    send = {"action": "send", "address": "holds/h-1", "signal": "go"}
    assert 200 == (await post(app, send, session=session, token=token))[0]
    status, _, body = await post(app, send, session=session, token=token)  # again
    assert 403 == status and "used already" in text_of(body)
    _, _, mail = record(opened, "holds/h-1")
    assert 1 == len(mail) - len(before[2])  # one message, from the one use
    lines = _audited(caplog)
    assert 6 == len(lines) and 5 == sum("refused" in line for line in lines)


class _HeldRunner(Runner):
    """A runner whose commands wait until released (to hold slots)."""

    def __init__(self, journal: str, release: trio.Event) -> None:
        super().__init__(journal)
        object.__setattr__(self, "release", release)

    async def run(self, action, address, fields):
        await self.release.wait()
        return await super().run(action, address, fields)


async def test_at_most_a_few_actions_run_at_once(opened, journal, caplog):
    caplog.set_level(logging.INFO, logger="actors.control")
    release = trio.Event()
    app = create_app(
        opened,
        source=str(journal),
        runner=_HeldRunner(str(journal), release),
        actions=ACTIONS,
        guard=GUARD,
        max_actions=2,
    )
    s = GUARD.new_session()
    send = {"action": "send", "address": "holds/h-1", "signal": "go"}
    statuses: list[int] = []

    async def one() -> None:
        statuses.append((await post(app, send, session=s, token=tok(s, send)))[0])

    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(one)
        await trio.testing.wait_all_tasks_blocked()
        status, _, body = await post(app, send, session=s, token=tok(s, send))
        assert 429 == status and "2 actions are running already" in text_of(body)
        release.set()
    assert [200, 200] == statuses
    assert 3 == len(_audited(caplog))


async def test_a_proxys_user_header_is_recorded_only_when_trusted(opened, journal, caplog):
    caplog.set_level(logging.INFO, logger="actors.control")
    proxy = [("x-forwarded-user", "mallory")]
    for trusted in (False, True):
        app = create_app(
            opened,
            source=str(journal),
            runner=Runner(str(journal)),
            actions=ACTIONS,
            guard=GUARD,
            trust_proxy=trusted,
        )
        await post(app, {"action": "cancel", "address": "holds/h-1"}, extra=proxy)
    untrusted, trusted_line = _audited(caplog)
    assert "mallory" not in untrusted and "from 127.0.0.1: refused" in untrusted
    assert "from 127.0.0.1 (x-forwarded-user 'mallory'): refused" in trusted_line


async def test_an_acting_inspectors_problem_pages_do_not_say_read_only(app):
    for target in ("/nowhere", "/instance?address=nobody%2Fx"):
        status, _, body = await call(app, target)
        assert 404 == status
        assert '<span class="muted" id="mode">actions allowed</span>' in body
        assert "read-only" not in body
    status, _, body = await post(app, {"action": "cancel", "address": "holds/h-1"})
    assert 403 == status and "read-only" not in body


def test_actions_on_a_network_address_need_the_explicit_flag(journal):
    from tests.cli_runner import run_in_process

    done = run_in_process(
        ["--journal", str(journal), "web", "--host", "0.0.0.0", "--allow-actions", "--port", "0"]
    )
    assert 2 == done.returncode
    assert "--i-understand-anyone-can-act" in done.stderr
    assert "authenticating proxy" in done.stderr
