"""What lets a POST through to an action: a per-session token, and the
request's Origin against its Host.

A browser session is a random id in a cookie (``HttpOnly``,
``SameSite=Strict``); its token is an HMAC of that id under a secret drawn
at random when the server starts, so the server keeps no table and a
token is worth nothing in another session or after a restart. The token
travels in the confirmation page's form, which only a page of this origin
can read, and is compared in constant time (`hmac.compare_digest`).

A POST is also refused unless its Origin header names the host the request
was sent to (its Host header, which the app has checked already): a page on
another site can make a browser send a form here, but not with this Origin.
The scheme is not compared, so a proxy that ends TLS in front of the
inspector (``https://`` outside, ``http://`` behind it) passes, as long as
it passes the Host header on. A browser that says ``Sec-Fetch-Site`` must
say ``same-origin``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping

import attrs

__all__ = ["Guard", "origin_matches"]

# A session id: 32 random bytes, URL-safe base64 (43 characters).
_SESSION = re.compile(r"[A-Za-z0-9_-]{43}")


def origin_matches(origin: str | None, host: str) -> bool:
    """Whether a POST's ``Origin`` header names the host it was sent to.

    ``origin`` must be ``http://HOST`` or ``https://HOST`` with HOST (and
    its port) equal to the ``Host`` header, in any case; a missing Origin,
    ``null`` (a sandboxed frame, a redirect across sites) and anything else
    do not match.
    """
    if not origin or not host:
        return False
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest:
        return False
    if any(c in rest for c in "/?#@ ") or not rest.isprintable():
        return False
    return hmac.compare_digest(rest.lower().encode(), host.lower().encode())


@attrs.frozen
class Guard:
    """The server's secret, and how a session's token is made and checked."""

    secret: bytes = attrs.field(factory=lambda: secrets.token_bytes(32), repr=False)

    @property
    def cookie(self) -> str:
        """The session cookie's name: one per server, so two inspectors on one
        host (their cookies are not told apart by port) keep their own."""
        return "actors_session_" + hashlib.sha256(self.secret).hexdigest()[:10]

    @staticmethod
    def new_session() -> str:
        """A fresh session id."""
        return secrets.token_urlsafe(32)

    def session(self, cookies: Mapping[str, str]) -> str | None:
        """The request's session id, if it carries a well-formed one."""
        found = cookies.get(self.cookie)
        return found if found is not None and _SESSION.fullmatch(found) else None

    def token(self, session: str) -> str:
        """The token a form of ``session`` carries."""
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    def token_ok(self, session: str | None, token: str | None) -> bool:
        """Whether ``token`` is ``session``'s (in constant time)."""
        if session is None or not token:
            return False
        return hmac.compare_digest(self.token(session).encode(), token.encode("utf-8", "replace"))

    def refusal(
        self,
        *,
        origin: str | None,
        host: str,
        fetch_site: str | None,
        session: str | None,
        token: str | None,
    ) -> str | None:
        """Why a POST with these headers, session and token is refused, or None."""
        if not origin_matches(origin, host):
            return (
                f"refused: the request comes from {origin or 'a page that does not say where'}"
                f", not from this inspector (Host {host!r}); actions are taken from the "
                "inspector's own confirmation page"
            )
        if fetch_site is not None and fetch_site != "same-origin":
            return f"refused: the browser says the request is {fetch_site}, not same-origin"
        if session is None:
            return (
                "refused: no inspector session (cookies off, or the server restarted); "
                "open the instance's page again and confirm from there"
            )
        if not self.token_ok(session, token):
            return (
                "refused: the form's token is missing or not this session's (the server "
                "restarted, or the form came from elsewhere); open the instance's page "
                "again and confirm from there"
            )
        return None
