"""The control endpoint's frames: a 4-byte big-endian length, then that
many bytes of UTF-8 JSON, one object (see `_control`)."""

from __future__ import annotations

import json
import struct
from typing import Any

import trio

__all__ = ["MAX_DEPTH", "MAX_REPLY", "MAX_REQUEST", "BadRequest", "frame", "read_frame"]

MAX_REQUEST = 4 << 20  # bytes of JSON: room for a 1 MiB payload however it is escaped
MAX_REPLY = 1 << 20
# Levels of JSON arrays and objects a request may nest (the request object
# itself is one): well within what the decoder's recursion allows, so depth
# is refused by this rule, never by a RecursionError.
MAX_DEPTH = 500
_HEADER = struct.Struct(">I")


class BadRequest(Exception):
    """A request the endpoint does not understand; its text says why."""


def frame(doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc, separators=(",", ":")).encode()  # ASCII: lone surrogates too
    return _HEADER.pack(len(body)) + body


async def _read_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes | None:
    """``n`` bytes, or None if the peer closed first (a truncated frame)."""
    parts, got = [], 0
    while got < n:
        chunk = await stream.receive_some(min(n - got, 1 << 16))
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


async def read_frame(stream: trio.abc.ReceiveStream, cap: int) -> dict[str, Any] | None:
    """The next frame's JSON object; None when the peer closed mid-frame.

    Raises:
        BadRequest: over ``cap`` bytes, not UTF-8 JSON, or not an object.
    """
    header = await _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > cap:
        raise BadRequest(f"a frame of {size} bytes is over the {cap}-byte cap")
    body = await _read_exactly(stream, size)
    if body is None:
        return None
    too_deep = BadRequest(
        f"the frame nests JSON arrays and objects deeper than a request may (at most "
        f"{MAX_DEPTH} levels); send a flatter payload"
    )
    try:
        doc = json.loads(body.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the frame is not UTF-8 JSON ({exc})") from None
    except RecursionError:
        raise too_deep from None
    if not isinstance(doc, dict):
        raise BadRequest(f"the frame is JSON {type(doc).__name__}, not an object")
    if _depth_over(doc, MAX_DEPTH):
        raise too_deep
    return doc


def _depth_over(doc: Any, limit: int) -> bool:
    """Whether ``doc`` nests lists and dicts more than ``limit`` levels deep
    (without recursion: the walk must not fail where the decoder did not)."""
    level: list[Any] = [doc]
    for _ in range(limit):
        level = [
            inner
            for outer in level
            for inner in (outer.values() if isinstance(outer, dict) else outer)
            if isinstance(inner, (list, dict))
        ]
        if not level:
            return False
    return True
