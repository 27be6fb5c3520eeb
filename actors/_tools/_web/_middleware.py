"""The ASGI wrappers every request of the inspector goes through: the Host
check (against DNS rebinding) and the security headers on every response."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["LOCAL_HOSTS", "HostCheck", "SecurityHeaders", "host_allowed"]

# Host names a loopback-bound inspector answers besides IP addresses; any
# other name is refused (400), so a web page elsewhere cannot read it
# through DNS rebinding.
LOCAL_HOSTS = ("localhost",)

# A Host header: a name or IPv4 address, or an IPv6 address in brackets; a port.
_HOST = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::\d*)?")

_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    # Nothing to other sites; not "no-referrer", under which a browser sends
    # "Origin: null" with the confirmation's own POST, which `_guard` refuses.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def host_allowed(header: str, names: Sequence[str]) -> bool:
    """Whether a request with this Host header is answered: its host is an
    IP address (v4, or v6 in brackets), or one of ``names`` (any case).

    An address is always safe to answer: DNS rebinding needs a name that the
    attacker's DNS resolves, which the browser then sends as the Host.
    """
    found = _HOST.fullmatch(header)
    if found is None:
        return False
    host = found["host"].lower()
    if host in (name.lower() for name in names):
        return True
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") else host)
    except ValueError:
        return False
    return True


class HostCheck:
    """Refuses (400) requests whose Host header `host_allowed` refuses."""

    def __init__(self, app: ASGIApp, names: Sequence[str]) -> None:
        self.app = app
        self.names = tuple(names)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            header = Headers(scope=scope).get("host", "")
            if not host_allowed(header, self.names):
                answered = ", ".join(("IP addresses", *self.names))
                response = PlainTextResponse(
                    f"refused: the Host {header!r} is not one this inspector answers to "
                    f"({answered}); open it by its address, or start it with "
                    "--allow-host NAME",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """Adds `_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode().lower() not in _HEADERS
                ]
                headers += [(k.encode(), v.encode()) for k, v in _HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
