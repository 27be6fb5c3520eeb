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

from .._admin import END_PREFIX, error_summary

__all__ = [
    "compact",
    "counted",
    "cut",
    "emit",
    "error_text",
    "escape_text",
    "escaped_output",
    "jsonable",
    "local_time",
    "plural",
    "relative",
    "render_show",
    "signal_label",
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


def signal_label(name: str) -> str:
    """A signal name as users read it (system signals in parentheses)."""
    if name.startswith(END_PREFIX):
        return f"(end of {name[len(END_PREFIX) :]})"
    if name.startswith("\x00"):
        return f"({name[1:]})"
    return name


def error_text(error: Any) -> str:
    """A stored error record as one line."""
    if not isinstance(error, dict):
        return str(error)
    if "type" in error:
        return error_summary(error)
    return str(error.get("summary") or error.get("message") or error)


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


def _log_detail(item: dict[str, Any], now: float) -> str:
    parts = []
    if item.get("failures"):
        parts.append(plural(item["failures"], "failed attempt"))
    if "due" in item:
        parts.append(f"due {local_time(item['due'])} ({relative(item['due'], now)})")
    if "message" in item:
        parts.append(f"message #{item['message']}")
    if "key" in item:
        parts.append(f"key {item['key']}")
    return ", ".join(parts)


def _tree(nodes: list[dict[str, Any]], prefix: str = "  ") -> Iterator[str]:
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        yield f"{prefix}{'└─' if last else '├─'} {node['address']}  {node['status']}  " + (
            f"({node['how']} #{node['seq']})"
        )
        yield from _tree(node["children"], prefix + ("   " if last else "│  "))


def _shown(shown: int, total: int, which: str) -> str:
    return f" (the {which} {shown} shown; --limit 0 for all)" if shown < total else ""


def _waiting(waiting: dict[str, Any], now: float) -> list[str]:
    """What a live instance waits for, as far as the journal knows."""
    lines = [
        f"  timer #{t['seq']}, due {local_time(t['due'])} ({relative(t['due'], now)})"
        for t in waiting["timers"]
    ]
    lines += [f"  child {c['address']} to end (call #{c['seq']})" for c in waiting["children"]]
    # A wait for a signal is logged when a message is taken, not before.
    unread = waiting["unread_signals"]
    tail = f" (unread mail: {', '.join(unread)})" if unread else ""
    lines.append(f"  a signal, perhaps: the journal names one only once it is taken{tail}")
    return ["", "Waiting for (as far as the journal records):", *lines]


def render_show(doc: dict[str, Any], traceback: bool) -> list[str]:
    """The lines of ``actors show`` for the document `show` built."""
    now = time.time()
    out = [f"{doc['address']}  ·  {doc['status']}"]

    def field(name: str, value: str) -> None:
        out.append(f"  {name:<14}{value}")

    field("process", doc["process"])
    field("params", compact(doc["params"], 200))
    field("input", compact(doc["input"], 200))
    if doc["status"] == "completed":
        field("result", compact(doc["result"], 400))
    if doc["error"]:
        field("error", error_text(doc["error"]))
        if doc["error"].get("summary") and "type" in doc["error"]:
            field("", str(doc["error"]["summary"]))
        trace = doc["error"].get("traceback")
        if trace and traceback:
            out.extend("    " + line for line in trace.rstrip().splitlines())
        elif trace:
            field("", "(--traceback shows where it was raised)")
    if doc.get("failed_at"):
        field("failed at", doc["failed_at"]["label"])
    if doc.get("queued"):
        place = doc["queued"]
        since = place["since"]
        field(
            "queued in",
            f"{place['queue']} (priority {place['priority']}) since "
            f"{local_time(since)} ({relative(since, now)})",
        )
    if doc["stuck"]:
        field("stuck", f"{doc['stuck']} (it runs again once fixed; last error says how)")
    if doc["last_error"]:
        field("last error", str(doc["last_error"]))
    if doc["reason"]:
        field("reason", str(doc["reason"]))
    field("run", f"{doc['run']} (incarnation {doc['incarnation']})")
    if doc.get("owner"):
        field("owner node", str(doc["owner"]))
    zone = zone_name(doc["created"])
    field("created", f"{local_time(doc['created'])} {zone} ({relative(doc['created'], now)})")
    field("updated", f"{local_time(doc['updated'])} {zone} ({relative(doc['updated'], now)})")
    if doc["parent"]:
        how = "awaited by" if doc["awaited"] else "child of"
        field("parent", f"{how} {doc['parent']} (restart: {doc['restart'] or 'temporary'})")
    field("id", doc["id"])

    log = doc["log"]
    out.append("")
    shown = _shown(len(log), doc["log_entries"], "last")
    out.append(
        f"Effect log, run {doc['run']}: {counted(doc['log_entries'], 'entry', 'entries')}{shown}"
    )
    if log:
        rows = [
            [
                str(i["seq"]),
                str(i["kind"]),
                cut(str(i["name"]), 40),
                str(i.get("attempt", "")),
                i["outcome"],
                _log_detail(i, now),
            ]
            for i in log
        ]
        cells = [[r[0], r[1], r[2], r[3], cut(r[4], 70), r[5]] for r in rows]
        out.extend(table(["SEQ", "KIND", "NAME", "ATT", "OUTCOME", "DETAIL"], cells, "  "))
    if doc["older_runs_in_log"]:
        out.append(f"  (entries of older runs remain: {doc['older_runs_in_log']})")

    if "waiting" in doc:
        out.extend(_waiting(doc["waiting"], now))

    out.append("")
    mail = doc["mailbox"]
    ever = f" ({doc['messages_ever']} received in all)" if doc["messages_ever"] else ""
    shown = _shown(len(mail), doc["mailbox_messages"], "first")
    out.append(f"Mailbox: {counted(doc['mailbox_messages'], 'unread message')}{ever}{shown}")
    for m in mail:
        out.append(
            f"  #{m['seq']:<4} {m['signal']}  sent {local_time(m['sent'])}  {compact(m['payload'], 80)}"
        )

    poison = doc.get("handling")
    if poison is not None:
        crashes = f", after {counted(len(doc['restarts']), 'restart')}" if doc["restarts"] else ""
        out.append(
            f"  failed while handling #{poison['seq']} {poison['signal']} (taken at effect "
            f"#{poison['effect']}{crashes})  {compact(poison['payload'], 80)}"
        )
    if doc.get("dead_letters"):
        out.append(
            f"  dropped: {counted(doc['dead_letters'], 'message')} ('actors mail "
            f"{doc['address']} --dropped')"
        )
    out.append(f"Timers: {counted(len(doc['timers']), 'timer')}")
    for t in doc["timers"]:
        stale = f"  (left by run {t['run']})" if t["stale"] else ""
        out.append(
            f"  due {local_time(t['due'])} ({relative(t['due'], now)})  effect #{t['seq']}{stale}"
        )

    out.append(f"Children: {counted(len(doc['children']), 'child', 'children')}")
    out.extend(_tree(doc["children"]))

    stream = doc["stream"]
    consumers = len(stream["consumers"])
    if stream["length"] or consumers:
        out.append(
            f"Stream: {plural(stream['length'], 'value')}, "
            f"{consumers or 'no'} consumer{'' if consumers == 1 else 's'}"
        )
    else:
        out.append("Stream: none")
    for name, c in stream["consumers"].items():
        out.append(f"  {name}: cursor {c['cursor']} ({c['unread']} unread)")

    out.append(f"Restarts: {counted(len(doc['restarts']), 'restart')}")
    for r in doc["restarts"]:
        out.append(f"  {local_time(r.get('at'))}  {r.get('reason')}")
    if doc["exports_version"] is not None:
        out.append(f"Exports (version {doc['exports_version']}): {compact(doc['exports'], 200)}")
    comps = doc["compensations"]
    if comps:
        out.append(f"Compensations: {len(comps)} — {doc['compensations_fate']}")
        for c in comps:
            maybe = ", step may have applied" if c["possibly_applied"] else ""
            out.append(
                f"  {c['state']:<10} {c['step']} -> {c['function']}  "
                f"attempts {c['attempts']}{maybe}"
            )
        if doc["compensation_failure"]:
            out.append(f"  stuck on: {error_text(doc['compensation_failure'])}")
    return out
