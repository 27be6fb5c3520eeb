"""``actors web``: serve the inspector over a journal opened read-only."""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
from collections.abc import Awaitable, Callable
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.types import ASGIApp

from .._cli._access import journal_dir, reading
from .._cli._errors import OK, REFUSED, USAGE, CLIError
from ._app import LOCAL_HOSTS, create_app

__all__ = ["web", "serve_app"]


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
        raise CLIError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                       "pick another --port or --host", REFUSED) from None  # fmt: skip

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


async def web(args: argparse.Namespace) -> int:
    """``actors web``: the inspector on http://HOST:PORT/ until interrupted."""
    if "://" in args.journal:
        raise CLIError(
            f"--journal {args.journal!r}: the web inspector reads LMDB journals (a directory), "
            "like the rest of the actors command line; PostgreSQL journals are not supported yet",
            USAGE,
        )
    path = journal_dir(args)
    local = _loopback(args.host)
    hosts = LOCAL_HOSTS if args.host in LOCAL_HOSTS else ["*"]
    reach = ("this machine only" if local else
             "WARNING: not a loopback address, anyone who can reach it reads every "
             "payload in the journal")  # fmt: skip
    async with reading(path) as journal:
        app = create_app(journal, source=str(path), poll=args.interval, hosts=hosts)
        # Ctrl-C and SIGTERM end the server gracefully, never inside a response.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

            async def stopped() -> None:
                async for _ in signals:
                    return

            async with trio.open_nursery() as nursery:
                url = await nursery.start(serve_app, app, args.host, args.port, stopped)
                print(f"actors web: inspecting {path} read-only at {url}", flush=True)
                print(f"listening on {args.host} ({reach}); Ctrl-C stops it", flush=True)
                if not local:
                    print(f"actors web: {reach}", file=sys.stderr, flush=True)
    return OK
