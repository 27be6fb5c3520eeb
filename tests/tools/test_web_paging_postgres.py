"""The inspector's paging over a PostgreSQL journal (test_web_paging.py is
the LMDB side): a page of unread mail is read with LIMIT and OFFSET, and,
the journal giving no change marker, pages carry no validator and every
poll renders its page again."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="install the 'web' extra")
pytest.importorskip("psycopg", reason="install the 'postgres' extra")

import actors
from actors._tools._web import create_app
from storage import PostgresJournal
from storage._postgres._reader import _PostgresReader
from tests.pg import fresh_schema
from tests.tools.test_web import call
from tests.tools.test_web_paging import MESSAGES, PAGE, call_with, fill, inbox, seqs


async def test_on_postgresql_the_mailbox_is_read_a_page_at_a_time_and_polls_render_again(
    request, monkeypatch
):
    dsn, name = fresh_schema(request)
    async with actors.open_system(PostgresJournal(dsn, schema=name), processes=[inbox]) as system:
        await fill(system)
        async with PostgresJournal(dsn, schema=name, readonly=True) as journal:
            app = create_app(journal, source="test", poll=1.0)

            def whole_mailbox(self, iid):
                raise AssertionError("the page read the whole mailbox")

            monkeypatch.setattr(_PostgresReader, "mailbox", whole_mailbox)
            status, headers, body = await call(app, PAGE + "&mailpage=3")
            assert 200 == status
            assert f"Mailbox: {MESSAGES} unread messages" in body
            assert list(range(41, 46)) == seqs(body)
            # No change marker: no validator, and each poll renders its page.
            assert "etag" not in headers and 'name="live-etag"' not in body
            status, _, _ = await call_with(app, PAGE + "&partial=1", '"anything"')
            assert 200 == status
