"""The inspector reads only what it shows: an instance's unread mail a page at
a time, a long value cut with a link to the page that shows it whole, the
list from one listing shared by every request, and a poll of an unchanged
page answered 304 from the journal's change marker.

The app is called directly (ASGI), over a journal that a system in this test
writes (the inspector reads the same `LMDBJournal`, as it reads one beside a
running system). The timing of big pages is measured by ``python -m bench
inspector``, not here.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import quote

import pytest
import trio

pytest.importorskip("starlette", reason="install the 'web' extra")

import actors
from actors import Signal, process
from actors._tools._web import _index, create_app
from actors._tools._web._actions import ACTIONS, Runner
from storage import LMDBJournal
from storage._lmdb._reader import _LMDBReader
from tests.runtime_helpers import wait_status
from tests.tools.test_web import call, rows

note, go = Signal("note"), Signal("go")

MESSAGES = 45  # three pages of 20
BIG = 60_000  # characters of each message's text: far past what a page shows of a value
MARK = "<b>bold</b>"  # markup in the payloads: shown as text, never as markup


def label(text: str) -> str:
    return text


@process("inbox/:id")
async def inbox(ctx, id, *, blurb=""):
    await ctx.step(label, "first")
    await ctx.step(label, "second")
    await ctx.wait(go)
    return "x" * BIG


def payload(n: int) -> dict:
    return {"n": n, "text": f"message-{n:03d}{MARK}" + "y" * BIG}


async def fill(system: actors.ActorSystem) -> None:
    handle = await system.start(inbox, "i-1", blurb=MARK + "z" * BIG)
    await wait_status(handle, "suspended")
    for n in range(1, MESSAGES + 1):
        await system.send("inbox/i-1", note, payload(n))


@pytest.fixture
async def live(tmp_path: Path):
    """A system on an LMDB journal (async durability: quick to fill), its
    journal, and an inspector over that journal polling every 0 s."""
    journal = LMDBJournal(tmp_path / "journal", durability="async")
    async with actors.open_system(journal, processes=[inbox]) as system:
        await fill(system)
        yield system, journal, create_app(journal, source="test", poll=0.0)


async def settled(journal: LMDBJournal, before: int | None) -> None:
    """Until a reader sees a commit after the snapshot ``before``."""
    with trio.fail_after(10):
        while True:
            with journal.reader() as r:
                if r.change_marker() != before:
                    return
            await trio.sleep(0.001)


async def until_shown(app, page: str, text: str) -> str:
    """The page once it shows ``text`` (a commit may be seen a little after
    the call that made it returns, with async durability)."""
    with trio.fail_after(10):
        while text not in (body := (await call(app, page))[2]):
            await trio.sleep(0.001)
    return body


def marker(journal: LMDBJournal) -> int | None:
    with journal.reader() as r:
        return r.change_marker()


def seqs(body: str) -> list[int]:
    """The message numbers in the mailbox table, in order."""
    table = body[body.index('<table id="mailbox">') :]
    table = table[: table.index("</table>")]
    return [int(n) for n in re.findall(r"<tr><td>(\d+)</td>", table)]


PAGE = "/instance?address=" + quote("inbox/i-1", safe="")


# -- the mailbox, a page at a time ------------------------------------------------------


async def test_the_mailbox_is_read_and_shown_a_page_at_a_time(live, monkeypatch):
    _, _journal, app = live

    def whole_mailbox(self, iid):
        raise AssertionError("the page read the whole mailbox")

    monkeypatch.setattr(_LMDBReader, "mailbox", whole_mailbox)
    status, _, body = await call(app, PAGE)
    assert 200 == status
    assert f"Mailbox: {MESSAGES} unread messages" in body
    assert list(range(1, 21)) == seqs(body)
    assert "message-020" in body and "message-021" not in body
    # 20 previews of a few KB each: not the 45 x 60 KB the mailbox holds.
    assert len(body) < 200_000 < MESSAGES * BIG
    assert '<span id="mail-pages">page 1 of 3 of the unread mail</span>' in body
    assert f'href="{PAGE}&amp;mailpage=2">newer →</a>' in body

    _, _, body = await call(app, PAGE + "&mailpage=2")
    assert list(range(21, 41)) == seqs(body)
    assert f'href="{PAGE}">← older</a>' in body
    _, _, body = await call(app, PAGE + "&mailpage=3")
    assert list(range(41, 46)) == seqs(body)
    assert "newer →" not in body
    _, _, body = await call(app, PAGE + "&mailpage=9")
    assert '<table id="mailbox">' not in body and "no messages on this page" in body


async def test_the_log_pager_keeps_the_mail_page_and_the_mail_pager_the_log_page(live):
    _, _, app = live
    _, _, body = await call(app, PAGE + "&mailpage=2&per=1")
    # Each pager's links keep the other's page.
    assert f'href="{PAGE}&amp;logpage=2&amp;mailpage=2&amp;per=1">later →</a>' in body
    assert f'href="{PAGE}&amp;per=1">← older</a>' in body


# -- a value cut, and the page that shows it whole -------------------------------------


async def test_a_long_message_is_cut_with_a_link_to_the_whole_of_it(live):
    _, _, app = live
    _, _, body = await call(app, PAGE + "&mailpage=2")
    links = re.findall(r'<a class="whole" href="([^"]*)">show it whole</a>', body)
    mail = [html.unescape(link) for link in links if "part=mail" in link]
    assert 20 == len(mail)
    # The 21st message is the first of page 2: position 20 of the unread mail.
    assert "/value?address=inbox%2Fi-1&part=mail&seq=21&at=20" == mail[0]
    status, _, whole = await call(app, mail[0])
    assert 200 == status
    text = html.unescape(whole[whole.index('<pre class="value whole" id="value">') :])
    assert payload(21)["text"] in text  # all of it
    assert "<b>bold</b>" not in whole and "&lt;b&gt;bold&lt;/b&gt;" in whole  # escaped
    assert "Message #21" in whole


async def test_the_input_and_the_result_are_cut_with_links_too(live):
    system, _journal, app = live
    _, _, body = await call(app, PAGE)
    assert "&lt;b&gt;bold&lt;/b&gt;zzz" in body and "z" * (BIG // 2) not in body
    status, _, whole = await call(app, "/value?address=inbox%2Fi-1&part=input")
    assert 200 == status and "z" * BIG in whole and "&lt;b&gt;bold" in whole

    await system.send("inbox/i-1", go, None)
    assert "x" * BIG == await system.get("inbox/i-1").result()
    body = await until_shown(app, PAGE, '<span class="badge completed">completed</span>')
    assert f'href="{html.escape("/value?address=inbox%2Fi-1&part=result")}"' in body
    assert "x" * BIG not in body
    _, _, whole = await call(app, "/value?address=inbox%2Fi-1&part=result")
    assert "x" * BIG in whole


async def test_a_value_no_longer_there_or_a_bad_value_query_is_a_4xx_page(live):
    _, _, app = live
    status, _, body = await call(app, "/value?address=inbox%2Fi-1&part=mail&seq=2&at=0")
    assert 404 == status
    assert "message #2 of &#x27;inbox/i-1&#x27; is not unread at position 0" in body
    status, _, body = await call(app, "/value?address=nobody%2Fhere&part=input")
    assert 404 == status and "no instance at" in body
    for query, says in (
        ("address=inbox%2Fi-1&part=secrets", "part must be one of input, result"),
        ("address=inbox%2Fi-1&part=mail&seq=1", "the mail part needs at"),
        ("address=inbox%2Fi-1&part=input&seq=1", "the input part takes no seq"),
        ("address=inbox%2Fi-1&part=log&seq=x", "seq must be a whole number from 1"),
        ("part=input", "address is missing"),
    ):
        status, _, body = await call(app, "/value?" + query)
        assert (400, True) == (status, says in html.unescape(body)), query


# -- polls of an unchanged page ----------------------------------------------------------


async def test_a_poll_of_an_unchanged_page_is_answered_304_until_the_journal_changes(live):
    system, journal, app = live
    for page in (PAGE, "/"):
        status, headers, body = await call(app, page)
        tag = headers["etag"]
        # The page hands the polling script its validator.
        assert f'<meta name="live-etag" content="{html.escape(tag)}">' in body
        polled = page + ("&" if "?" in page else "?") + "partial=1"
        status, headers, body = await call_with(app, polled, tag)
        assert (304, "", tag) == (status, body, headers["etag"])

    before = marker(journal)
    await system.send("inbox/i-1", note, {"n": 46})
    await settled(journal, before)
    status, headers, body = await call_with(app, PAGE + "&partial=1", tag_of(await call(app, PAGE)))
    assert 304 == status  # the fresh validator matches at once
    status, headers, body = await call_with(app, PAGE + "&partial=1", tag)
    assert 200 == status and f"Mailbox: {MESSAGES + 1} unread messages" in body
    assert tag != headers["etag"]
    # Another inspector's validator (another start) is never taken for this one's.
    other = create_app(journal, source="test", poll=0.0)
    status, _, _ = await call_with(other, PAGE + "&partial=1", headers["etag"])
    assert 200 == status


def tag_of(answer: tuple[int, dict, str]) -> str:
    return answer[1]["etag"]


async def call_with(app, target: str, tag: str) -> tuple[int, dict, str]:
    """`call` with an If-None-Match header."""
    return await call(app, target, headers=[(b"if-none-match", tag.encode())])


# -- the list: one listing for every request -------------------------------------------

OTHER_PAGES = ("/?per=2&page=2", "/?status=suspended&prefix=inbox/i-1")


async def test_the_list_reads_one_listing_for_all_requests_and_pages_until_a_change(
    live, monkeypatch
):
    system, journal, app = live
    listings: list[int] = []
    listing = _LMDBReader.listing

    def counted(self, *args, **kwargs):
        listings.append(1)
        return listing(self, *args, **kwargs)

    def every_record(self, *args, **kwargs):
        raise AssertionError("the list built every record")

    monkeypatch.setattr(_LMDBReader, "listing", counted)
    monkeypatch.setattr(_LMDBReader, "instances", every_record)
    before = marker(journal)
    for n in range(2, 7):
        await wait_status(await system.start(inbox, f"i-{n}"), "suspended")
    await settled(journal, before)

    # The running system may still commit (a page read across a commit has
    # no validator): the requests again until none came between them.
    with trio.fail_after(10):
        while True:
            quiet = marker(journal)
            status, headers, body = await call(app, "/?per=2")
            read = len(listings)
            pages = [rows((await call(app, target))[2]) for target in OTHER_PAGES]
            # Other pages, filters, tabs and polls: the same listing.
            polls = [
                (await call_with(app, "/?per=2&partial=1", headers.get("etag", "-")))[0]
                for _ in range(8)
            ]
            if marker(journal) == quiet:
                break
            await trio.sleep(0.01)
    assert 200 == status
    assert ["inbox/i-6", "inbox/i-5"] == rows(body)
    assert "6 matching · page 1 of 3" in body
    assert [["inbox/i-4", "inbox/i-3"], ["inbox/i-1"]] == pages
    assert [304] * 8 == polls
    assert read == len(listings)  # none read again

    await wait_status(await system.start(inbox, "i-7"), "suspended")
    await until_shown(app, "/?per=2&partial=1", 'data-address="inbox/i-7"')
    status, _, body = await call_with(app, "/?per=2&partial=1", headers["etag"])
    assert 200 == status and ["inbox/i-7", "inbox/i-6"] == rows(body)
    assert "7 matching · page 1 of 4" in body
    assert len(listings) > read

    # A record that changed is read again (not taken for the one read before).
    await system.send("inbox/i-3", go, None)
    body = await until_shown(app, "/?per=2&partial=1", 'data-address="inbox/i-3"')
    assert ["inbox/i-3", "inbox/i-7"] == rows(body)
    assert '<span class="badge completed">completed</span>' in body
    assert '<span class="badge all">all <b>7</b></span>' in body


async def test_a_drop_of_a_message_past_the_first_page_is_confirmed_with_its_payload(live):
    _, journal, _ = live
    app = create_app(journal, source="test", runner=Runner(str(journal.path)), actions=ACTIONS)
    _, _, body = await call(app, PAGE + "&mailpage=2")
    there = "/confirm?action=drop&address=inbox%2Fi-1&message=25"
    assert f'<a class="drop" href="{html.escape(there)}">drop…</a>' in body
    status, _, body = await call(app, there)
    assert 200 == status
    assert "Removes message #25 (&#x27;note&#x27;, payload {&quot;n&quot;: 25" in body


async def test_a_changed_journal_is_listed_again_after_one_poll_interval_at_most(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(_index.time, "monotonic", lambda: clock[0])
    reads: list[int] = []

    async def read(fn):
        marker = len(reads) + 1
        reads.append(marker)

        class Snapshot:
            def change_marker(self):
                return marker

            def listing(self, memo):
                clock[0] += cost  # the read takes this long
                return []

        return fn(Snapshot())

    cost = 0.5  # an expensive listing: held for the whole poll interval
    cache = _index.ListCache(poll=2.0)
    first = await cache.get(1, read)
    assert first is await cache.get(1, read)  # unchanged
    clock[0] += 1.0
    assert first is await cache.get(2, read)  # changed, but read 1.5 s ago
    clock[0] += 0.5
    second = await cache.get(2, read)  # 2 s: read again
    assert (2, [1, 2]) == (second.marker, reads)

    cost = 0.01  # a cheap one: held ten times its cost only
    cache = _index.ListCache(poll=2.0)
    reads.clear()
    first = await cache.get(1, read)
    clock[0] += 0.05
    assert first is await cache.get(2, read)
    clock[0] += 0.05
    assert first is not await cache.get(2, read)
    assert [1, 2] == reads
    # Without a marker (PostgreSQL), each request reads its own.
    assert 3 == (await cache.get(None, read)).marker
