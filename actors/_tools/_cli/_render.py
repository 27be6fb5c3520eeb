"""How the command line prints: JSON documents, and text for a terminal
(aligned tables, local times, relative times, compact values).

Terminal safety: every character the command line writes to stdout or
stderr passes through `escape_text` (`escaped_output` wraps both streams
for the whole command, so every printer, present and future, goes through
it). Journal-derived strings (addresses, error messages, payloads, signal
names) are written by whoever could write to the journal or send a
message; a raw ESC or BEL in one would let them retitle or clear the
operator's terminal, move the cursor or fake output. So nothing the
terminal could act on is written raw: control characters (C0, DEL, C1),
Unicode format characters (bidi overrides, zero-width), separators other
than the space, and lone surrogates come out as escapes (``\x1b``, or
``\u001b`` inside ``--json`` output, where the escape is JSON's own and the
document still parses to the same value). Only the newline is kept.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

import attrs

from storage import Opaque

__all__ = [
    "compact",
    "counted",
    "cut",
    "emit",
    "escape_text",
    "escaped_output",
    "jsonable",
    "local_time",
    "plural",
    "relative",
    "size_text",
    "table",
    "zone_name",
]


def escape_text(text: str, *, json_escapes: bool = False) -> str:
    """``text`` with every character a terminal could act on written as an
    escape (see the module docstring): ``\x1b`` (Python's spelling), or
    ``\u001b`` with ``json_escapes`` (valid inside a JSON string). Keeps
    newlines; the result holds nothing else that is not printable, so
    escaping it again changes nothing."""
    if text.isprintable():
        return text  # the common case: one C-level scan
    out = []
    for ch in text:
        if ch.isprintable() or ch == "\n":
            out.append(ch)
        elif json_escapes:
            out.append(json.dumps(ch)[1:-1])  # \u001b; a pair of \uXXXX past the BMP
        else:
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


class _EscapedStream:
    """A text stream that writes what `escape_text` makes of its text; the
    rest (flush, fileno, buffer, isatty) is the wrapped stream's."""

    def __init__(self, stream: TextIO, json_escapes: bool) -> None:
        self._stream = stream
        self._json = json_escapes

    def write(self, text: str) -> int:
        self._stream.write(escape_text(text, json_escapes=self._json))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def escaped_output(*, json_escapes: bool) -> Iterator[None]:
    """Run a command with stdout and stderr escaped (see `escape_text`).

    The command line owns the process's standard streams while a command
    runs; they are put back as they were when it returns."""
    saved = sys.stdout, sys.stderr
    sys.stdout = _EscapedStream(saved[0], json_escapes)
    sys.stderr = _EscapedStream(saved[1], json_escapes)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def emit(args: argparse.Namespace, doc: dict[str, Any], render: Callable[[], str]) -> None:
    """Print ``doc`` as JSON with ``--json``, else the text ``render`` makes."""
    if args.json:
        print(json.dumps(jsonable(doc), indent=2, ensure_ascii=False))
    else:
        print(render())


def jsonable(value: Any) -> Any:
    """``value`` as JSON: values beyond JSON become strings (datetimes in ISO
    8601, Decimal, UUID), bytes ``{"$bytes": hex}``, objects ``{"$class": ...}``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v) for v in value), key=repr)
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, Opaque):
        return {"$class": value.name, **jsonable(value.fields)}
    if attrs.has(type(value)):
        name = f"{type(value).__module__}.{type(value).__qualname__}"
        return {"$class": name, **jsonable(attrs.asdict(value, recurse=False))}
    return str(value)


def _key(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(jsonable(key), ensure_ascii=False)


def compact(value: Any, width: int = 80) -> str:
    """``value`` as one line of JSON, cut to ``width``."""
    text = json.dumps(jsonable(value), ensure_ascii=False, separators=(", ", ": "))
    return cut(text, width)


def cut(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` with an ellipsis."""
    text = " ".join(text.split())  # one line
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def local_time(t: float | None) -> str:
    """An epoch time as local wall time, or "-"."""
    if t is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):  # a time no calendar holds
        return f"{t!r} (out of range)"


def zone_name(t: float | None = None) -> str:
    """The local time zone's name (at ``t``)."""
    try:
        return time.strftime("%Z", time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return time.strftime("%Z")


def relative(t: float | None, now: float) -> str:
    """How far ``t`` is from ``now``: "in 3 h 20 min", "2 d ago"."""
    if t is None:
        return ""
    delta = t - now
    span = abs(delta)
    if span < 1:
        return "now"
    units = (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    for i, (unit, size) in enumerate(units):
        if span >= size:
            count, rest = divmod(int(span), size)
            text = f"{count} {unit}"
            if count < 10 and i + 1 < len(units) and rest >= units[i + 1][1]:
                text += f" {rest // units[i + 1][1]} {units[i + 1][0]}"
            break
    return f"in {text}" if delta > 0 else f"{text} ago"


def table(headers: Sequence[str], rows: list[list[str]], indent: str = "") -> list[str]:
    """Aligned columns; the last one is cut to fit the terminal."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    total = shutil.get_terminal_size((120, 24)).columns
    fixed = len(indent) + sum(w + 2 for w in widths[:-1])
    last = max(24, total - fixed - 1)
    lines = []
    for cells in [list(headers), *rows]:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=False)]
        lines.append((indent + "  ".join([*padded, cut(cells[-1], last)])).rstrip())
    return lines


def counted(n: int, one: str, many: str | None = None) -> str:
    """A count in words: "none", "1 timer", "3 timers"."""
    return "none" if n == 0 else f"{n} {one if n == 1 else many or one + 's'}"


def plural(n: int, one: str, many: str | None = None) -> str:
    """A count with its noun: "0 instances", "1 instance", "2 instances"."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def size_text(n: int) -> str:
    """A byte count in B, KiB, MiB or GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover
