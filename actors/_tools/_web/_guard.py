"""What lets a POST through to an action: a token for that one confirmed
action, and the request's Origin against its Host.

A browser session is a random id in a cookie (``HttpOnly``,
``SameSite=Strict``). Each confirmation page mints a token for exactly what
it confirms: ``ISSUED.NONCE.MAC``, the MAC an HMAC under a secret drawn at
random when the server starts, over the session, the action, its address,
its fields, the time it was issued and a random nonce. So a token is worth
nothing in another session, after a restart, for another action or target
or other fields (a token from a ``send`` confirmation does not ``drop``),
after `TOKEN_SECONDS`, or a second time: `Guard.redeem` records each nonce
it accepts until its token would have expired anyway (so the table stays
as small as the confirmations of the last hour). The token travels in the
confirmation page's form, which only a page of this origin can read, and
is compared in constant time (`hmac.compare_digest`).

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
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping

import attrs

__all__ = ["TOKEN_SECONDS", "Guard", "origin_matches"]

#: How long a confirmation's token may be used (once): an hour.
TOKEN_SECONDS = 3600.0

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
    """The server's secret, how a confirmation's token is made and
    redeemed (once), and which nonces were redeemed."""

    secret: bytes = attrs.field(factory=lambda: secrets.token_bytes(32), repr=False)
    clock: Callable[[], float] = attrs.field(default=time.time, repr=False)
    # nonce -> when its token expires. Invariant: an accepted nonce stays
    # here until its token expires, so a token is redeemed at most once.
    _redeemed: dict[str, float] = attrs.field(factory=dict, repr=False, init=False)

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

    def _mac(
        self, session: str, action: str, address: str, fields: Mapping[str, str], stamp: str
    ) -> str:
        what = json.dumps([session, action, address, sorted(fields.items()), stamp])
        return hmac.new(self.secret, what.encode(), hashlib.sha256).hexdigest()

    def token(self, session: str, action: str, address: str, fields: Mapping[str, str]) -> str:
        """A fresh token for one confirmation of ``action`` on ``address``
        with ``fields``, in ``session``."""
        stamp = f"{int(self.clock())}.{secrets.token_urlsafe(12)}"
        return f"{stamp}.{self._mac(session, action, address, fields, stamp)}"

    def redeem(
        self,
        session: str | None,
        token: str | None,
        action: str,
        address: str,
        fields: Mapping[str, str],
    ) -> str | None:
        """Accept ``token`` for this action, once; None if accepted, else why not.

        The token must be ``session``'s, minted for exactly this action,
        address and fields, less than `TOKEN_SECONDS` old, and not redeemed
        before.
        """
        if session is None or not token:
            return _NO_TOKEN
        issued, _, rest = token.partition(".")
        nonce, _, mac = rest.partition(".")
        if not (issued.isascii() and issued.isdigit() and nonce and mac):
            return _NO_TOKEN
        stamp = f"{issued}.{nonce}"
        expected = self._mac(session, action, address, fields, stamp)
        if not hmac.compare_digest(expected.encode(), mac.encode("utf-8", "replace")):
            return _NO_TOKEN
        now = self.clock()
        expires = int(issued) + TOKEN_SECONDS
        if now >= expires:
            return (
                "refused: the confirmation is over an hour old; open the instance's page "
                "again and confirm from there"
            )
        for old in [n for n, until in self._redeemed.items() if until <= now]:
            del self._redeemed[old]
        if nonce in self._redeemed:
            return (
                "refused: this confirmation was used already (a token does one action "
                "once); open the instance's page again to act again"
            )
        self._redeemed[nonce] = expires
        return None

    def refusal(
        self,
        *,
        origin: str | None,
        host: str,
        fetch_site: str | None,
        session: str | None,
    ) -> str | None:
        """Why a POST with these headers and session is refused before its
        token is looked at (`redeem` checks that), or None."""
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
        return None


_NO_TOKEN = (
    "refused: the form's token is missing or not for this action in this session (the "
    "server restarted, the form came from elsewhere, or it confirmed another action, "
    "address or fields); open the instance's page again and confirm from there"
)
