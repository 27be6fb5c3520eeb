"""What a request to the inspector carries, read with its limits: its
query's and form's fields (each once), and who sent it (for the audit)."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs

from starlette.requests import Request

__all__ = ["MAX_FORM", "Refused", "client_of", "form_of", "params_of", "single"]

# The most a POST's body may hold: a 1 MiB payload, however it is escaped.
MAX_FORM = 4 << 20


class Refused(Exception):
    """A request for an action that is not taken: ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def params_of(request: Request) -> dict[str, list[str]]:
    qp = request.query_params
    return {name: qp.getlist(name) for name in qp}


def single(params: Mapping[str, list[str]]) -> dict[str, str]:
    """One value per parameter; a repeated one is refused."""
    repeated = sorted(name for name, values in params.items() if len(values) != 1)
    if repeated:
        raise Refused(400, f"{', '.join(repeated)} given more than once; give each once")
    return {name: values[0] for name, values in params.items()}


async def form_of(request: Request) -> dict[str, list[str]]:
    """A POST's url-encoded form, of at most `MAX_FORM` bytes."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, f"an action is a form (application/x-www-form-urlencoded), not {kind!r}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise Refused(413, f"the form is over {MAX_FORM} bytes")
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"the form does not decode: {exc}") from None


def client_of(request: Request, trust_proxy: bool) -> str:
    """Who asked, for the audit line: the peer, and, when the inspector is
    told it stands behind a proxy (``--trust-proxy``), what that proxy says."""
    peer = request.client.host if request.client is not None else "?"
    if not trust_proxy:
        return peer
    said = [
        f"{name} {request.headers[name]!r}"
        for name in ("x-forwarded-user", "x-forwarded-for")
        if name in request.headers
    ]
    return peer + (f" ({', '.join(said)})" if said else "")
