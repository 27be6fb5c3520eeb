"""The inspector as an ASGI application (starlette) over an open journal.

Each request reads the journal in a worker thread, so a long scan never
stalls the server, and renders with `_pages`; it reads only what it shows.
The list reads a page of records over the shared `_index.ListCache` (one scan
of the journal per poll interval at most, however many tabs poll); an
instance's page reads one page of its unread mail; a value cut on a page is
read whole by the value page (`_values`). A page carries an ETag from the
journal's change marker (`_index.etag`): a poll that sends it back while
nothing changed is answered 304 after reading the marker alone. The app
itself never writes: given a read-only `LMDBJournal` or `PostgresJournal`
it works beside the systems that run on the journal in
other processes (a PostgreSQL reader's snapshot is its transaction's, so
each request, and each poll, sees what was committed before it).

With a `Runner` (``actors web --allow-actions``) it also offers actions
(`_actions`): an instance's page links to a confirmation page (GET, which
changes nothing) that says what will happen and holds the one form that
POSTs to ``/act``, with the session's token (`_guard`); ``/act`` refuses
(403) a POST whose Origin is not this inspector or whose token is not the
session's, then runs the command line's command and shows what it did.

Answers: 200 pages; 304 to a poll of an unchanged page; 400 for a query it
cannot act on (unknown status, a page that is not a number, an unknown or
repeated parameter, a value page's unknown part), or for a
Host header that is neither an IP address nor a name it was given (so a
page elsewhere cannot read it through DNS rebinding); 403 for a POST
refused by `_guard`; 404 for an unknown address or path; 405 for anything
but GET and HEAD (and the actions' POST, when they are allowed); 409 for
an action the instance's status, or the command, refuses; 500 with a page
naming the record when a record does not decode; 503 while the journal's
server cannot be reached (the next request connects again). Every response carries a
Content-Security-Policy that allows no inline script and nothing from
elsewhere.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from storage import (
    CorruptRecord,
    InstanceRow,
    Journal,
    JournalCorrupt,
    JournalUnavailable,
    Reader,
    instance_id,
    lenient_decoding,
)
from storage._reader import Listed

from .._cli._describe import describe
from .._cli._errors import CLIError
from .._cli._inspect import list_item
from ._action_pages import action_panel, confirm_body, outcome_body
from ._actions import Action, BadAction, Runner, audit, check_address, check_fields
from ._assets import ASSETS
from ._guard import Guard
from ._index import ListCache, etag
from ._list_page import list_filters, list_fragment
from ._middleware import (
    LOCAL_HOSTS as LOCAL_HOSTS,
    HostCheck,
    SecurityHeaders,
    host_allowed as host_allowed,
)
from ._pages import instance_fragment, layout, problem_page, value_body
from ._query import MAIL_PER_PAGE, BadQuery, InstanceQuery, parse_instance, parse_list, parse_value
from ._requests import Refused, client_of, form_of, params_of, single
from ._values import TITLES, ValueGone, read_value

__all__ = ["LOCAL_HOSTS", "create_app", "host_allowed"]

T = TypeVar("T")


MAX_ACTIONS = 4  # actions' commands running at once (each is a Python process)

# HTTP status of the page that shows an action's outcome, by the CLI's exit code.
_ANSWER = {0: 200, 1: 409, 2: 400, 3: 404, 4: 409, 5: 500, 124: 504}


class _NotFound(LookupError):
    """No instance at the address asked for."""


def create_app(
    journal: Journal,
    *,
    source: str,
    poll: float = 1.0,
    hosts: Sequence[str] = LOCAL_HOSTS,
    runner: Runner | None = None,
    actions: Mapping[str, Action] | None = None,
    guard: Guard | None = None,
    trust_proxy: bool = False,
    max_actions: int = MAX_ACTIONS,
) -> ASGIApp:
    """The inspector's ASGI app over ``journal`` (open; the caller closes it).

    Args:
        journal: an open journal whose `reader` may be used from a worker thread
            (`LMDBJournal` or `PostgresJournal`, read-only or not).
        source: how pages name the journal (its path, or its description).
        poll: seconds between the pages' live updates.
        hosts: the Host header names answered besides IP addresses (see
            `host_allowed`).
        runner: runs the actions' commands on this journal; None (the
            default) serves a read-only inspector, which offers no action
            and refuses every POST.
        actions: the actions offered (with ``runner``), by name.
        guard: the session tokens' secret (a fresh one by default).
        trust_proxy: record what ``X-Forwarded-User`` and ``X-Forwarded-For``
            say in audit lines (only behind a proxy that sets them; anyone
            can send them otherwise).
        max_actions: how many actions' commands may run at once; a POST
            past that is refused (429), not queued.
    """
    limiter = trio.CapacityLimiter(2)
    allowed: Mapping[str, Action] = (actions or {}) if runner is not None else {}
    guard = guard or Guard()
    mode = "actions allowed" if allowed else "read-only"
    running = trio.Semaphore(max_actions)
    listings = ListCache(poll)
    salt = secrets.token_hex(4)  # another start's validators never match this one's

    async def read(fn: Callable[[Reader], T]) -> T:
        def run() -> T:
            with lenient_decoding(), journal.reader() as r:
                return fn(r)

        return await trio.to_thread.run_sync(run, limiter=limiter)

    def unchanged(request: Request, marker: int | None) -> Response | None:
        """304 when the request's validator is the page's at ``marker`` now."""
        tag = etag(marker, salt)
        if tag is None or request.headers.get("if-none-match") != tag:
            return None
        return Response(status_code=304, headers={"etag": tag})

    def answer(body: str, tag: str | None) -> Response:
        return HTMLResponse(body, headers=None if tag is None else {"etag": tag})

    async def instances(request: Request) -> Response:
        query = parse_list(params_of(request))
        marker = await read(lambda r: r.change_marker())
        same = unchanged(request, marker)
        if same is not None:
            return same
        listing = await listings.get(marker, read)
        rows, processes = listing.matching(query.status, query.process, query.prefix)
        shown = rows[(query.page - 1) * query.per : query.page * query.per]
        items, now = await read(lambda r: (_page_items(r, shown), r.change_marker()))
        fragment = list_fragment(query, items, len(rows), listing.counts)
        # A validator only for a page wholly of the journal's present state.
        tag = etag(now, salt) if listing.marker == now else None
        if query.partial:
            return answer(fragment, tag)
        filters = list_filters(query, processes)
        page = layout("instances", source, filters, live=fragment, poll=poll, mode=mode, etag=tag)
        return answer(page, tag)

    async def instance(request: Request) -> Response:
        query = parse_instance(params_of(request))

        def look(r: Reader) -> tuple[str | None, dict[str, Any] | None]:
            tag = etag(r.change_marker(), salt)
            if tag is not None and request.headers.get("if-none-match") == tag:
                return tag, None  # unchanged: nothing else is read
            return tag, _describe(r, query)

        tag, doc = await read(look)
        if doc is None:
            return Response(status_code=304, headers={"etag": tag or ""})
        fragment = instance_fragment(doc, query, allowed)
        if query.partial:
            return answer(fragment, tag)
        # The panel is outside the polled part, so what is typed in it stays.
        panel = action_panel(doc, allowed) if allowed else ""
        page = layout(query.address, source, panel, live=fragment, poll=poll, mode=mode, etag=tag)
        return answer(page, tag)

    async def value(request: Request) -> Response:
        query = parse_value(params_of(request))

        def look(r: Reader) -> Any:
            row = _row(r, query.address)
            try:
                return read_value(r, row, query)
            except ValueGone as exc:
                raise _NotFound(str(exc)) from None

        found = await read(look)
        title = TITLES[query.part].format(seq=query.seq, at=query.at)
        body = value_body(query.address, title, found)
        return HTMLResponse(
            layout(f"{title}: {query.address}", source, body, live=None, poll=0, mode=mode)
        )

    def wanted(params: Mapping[str, str]) -> tuple[Action, str, dict[str, str]]:
        """The action, address and fields a request names; `Refused` if not offered."""
        if not allowed:
            raise Refused(
                405, "this inspector only reads: start it with --allow-actions to take actions"
            )
        rest = dict(params)
        name, address = rest.pop("action", ""), rest.pop("address", "")
        action = allowed.get(name)
        if action is None:
            raise Refused(400, f"unknown action {name!r}; one of {', '.join(allowed)}")
        try:
            return action, check_address(address), check_fields(action, rest)
        except BadAction as exc:
            raise Refused(400, str(exc)) from None

    async def confirm(request: Request) -> Response:
        action, address, fields = wanted(single(params_of(request)))
        # (All its unread mail: a drop's confirmation names the message it drops.)
        doc = await read(lambda r: _describe(r, InstanceQuery(address=address), whole=True))
        if doc["status"] not in action.statuses:
            raise Refused(
                409,
                f"cannot {action.title.lower()} {address!r}: it is "
                f"{doc['status']}; the page of the instance shows what applies",
            )
        assert runner is not None  # (actions are offered only with one)
        session = guard.session(request.cookies)
        fresh = session is None
        session = session or guard.new_session()
        body = confirm_body(
            action,
            address,
            action.says(doc, fields),
            fields,
            guard.token(session, action.name, address, fields),
            runner.argv(action, address, fields),
        )
        page = layout(f"{action.title}: {address}", source, body, live=None, poll=0, mode=mode)
        response = HTMLResponse(page)
        if fresh:
            response.set_cookie(guard.cookie, session, httponly=True, samesite="strict", path="/")
        return response

    async def act(request: Request) -> Response:
        client = client_of(request, trust_proxy)
        form: dict[str, str] = {}
        try:  # every POST refused is an audit line too
            if not allowed:
                wanted({})  # refused: this inspector only reads
            form = single(await form_of(request))
            token = form.pop("token", None)
            session = guard.session(request.cookies)
            why = guard.refusal(
                origin=request.headers.get("origin"),
                host=request.headers.get("host", ""),
                fetch_site=request.headers.get("sec-fetch-site"),
                session=session,
            )
            if why is not None:
                raise Refused(403, why)
            action, address, fields = wanted(form)
            why = guard.redeem(session, token, action.name, address, fields)
            if why is not None:
                raise Refused(403, why)
            try:
                running.acquire_nowait()
            except trio.WouldBlock:
                raise Refused(
                    429,
                    f"refused: {max_actions} actions are running already; wait for one to "
                    "end, then open the instance's page again and confirm from there",
                ) from None
        except Refused as exc:
            audit(
                form.get("action", "?"), form.get("address", "?"), {}, client, "refused", str(exc)
            )
            raise
        assert runner is not None
        try:
            outcome = await runner.run(action, address, fields)
        except BaseException as exc:
            audit(action.name, address, fields, client, "error", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            running.release()
        audit(action.name, address, fields, client, outcome.word, outcome.text)
        then = fields.get("to", address) if outcome.code == 0 else address
        body = outcome_body(action, address, outcome, then)
        page = layout(f"{action.title}: {address}", source, body, live=None, poll=0, mode=mode)
        return HTMLResponse(page, status_code=_ANSWER.get(outcome.code, 500))

    async def asset(request: Request) -> Response:
        found = ASSETS.get(request.path_params["name"])
        if found is None:
            raise HTTPException(404, f"no file {request.url.path!r} here")
        media_type, body = found
        return Response(body, media_type=media_type)

    def problem(status: int, title: str, message: str) -> HTMLResponse:
        page = problem_page(status, title, message, source, mode=mode)
        return HTMLResponse(page, status_code=status)

    async def on_bad_query(request: Request, exc: Exception) -> Response:
        return problem(400, "bad query", str(exc))

    async def on_not_found(request: Request, exc: Exception) -> Response:
        return problem(404, "not found", str(exc))

    async def on_refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return problem(exc.status, "refused", str(exc))

    async def on_corrupt(request: Request, exc: Exception) -> Response:
        return problem(500, "corrupt record", str(exc))

    async def on_unavailable(request: Request, exc: Exception) -> Response:
        return problem(503, "journal unavailable", str(exc))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        detail = exc.detail
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"nothing at {request.url.path!r}; the list of instances is at /"
        if exc.status_code == 405:
            detail = (
                "this inspector only reads: use GET"
                if not allowed
                else "use GET; actions are POSTed from their confirmation page"
            )
        return problem(
            exc.status_code, "not found" if exc.status_code == 404 else "refused", detail
        )

    async def on_error(request: Request, exc: Exception) -> Response:
        return problem(500, "server error", f"{type(exc).__name__}: {exc}")

    app = Starlette(
        routes=[
            Route("/", instances, methods=["GET"]),
            Route("/instance", instance, methods=["GET"]),
            Route("/value", value, methods=["GET"]),
            Route("/confirm", confirm, methods=["GET"]),
            Route("/act", act, methods=["POST"]),
            Route("/static/{name}", asset, methods=["GET"]),
        ],
        exception_handlers={
            BadQuery: on_bad_query,
            _NotFound: on_not_found,
            Refused: on_refused,
            JournalCorrupt: on_corrupt,
            JournalUnavailable: on_unavailable,
            HTTPException: on_http,
            Exception: on_error,
        },
        middleware=[Middleware(HostCheck, names=hosts)],
    )
    return SecurityHeaders(app)


def _page_items(r: Reader, rows: list[Listed]) -> list[dict[str, Any]]:
    """The list's rows for a page of a listing: each record read afresh (one
    gone since is left out; one that does not decode is listed as such)."""
    items = []
    for _, address, iid, status, process in rows:
        try:
            row = r.instance(iid)
        except JournalCorrupt as exc:
            named = None if address.startswith("? ") else address
            items.append(list_item(CorruptRecord(iid, named, process, status, exc)))
            continue
        if row is not None:
            items.append(list_item(row))
    return items


def _row(r: Reader, address: str) -> InstanceRow:
    try:
        row = r.instance(instance_id(address))
    except JournalCorrupt as exc:
        raise JournalCorrupt(
            f"the record of {address!r} does not decode: {exc}",
            database=exc.database,
            key=exc.key,
        ) from exc
    if row is None:
        raise _NotFound(f"no instance at {address!r}; the list shows the addresses there are")
    return row


def _describe(r: Reader, query: InstanceQuery, whole: bool = False) -> dict[str, Any]:
    """`describe` with the page of unread mail ``query`` asks for (all of it if ``whole``)."""
    row = _row(r, query.address)
    first = (query.mailpage - 1) * MAIL_PER_PAGE
    try:
        return describe(r, row, mail=None if whole else (first, MAIL_PER_PAGE))
    except CLIError as exc:  # its log or mailbox does not decode
        raise JournalCorrupt(str(exc), database="", key=b"") from exc
