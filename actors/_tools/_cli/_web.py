"""The ``web`` command's arguments, and its entry into `actors._tools._web`.

`actors._tools._web` needs the optional ``web`` extra (hypercorn, starlette), so it is
imported when the command runs, and its absence is a message, not a traceback.
"""

from __future__ import annotations

import argparse

from ._errors import USAGE, CLIError

__all__ = ["add_web_arguments", "web"]


def add_web_arguments(p: argparse.ArgumentParser) -> None:
    """The ``web`` command's own options."""
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    p.add_argument("--port", type=_port, default=8080, help="port (default 8080; 0 picks one)")
    p.add_argument(
        "--allow-host",
        type=_host_name,
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name to answer besides IP addresses, localhost and this "
        "machine's name (repeatable); any other is refused, against DNS "
        "rebinding",
    )
    p.add_argument(
        "--interval",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="how often open pages refresh themselves (default 1)",
    )
    p.add_argument(
        "--allow-actions",
        action="store_true",
        help="offer cancel, retry, fork, send, drop and the compensation repairs "
        "on instances' pages, each confirmed first and done by this command "
        "line (LMDB journals only; off by default: the inspector only reads)",
    )
    p.add_argument(
        "--i-understand-anyone-can-act",
        action="store_true",
        help="with --allow-actions on a --host that is not a loopback address: "
        "start anyway (refused without it; anyone who reaches the port can act)",
    )
    p.add_argument(
        "--trust-proxy",
        action="store_true",
        help="record the X-Forwarded-User and X-Forwarded-For headers in audit "
        "lines: only behind a proxy that sets them (anyone can send them)",
    )


async def web(args: argparse.Namespace) -> int:
    """``actors web``: see `actors._tools._web`."""
    try:
        from .. import _web  # optional extra: imported only when asked for
    except ImportError as exc:
        raise CLIError(
            f"the web inspector needs the 'web' extra ({exc}); "
            "install it with: pip install 'trio-actors[web]'",
            USAGE,
        ) from None
    return await _web.web(args)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return int(text)


def _host_name(text: str) -> str:
    if not text or any(c in text for c in ":/[]*@ ") or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a host name (give a name such as inspector.example, no port)"
        )
    return text.lower()


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.2 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 0.2 to 3600")
    return value
