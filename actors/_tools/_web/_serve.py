"""``actors web``: serve the inspector over a journal opened read-only.

``--journal`` names an LMDB journal's directory, or a PostgreSQL journal by
its URL (``postgresql://USER@HOST:PORT/DATABASE``, with ``--schema``,
default ``actors``, as `PostgresJournal`'s). Both are opened read-only: LMDB
with ``readonly=True`` (no owner lock), PostgreSQL with ``readonly=True``
(no migration, read-only sessions; the schema must be at this library's
version), so the inspector runs beside the systems that use the journal.

With ``--allow-actions`` (LMDB journals only: its runner names a journal
directory) the pages offer actions, each done by the command line in a
child process (`_actions`), and each an audit line on the
``actors.control`` logger, which the command prints to stderr.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.types import ASGIApp

from storage import Journal

from .._cli._access import journal_dir, names_postgres, opening_postgres, reading
from .._cli._errors import OK, REFUSED, USAGE, CLIError
from ._actions import ACTIONS, Runner
from ._app import LOCAL_HOSTS, create_app

__all__ = ["host_names", "serve_app", "web"]

# URLs that name a PostgreSQL journal (libpq's two schemes).


async def serve_app(
    app: ASGIApp,
    host: str,
    port: int,
    shutdown: Callable[[], Awaitable[None]] | None = None,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` with hypercorn's trio worker until cancelled, or until
    ``shutdown`` returns (then gracefully); ``nursery.start`` returns its URL
    (with the real port when ``port`` is 0).

    Raises:
        CLIError: the address cannot be listened on (in use, not this machine's).
    """
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.loglevel = "WARNING"  # errors still reach stderr
    config.graceful_timeout = 1.0
    try:
        config.create_sockets().insecure_sockets[0].close()  # fail here, with a message
    except OSError as exc:
        raise CLIError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port or --host",
            REFUSED,
        ) from None

    async with trio.open_nursery() as nursery:
        hypercorn = partial(serve, app, config, shutdown_trigger=shutdown)  # type: ignore[arg-type]
        bound = await nursery.start(hypercorn)
        task_status.started(bound[0] + "/")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_names(bind: str, allowed: Sequence[str]) -> list[str]:
    """The Host names the inspector bound to ``bind`` answers besides IP
    addresses: localhost, ``bind`` itself if it is a name, this machine's
    own name when bound beyond it, and the ``--allow-host`` names.

    Whatever the address, the Host header is checked: a loopback address
    is no protection against DNS rebinding, which reaches it through the
    browser of someone on this machine.
    """
    names = list(LOCAL_HOSTS)
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        names.append(bind)  # a name the user gave: their DNS, not an attacker's
    if not _loopback(bind):
        own = socket.gethostname()
        names += [own, own.partition(".")[0]]
    names += allowed
    return list(dict.fromkeys(name.lower() for name in names if name))


@asynccontextmanager
async def _reading(args: argparse.Namespace) -> AsyncIterator[tuple[Journal, str]]:
    """The journal ``--journal`` names, opened read-only, and how pages name it.

    Raises:
        CLIError: no journal there, or a bad URL or schema name.
        JournalUnavailable, JournalCorrupt: from opening a PostgreSQL journal.
    """
    if not names_postgres(args):
        path = journal_dir(args)
        async with reading(path) as lmdb:
            yield lmdb, str(path)
        return
    # Two connections: the app reads in at most two threads at once.
    async with opening_postgres(args, readonly=True, pool_size=2) as pg:
        yield pg, pg.describe()


def _audit_to_stderr() -> None:
    """Print the ``actors.control`` log (the actions' audit lines) on stderr,
    unless the application configured a handler for it already."""
    log = logging.getLogger("actors.control")
    if log.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


async def web(args: argparse.Namespace) -> int:
    """``actors web``: the inspector on http://HOST:PORT/ until interrupted."""
    local = _loopback(args.host)
    hosts = host_names(args.host, args.allow_host)
    acting = getattr(args, "allow_actions", False)
    if acting and names_postgres(args):
        raise CLIError(
            "--allow-actions needs an LMDB journal: the inspector's actions run on a "
            "journal directory; on PostgreSQL act with the command line (actors send, "
            "cancel, retry, ... --journal URL) or through the application (ActorSystem's "
            "methods), or drop --allow-actions",
            USAGE,
        )
    if acting and not local and not args.i_understand_anyone_can_act:
        raise CLIError(
            f"--allow-actions on --host {args.host}, not a loopback address, lets anyone who "
            "can reach it cancel, retry, fork and send: put it behind an authenticating "
            "proxy on 127.0.0.1 (see docs/operating.md), or, if every client that can "
            "reach it may act, add --i-understand-anyone-can-act",
            USAGE,
        )
    reach = (
        "this machine only"
        if local
        else "WARNING: not a loopback address, anyone who can reach it reads every "
        "payload in the journal" + (" and can act on every instance" if acting else "")
    )
    async with _reading(args) as (journal, source):
        runner = actions = None
        if acting:
            _audit_to_stderr()
            runner = Runner(str(journal_dir(args).resolve()), tuple(args.imports))
            actions = ACTIONS
        app = create_app(
            journal,
            source=source,
            poll=args.interval,
            hosts=hosts,
            runner=runner,
            actions=actions,
            trust_proxy=args.trust_proxy,
        )
        # Ctrl-C and SIGTERM end the server gracefully, never inside a response.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

            async def stopped() -> None:
                async for _ in signals:
                    return

            async with trio.open_nursery() as nursery:
                url = await nursery.start(serve_app, app, args.host, args.port, stopped)
                how = "with actions allowed" if acting else "read-only"
                print(f"actors web: inspecting {source} {how} at {url}", flush=True)
                if actions is not None:
                    print(
                        f"actions: {', '.join(actions)}; each is confirmed first and "
                        "logged (actors.control)",
                        flush=True,
                    )
                print(f"listening on {args.host} ({reach}); Ctrl-C stops it", flush=True)
                if not local:
                    print(f"actors web: {reach}", file=sys.stderr, flush=True)
    return OK
