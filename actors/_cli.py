"""The ``actors`` command line: look into a journal, and poke it, from a shell.

    python -m actors --journal ./state list --status suspended
    python -m actors --journal ./state show orders/o-17
    python -m actors --journal ./state send orders/o-17 approved '{"by": "ann"}'
    python -m actors --journal ./state cancel orders/o-17
    python -m actors --journal ./state tail rooms/lobby --consumer archive --follow
    python -m actors --journal ./state stats

``--json`` (before or after the command) prints one JSON document instead of
text (``tail --follow --json``: one per value, a line each); times in it are
epoch seconds. ``--journal`` defaults to ``$ACTORS_JOURNAL``.

Reading (list, show, stats) opens the journal read-only
(``LMDBJournal(path, readonly=True)``): no owner lock, nothing written, so it
works beside a system that runs on the journal in another process; LMDB gives
each read a consistent snapshot.

Writing (send, cancel, and tail moving a consumer's cursor) happens only when
no system holds the journal. The CLI then opens it as a system would (taking
the owner lock for the milliseconds the write takes) and writes with the
journal API exactly as the runtime does: ``send`` requires the instance to be
live and appends ``[signal, payload, time]`` to its mailbox, where the
instance finds it when a system next opens the journal; ``cancel`` records the
instance and its live descendants as cancelled, children first, in one
transaction, as `ActorSystem.cancel` does for an instance not in memory. The
CLI has no process definitions, so it cannot run anything itself (and
``open_system(journal, processes=[])`` would only recover instances it cannot
run). Nor does it write behind a running system's back: LMDB would let a
second process commit, but the system keeps live instances in memory and
learns of mail only through its own ``send``, so a message written from
outside would sit unseen until a restart, and a cancel would race the
instance's own writes. So while a system holds the journal, ``send`` and
``cancel`` refuse (exit 4), naming its pid: do it through that application
(``system.send``, ``system.cancel``). ``tail`` then prints from the cursor
without moving it, and says so on stderr; otherwise a value counts as
consumed once printed, and the cursor moves after each printed batch (so a
crash in between prints that batch again: at-least-once, as for
`ActorSystem.stream`). Ctrl-C stops ``--follow`` between polls, never
between printing a batch and moving the cursor.

``cancel`` also refuses an instance with saga compensations pending anywhere in
what it would cancel: only the application can run them. ``--force`` cancels
without compensating (as `ActorSystem.cancel` does for an instance that is
not in memory).

Records holding ``@actors.serializable`` classes decode as ``{"$class": ...}``
placeholders unless ``--import MODULE`` imports the module that defines them.

Exit codes: 0 done; 1 refused (not live, compensations pending); 2 bad usage;
3 not found (no journal at the path, no instance at the address); 4 the
journal is held by a running system; 5 corrupt records; 130 interrupted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import math
import os
import shutil
import signal
import struct
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs
import msgpack
import trio

from storage import LIVE_STATUSES, STATUS_WORDS, STATUSES, InstanceRow, LMDBJournal, Reader, Txn, instance_id
from storage._journal import STATUS_CODE, STATUS_NAME
from storage.errors import ActorError, Conflict, EncodeError, JournalCorrupt, JournalLocked

from . import _effects as fx
from . import _saga
from . import _supervision as _sup
from ._records import Signal, error_summary

from .errors import NotDelivered

__all__ = ["main"]

OK, REFUSED, USAGE, NOT_FOUND, HELD, CORRUPT, INTERRUPTED = 0, 1, 2, 3, 4, 5, 130
_CANCELLABLE = frozenset({"running", "suspended", "compensation_stuck"})
_TERMINAL = frozenset({"completed", "failed", "cancelled"})
_MAX_PAYLOAD = 1 << 20  # open_system's default max_payload
_BATCH = 256  # stream values read per transaction by tail
_FAR = 100 * 365 * 86400.0


class CLIError(Exception):
    """A failure the user can act on: printed without a traceback, exits with ``code``."""

    def __init__(self, message: str, code: int = REFUSED) -> None:
        super().__init__(message)
        self.code = code


class _Held(Exception):
    """A running system holds the journal; ``pid`` is its process id if known."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(pid)
        self.pid = pid


# -- entry point ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.journal:
        parser.error("--journal PATH is required (or set ACTORS_JOURNAL)")
    try:
        _import_modules(args.imports)
        with _lenient_decoding():
            return trio.run(_COMMANDS[args.command], args)
    except CLIError as exc:
        return _fail(args, exc.code, str(exc))
    except NotDelivered as exc:
        return _fail(args, NOT_FOUND if exc.reason == "unknown" else REFUSED, str(exc))
    except JournalCorrupt as exc:
        return _fail(args, CORRUPT, str(exc))
    except JournalLocked as exc:
        return _fail(args, HELD, str(exc))
    except ActorError as exc:
        return _fail(args, REFUSED, str(exc))
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # `actors list | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return REFUSED
    except OSError as exc:  # permissions, a full disk, ...
        return _fail(args, REFUSED, f"{args.journal}: {exc}")


def _fail(args: argparse.Namespace, code: int, message: str) -> int:
    if getattr(args, "json", False):
        print(json.dumps({"error": {"message": message, "exit_code": code}}, indent=2))
    else:
        print(f"actors: {message}", file=sys.stderr)
    return code


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON document instead of text")  # fmt: skip
    parser = argparse.ArgumentParser(
        prog="actors",
        description="Inspect a journal of the actors runtime, and send to or cancel "
        "its instances when no system holds it.",
        epilog="exit codes: 0 done, 1 refused, 2 bad usage, 3 not found, 4 journal held "
        "by a running system, 5 corrupt records, 130 interrupted",
    )
    parser.add_argument("--journal", metavar="PATH", default=os.environ.get("ACTORS_JOURNAL"),
                        help="the journal's directory (default: $ACTORS_JOURNAL)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE", help="import MODULE first, so records holding its "
                        "@actors.serializable classes decode as those classes (repeatable)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", parents=[common], help="instances, most recently updated first")
    p.add_argument("--status", choices=STATUSES, help="only instances with this status")
    p.add_argument("--process", metavar="TEMPLATE", help="only this process (its path template)")
    p.add_argument("--limit", type=int, default=50, metavar="N",
                   help="show at most N (default 50; 0 for all)")  # fmt: skip

    p = sub.add_parser("show", parents=[common], help="everything recorded about one instance")
    p.add_argument("address")
    p.add_argument("--traceback", action="store_true", help="include the error's traceback")

    p = sub.add_parser("send", parents=[common], help="put a message in a live instance's mailbox")
    p.add_argument("address")
    p.add_argument("signal", help="the signal's name")
    p.add_argument("payload", nargs="?", metavar="JSON",
                   help="the payload as JSON ('-' reads stdin; default null)")  # fmt: skip

    p = sub.add_parser("cancel", parents=[common], help="cancel a live instance and its children")
    p.add_argument("address")
    p.add_argument("--reason", default="cancelled from the actors CLI", help="recorded reason")
    p.add_argument("--force", action="store_true",
                   help="cancel even with saga compensations pending (they do not run)")  # fmt: skip

    p = sub.add_parser("tail", parents=[common], help="print a stream from a consumer's cursor")
    p.add_argument("address")
    p.add_argument("--consumer", required=True, metavar="NAME")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing new values until interrupted or the instance ends")  # fmt: skip
    p.add_argument("--from", dest="from_", choices=("start", "latest"), default="start",
                   help="where a new consumer starts (default start)")  # fmt: skip
    p.add_argument("--interval", type=_seconds, default=0.5, help="seconds between polls")

    sub.add_parser("stats", parents=[common], help="counts by status, size, mail, timers")
    return parser


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _import_modules(modules: list[str]) -> None:
    if modules and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
            raise CLIError(f"--import {module}: {type(exc).__name__}: {exc}", USAGE) from None


# -- decoding records of classes this process does not know ---------------------------


@attrs.frozen
class _Opaque:
    """A stored ``@serializable`` value whose class is not imported: its name and fields.

    Deliberately not serializable itself, so it can never be written back.
    """

    name: str
    fields: dict[str, Any]


@contextmanager
def _lenient_decoding() -> Iterator[None]:
    # The codec refuses values of unregistered classes (rightly, for the
    # runtime); the CLI shows them as placeholders instead of calling the
    # whole record corrupt. Any write of a record holding one fails to encode.
    from storage import _codec

    original = _codec._ext_hook

    def hook(code: int, data: bytes) -> Any:
        try:
            return original(code, data)
        except ValueError:
            if code != _codec._ATTRS:
                raise
            name, fields = _codec._unpack(data)
            return _Opaque(name, fields)

    _codec._ext_hook = hook
    try:
        yield
    finally:
        _codec._ext_hook = original


# -- opening the journal -----------------------------------------------------------------


def _journal_dir(args: argparse.Namespace) -> Path:
    path = Path(args.journal)
    hint = "pass the directory given to LMDBJournal(...)"
    if not path.exists():
        raise CLIError(f"no journal at {path}: the directory does not exist; {hint}", NOT_FOUND)
    if not path.is_dir():
        raise CLIError(f"no journal at {path}: it is a file; {hint}", NOT_FOUND)
    if not (path / "data.mdb").exists():
        raise CLIError(f"no journal at {path}: it holds no data.mdb; {hint}", NOT_FOUND)
    return path


def _owner_pid(path: Path) -> int | None:
    """The pid in the owner lock file, if that process is alive (a hint, not the lock)."""
    try:
        pid = int((path / "owner.lock").read_text().strip())
    except (OSError, ValueError):
        return None
    if pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def _holder(path: Path) -> tuple[bool | None, int | None]:
    """Whether a system holds the journal now, and its pid, read from
    /proc/locks (Linux) without touching the lock; (None, pid hint) elsewhere."""
    try:
        st = (path / "owner.lock").stat()
    except OSError:
        return False, None
    try:
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None, _owner_pid(path)
    file = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks.splitlines():
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2171344 0 EOF"
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == file:
            return True, int(fields[4]) if fields[4].isdigit() else None
    return False, None


@asynccontextmanager
async def _reading(path: Path) -> AsyncIterator[LMDBJournal]:
    journal = LMDBJournal(path, readonly=True)
    await journal.open()
    try:
        yield journal
    finally:
        await journal.close()


@asynccontextmanager
async def _writing(path: Path) -> AsyncIterator[LMDBJournal]:
    """The journal opened as a system would; raises `_Held` if one holds it."""
    journal = LMDBJournal(path)
    try:
        await journal.open()
    except JournalLocked:
        raise _Held(_owner_pid(path)) from None
    try:
        yield journal
    finally:
        with trio.CancelScope(shield=True):
            await journal.close()


def _held_error(path: Path, held: _Held, doing: str, instead: str) -> CLIError:
    pid = f" (pid {held.pid})" if held.pid else ""
    return CLIError(
        f"cannot {doing}: the journal at {path} is owned by a running system{pid}. The CLI "
        "writes only to a journal no system holds, since a running system would not see "
        f"the change; {instead} through that application, or stop it first",
        HELD,
    )


# -- reading --------------------------------------------------------------------------------


@attrs.frozen
class _Broken:
    """An instance whose record does not decode, with what its indexes still say."""

    iid: bytes
    address: str
    process: str
    status: str
    problem: str


def _rows(r: Reader, status: str | None, process: str | None) -> list[InstanceRow | _Broken]:
    try:
        return list(r.instances(status, process))
    except JournalCorrupt:
        return list(_rows_one_by_one(r, status, process))


def _rows_one_by_one(
    r: Reader, status: str | None, process: str | None
) -> Iterator[InstanceRow | _Broken]:
    # `Reader.instances` stops at the first record that does not decode; walk
    # the LMDB status index instead, so one bad record hides only itself.
    scan = getattr(r, "_scan", None)
    if scan is None:  # pragma: no cover - the CLI opens LMDB journals only
        raise TypeError(f"cannot walk the records of {type(r).__name__} one by one")
    prefix = b"" if status is None else bytes((STATUS_CODE[status],))
    for key, proc in scan("status", prefix):
        iid, template = key[1:], proc.decode(errors="replace")
        if process is not None and template != process:
            continue
        try:
            row = r.instance(iid)
        except JournalCorrupt as exc:
            address = _salvage_address(r, iid) or f"? {iid.hex()}"
            yield _Broken(iid, address, template, STATUS_NAME.get(key[0], "?"), str(exc))
            continue
        if row is not None:
            yield row


def _salvage_address(r: Reader, iid: bytes) -> str | None:
    """The address in a record's header (status(1) hlen(2) [address, process]),
    which may survive when the record after it does not decode."""
    try:
        value = r._txn.get(iid, db=r._dbs["instances"])  # type: ignore[attr-defined]
        (hlen,) = struct.unpack_from(">H", value, 1)
        address = msgpack.unpackb(value[3 : 3 + hlen])[0]
        return address if isinstance(address, str) else None
    except Exception:  # noqa: BLE001 - a best effort on a broken record
        return None


def _instance(r: Reader, address: str, path: Path) -> InstanceRow:
    try:
        row = r.instance(instance_id(address))
    except JournalCorrupt as exc:
        raise CLIError(f"the record of {address!r} is corrupt: {exc}", CORRUPT) from None
    if row is None:
        raise CLIError(
            f"no instance at {address!r} in {path}; check the address "
            "('actors list' shows the addresses)",
            NOT_FOUND,
        )
    return row


def _not_live(address: str, row: InstanceRow | None) -> NotDelivered:
    if row is None:
        return NotDelivered(
            f"no instance at {address!r}; start one first or check the address",
            address=address, reason="unknown",
        )  # fmt: skip
    words = STATUS_WORDS.get(row.status, f"it is {row.status}")
    when = row.record.get("updated")
    at = f" at {_when(when)}" if when and row.status in _TERMINAL else ""
    return NotDelivered(
        f"no live instance at {address!r} ({words}{at}); start a new one or check the address",
        address=address, reason=row.status,
    )  # fmt: skip


# -- output -----------------------------------------------------------------------------------


def _emit(args: argparse.Namespace, doc: dict[str, Any], render: Callable[[], str]) -> None:
    if args.json:
        print(json.dumps(_jsonable(doc), indent=2, ensure_ascii=False))
    else:
        print(render())


def _jsonable(value: Any) -> Any:
    """``value`` as JSON: values beyond JSON become strings (datetimes in ISO
    8601, Decimal, UUID), bytes ``{"$bytes": hex}``, objects ``{"$class": ...}``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {_key(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=repr)
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _Opaque):
        return {"$class": value.name, **_jsonable(value.fields)}
    if attrs.has(type(value)):
        name = f"{type(value).__module__}.{type(value).__qualname__}"
        return {"$class": name, **_jsonable(attrs.asdict(value, recurse=False))}
    return str(value)


def _key(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(_jsonable(key), ensure_ascii=False)


def _compact(value: Any, width: int = 80) -> str:
    text = json.dumps(_jsonable(value), ensure_ascii=False, separators=(", ", ": "))
    return _cut(text, width)


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())  # one line
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _zone(t: float | None = None) -> str:
    return time.strftime("%Z", time.localtime(t))


def _ago(t: float | None, now: float) -> str:
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


def _table(headers: Sequence[str], rows: list[list[str]], indent: str = "") -> list[str]:
    """Aligned columns; the last one is cut to fit the terminal."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    total = shutil.get_terminal_size((120, 24)).columns
    fixed = len(indent) + sum(w + 2 for w in widths[:-1])
    last = max(24, total - fixed - 1)
    lines = []
    for cells in [list(headers)] + rows:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths[:-1])]
        lines.append((indent + "  ".join(padded + [_cut(cells[-1], last)])).rstrip())
    return lines


def _signal_label(name: str) -> str:
    if name.startswith(fx.END_PREFIX):
        return f"(end of {name[len(fx.END_PREFIX) :]})"
    if name.startswith("\x00"):
        return f"({name[1:]})"
    return name


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    if "type" in error:
        return error_summary(error)
    return str(error.get("summary") or error.get("message") or error)


# -- list -------------------------------------------------------------------------------------


def _detail(row: InstanceRow) -> str:
    record = row.record
    if record.get("last_error"):
        text = str(record["last_error"])
    elif row.status == "failed":
        text = _error_text(record.get("error"))
    elif row.status == "cancelled" and record.get("reason"):
        text = f"reason: {record['reason']}"
    else:
        return ""
    # The row names the instance already; say the rest sooner.
    return text.replace(f"instance {row.address!r} ", "").replace(f" (of {row.address!r})", "")


def _list_item(row: InstanceRow | _Broken) -> dict[str, Any]:
    if isinstance(row, _Broken):
        return {"address": row.address, "process": row.process, "status": row.status,
                "created": None, "updated": None, "last_error": None, "detail": row.problem,
                "corrupt": True}  # fmt: skip
    record = row.record
    return {"address": row.address, "process": row.process, "status": row.status,
            "created": record.get("created"), "updated": record.get("updated"),
            "last_error": record.get("last_error"), "detail": _detail(row),
            "corrupt": False}  # fmt: skip


async def _list(args: argparse.Namespace) -> int:
    path = _journal_dir(args)
    async with _reading(path) as journal:
        with journal.reader() as r:
            rows = _rows(r, args.status, args.process)
            counts = r.count_by_status()
    items = sorted(
        (_list_item(row) for row in rows), key=lambda i: (-(i["updated"] or 0), i["address"])
    )
    shown = items if args.limit <= 0 else items[: args.limit]
    doc = {
        "journal": str(path), "total": sum(counts.values()), "matching": len(items),
        "shown": len(shown), "counts": {s: counts[s] for s in STATUSES if s in counts},
        "instances": shown,
    }  # fmt: skip

    def render() -> str:
        headers = ["ADDRESS", "PROCESS", "STATUS", f"UPDATED ({_zone()})", "DETAIL"]
        cells = [[i["address"], i["process"], i["status"], _when(i["updated"]), i["detail"] or ""]
                 for i in shown]  # fmt: skip
        lines = _table(headers, cells) if shown else ["no instances match"]
        filters = " ".join(
            f"--{name} {value}" for name, value in (("status", args.status), ("process", args.process))
            if value
        )  # fmt: skip
        matching = f"{len(items)} instances" + (f" matching {filters}" if filters else "")
        if len(shown) < len(items):
            lines.append(f"showing the {len(shown)} most recently updated of {matching} "
                         "(--limit N for more, 0 for all)")  # fmt: skip
        by_status = ", ".join(f"{n} {s}" for s, n in doc["counts"].items())
        lines.append(f"{doc['total']} instances in {path}: {by_status or 'none'}")
        return "\n".join(lines)

    _emit(args, doc, render)
    return OK


# -- show -------------------------------------------------------------------------------------


def _log_item(seq: int, entry: dict[str, Any]) -> dict[str, Any]:
    kind = entry.get("k")
    item: dict[str, Any] = {"seq": seq, "kind": kind, "name": entry.get("n") or ""}
    if kind == "wait":
        item["name"] = ",".join(_signal_label(n) for n in str(item["name"]).split(","))
    for field, key in (("attempt", "a"), ("failures", "f"), ("key", "key"), ("due", "due"),
                       ("message", "m"), ("child", "child"), ("signal", "s")):  # fmt: skip
        if key in entry:
            item[field] = entry[key]
    if "e" in entry:
        item["state"], item["error"] = "failed", entry["e"]
        item["outcome"] = f"failed: {_error_text(entry['e'])}"
    elif "v" in entry:
        item["state"], item["value"] = "done", entry["v"]
        item["outcome"] = _done_outcome(kind, entry)
    else:
        item["state"] = "started"
        item["outcome"] = {
            "step": f"attempt {entry.get('a', '?')} started, no outcome yet",
            "sleep": "pending", "call": "waiting for the child",
        }.get(kind, "started")  # fmt: skip
    return item


def _done_outcome(kind: Any, entry: dict[str, Any]) -> str:
    named = {"sleep": "fired", "spawn": "spawned", "emit": "emitted", "publish": "published"}
    if kind in named:
        return named[kind]
    value = _compact(entry["v"], 60)
    if kind == "call":
        return f"child completed: {value}"
    if "s" in entry:
        return f"got {_signal_label(entry['s'])}: {value}"
    return f"got: {value}" if kind == "wait" else f"ok: {value}"


def _log_detail(item: dict[str, Any], now: float) -> str:
    parts = []
    if item.get("failures"):
        parts.append(f"{item['failures']} failed attempt(s)")
    if "due" in item:
        parts.append(f"due {_when(item['due'])} ({_ago(item['due'], now)})")
    if "message" in item:
        parts.append(f"message #{item['message']}")
    if "key" in item:
        parts.append(f"key {item['key']}")
    return ", ".join(parts)


def _children(r: Reader, log: dict[int, Any], seen: set[bytes]) -> list[dict[str, Any]]:
    """The children a run's log names (call/spawn), each with its own, recursively."""
    nodes = []
    for address, seq in _sup.children_in_log(log).items():
        node: dict[str, Any] = {"address": address, "how": log[seq].get("k"), "seq": seq,
                                "status": "gone", "children": []}  # fmt: skip
        iid = instance_id(address)
        if iid in seen:
            node["status"] = "(seen above)"
        else:
            seen.add(iid)
            try:
                row = r.instance(iid)
                if row is not None:
                    node["status"] = row.status
                    node["restart"] = row.record.get("restart")
                    node["children"] = _children(r, r.log(iid, row.record.get("run", 0)), seen)
            except JournalCorrupt:
                node["status"] = "corrupt"
        nodes.append(node)
    return nodes


def _tree(nodes: list[dict[str, Any]], prefix: str = "  ") -> Iterator[str]:
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        yield f"{prefix}{'└─' if last else '├─'} {node['address']}  {node['status']}  " + (
            f"({node['how']} #{node['seq']})"
        )
        yield from _tree(node["children"], prefix + ("   " if last else "│  "))


async def _show(args: argparse.Namespace) -> int:
    path = _journal_dir(args)
    async with _reading(path) as journal:
        with journal.reader() as r:
            row = _instance(r, args.address, path)
            iid, record = row.iid, row.record
            run = record.get("run", 0)
            try:
                log = r.log(iid, run)
                mail = r.mailbox(iid)
            except JournalCorrupt as exc:
                raise CLIError(f"records of {args.address!r} are corrupt: {exc}", CORRUPT) from None
            length, cursors = r.stream_length(iid), r.cursors(iid)
            doc = {
                "address": row.address,
                "process": row.process,
                "status": row.status,
                "id": iid.hex(),
                "run": run,
                "incarnation": record.get("inc", 1),
                **{key: record.get(key) for key in _SHOWN},
                "params": record.get("params", []),
                "log": [_log_item(seq, entry) for seq, entry in sorted(log.items())],
                "older_runs_in_log": [x for x in r.log_runs(iid) if x != run],
                "mailbox": [_mail_item(seq, message) for seq, message in mail],
                "messages_ever": r.last_message_seq(iid),
                "timers": [
                    {"due": t.due, "run": t.run, "seq": t.seq, "stale": t.run != run}
                    for t in r.timers(iid)
                ],
                "children": _children(r, log, {iid}),
                "stream": {
                    "length": length,
                    "consumers": {
                        name: {"cursor": pos, "unread": max(0, length - pos)}
                        for name, pos in sorted(cursors.items())
                    },
                },
                "restarts": record.get("restarts", []),
                "compensations": _compensations(record),
                "compensation_failure": record.get("stuck"),
            }
    _emit(args, doc, lambda: "\n".join(_render_show(doc, args.traceback)))
    return OK


# Record fields `show` passes through as they are.
_SHOWN = ("created", "updated", "parent", "awaited", "restart", "input", "result", "error",
          "last_error", "reason", "exports", "exports_version")  # fmt: skip


def _mail_item(seq: int, message: Any) -> dict[str, Any]:
    sent = message[2] if len(message) > 2 else None
    return {"seq": seq, "signal": _signal_label(message[0]), "payload": message[1], "sent": sent}


def _compensations(record: dict[str, Any]) -> list[dict[str, Any]]:
    done = set(record.get("compensated", []))
    attempts = record.get("comp_attempts", {})
    return [
        {"step": c.get("name"), "function": c.get("fn"), "args": c.get("args"),
         "kwargs": c.get("kwargs"), "step_result": c.get("result"),
         "state": "done" if c.get("id") in done else "pending",
         "attempts": attempts.get(c.get("id"), 0), "possibly_applied": c.get("possibly_applied"),
         "key": c.get("id")}
        for c in record.get("compensations", [])
    ]  # fmt: skip


def _render_show(doc: dict[str, Any], traceback: bool) -> list[str]:
    now = time.time()
    out = [f"{doc['address']}  ·  {doc['status']}"]

    def field(name: str, value: str) -> None:
        out.append(f"  {name:<14}{value}")

    field("process", doc["process"])
    field("params", _compact(doc["params"], 200))
    field("input", _compact(doc["input"], 200))
    if doc["status"] == "completed":
        field("result", _compact(doc["result"], 400))
    if doc["error"]:
        field("error", _error_text(doc["error"]))
        if doc["error"].get("summary") and "type" in doc["error"]:
            field("", str(doc["error"]["summary"]))
        trace = doc["error"].get("traceback")
        if trace and traceback:
            out.extend("    " + line for line in trace.rstrip().splitlines())
        elif trace:
            field("", "(--traceback shows where it was raised)")
    if doc["last_error"]:
        field("last error", str(doc["last_error"]))
    if doc["reason"]:
        field("reason", str(doc["reason"]))
    field("run", f"{doc['run']} (incarnation {doc['incarnation']})")
    zone = _zone(doc["created"])
    field("created", f"{_when(doc['created'])} {zone} ({_ago(doc['created'], now)})")
    field("updated", f"{_when(doc['updated'])} {zone} ({_ago(doc['updated'], now)})")
    if doc["parent"]:
        how = "awaited by" if doc["awaited"] else "child of"
        field("parent", f"{how} {doc['parent']} (restart: {doc['restart'] or 'temporary'})")
    field("id", doc["id"])

    log = doc["log"]
    out.append("")
    out.append(f"Effect log, run {doc['run']}: {_count(len(log), 'entry', 'entries')}")
    if log:
        rows = [[str(i["seq"]), str(i["kind"]), _cut(str(i["name"]), 40),
                 str(i.get("attempt", "")), i["outcome"], _log_detail(i, now)] for i in log]  # fmt: skip
        cells = [[r[0], r[1], r[2], r[3], _cut(r[4], 70), r[5]] for r in rows]
        out.extend(_table(["SEQ", "KIND", "NAME", "ATT", "OUTCOME", "DETAIL"], cells, "  "))
    if doc["older_runs_in_log"]:
        out.append(f"  (entries of older runs remain: {doc['older_runs_in_log']})")

    out.append("")
    mail = doc["mailbox"]
    ever = f" ({doc['messages_ever']} received in all)" if doc["messages_ever"] else ""
    out.append(f"Mailbox: {_count(len(mail), 'unread message')}{ever}")
    for m in mail:
        out.append(
            f"  #{m['seq']:<4} {m['signal']}  sent {_when(m['sent'])}  {_compact(m['payload'], 80)}"
        )

    out.append(f"Timers: {_count(len(doc['timers']), 'timer')}")
    for t in doc["timers"]:
        stale = f"  (left by run {t['run']})" if t["stale"] else ""
        out.append(f"  due {_when(t['due'])} ({_ago(t['due'], now)})  effect #{t['seq']}{stale}")

    out.append(f"Children: {_count(len(doc['children']), 'child', 'children')}")
    out.extend(_tree(doc["children"]))

    stream = doc["stream"]
    consumers = len(stream["consumers"])
    if stream["length"] or consumers:
        out.append(f"Stream: {stream['length']} value(s), "
                   f"{consumers or 'no'} consumer{'' if consumers == 1 else 's'}")  # fmt: skip
    else:
        out.append("Stream: none")
    for name, c in stream["consumers"].items():
        out.append(f"  {name}: cursor {c['cursor']} ({c['unread']} unread)")

    out.append(f"Restarts: {_count(len(doc['restarts']), 'restart')}")
    for r in doc["restarts"]:
        out.append(f"  {_when(r.get('at'))}  {r.get('reason')}")
    if doc["exports_version"] is not None:
        out.append(f"Exports (version {doc['exports_version']}): {_compact(doc['exports'], 200)}")
    comps = doc["compensations"]
    if comps:
        pending = sum(c["state"] == "pending" for c in comps)
        out.append(f"Compensations: {len(comps)} ({pending} pending)")
        for c in comps:
            maybe = ", step may have applied" if c["possibly_applied"] else ""
            out.append(f"  {c['state']:<8} {c['step']} -> {c['function']}  "
                       f"attempts {c['attempts']}{maybe}")  # fmt: skip
        if doc["compensation_failure"]:
            out.append(f"  stuck on: {_error_text(doc['compensation_failure'])}")
    return out


# -- stats -------------------------------------------------------------------------------------


async def _stats(args: argparse.Namespace) -> int:
    path = _journal_dir(args)
    now = time.time()
    async with _reading(path) as journal:
        with journal.reader() as r:
            counts = r.count_by_status()
            with_mail = list(r.instances_with_mail())
            unread = 0
            for iid in with_mail:
                try:
                    unread += len(r.mailbox(iid))
                except JournalCorrupt:
                    pass
            due = len(r.due_timers(now, limit=1 << 62))
            timers = len(r.due_timers(now + _FAR, limit=1 << 62))
            next_due = r.next_due(now)
    data = path / "data.mdb"
    st = data.stat()
    held, pid = _holder(path)
    doc = {
        "journal": str(path), "size_bytes": st.st_size, "disk_bytes": st.st_blocks * 512,
        "held": held, "held_by_pid": pid, "instances": sum(counts.values()),
        "by_status": {s: counts[s] for s in STATUSES if s in counts},
        "with_mail": len(with_mail), "unread_messages": unread,
        "timers": timers, "due_timers": due, "next_due": next_due,
    }  # fmt: skip

    def render() -> str:
        owner = f", pid {pid}" if pid else ""
        held_by = {True: f"a running system{owner}", False: "no running system"}.get(
            held, f"unknown (owner.lock names pid {pid})"
        )
        lines = [
            f"journal       {path}",
            f"size          {_bytes(doc['size_bytes'])} ({_bytes(doc['disk_bytes'])} on disk)",
            f"held by       {held_by}",
            f"instances     {doc['instances']}",
        ]
        lines += [f"  {s:<20}{n:>8}" for s, n in doc["by_status"].items()]
        lines.append(f"mail          {unread} unread message(s) in {len(with_mail)} instance(s)")
        nxt = f"; next {_when(next_due)} ({_ago(next_due, now)})" if next_due else ""
        lines.append(f"timers        {timers}, {due} due now{nxt}")
        return "\n".join(lines)

    _emit(args, doc, render)
    return OK


def _count(n: int, one: str, many: str | None = None) -> str:
    return "none" if n == 0 else f"{n} {one if n == 1 else many or one + 's'}"


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


# -- send and cancel ------------------------------------------------------------------------------


def _payload(text: str | None) -> Any:
    if text is None:
        return None
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(
            f'the payload is not JSON ({exc}); quote it for the shell, e.g. \'{{"by": "ann"}}\'',
            USAGE,
        ) from None


def _read_row(r: Reader, iid: bytes) -> InstanceRow | None:
    try:
        return r.instance(iid)
    except JournalCorrupt:
        return None  # the status precondition still decides


async def _send(args: argparse.Namespace) -> int:
    path = _journal_dir(args)
    try:
        signal = Signal(args.signal)
    except TypeError:
        raise CLIError(
            f"{args.signal!r} is not a signal name: give a non-empty name", USAGE
        ) from None
    payload = _payload(args.payload)
    iid = instance_id(args.address)
    try:
        async with _writing(path) as journal:
            with journal.reader() as r:
                row = _read_row(r, iid)
            txn = Txn()
            txn.require(iid, LIVE_STATUSES)  # as ActorSystem.send
            txn.append_message(iid, [signal.name, payload, time.time()])
            size = len(txn.ops[-1][2])
            if size > _MAX_PAYLOAD:
                raise CLIError(
                    f"the payload encodes to {size} bytes, over the default max_payload of "
                    f"{_MAX_PAYLOAD}; send a reference (an id or a path) instead"
                )
            try:
                (seq,) = await journal.commit(txn, durable=True)
            except Conflict:
                with journal.reader() as r:
                    raise _not_live(args.address, _read_row(r, iid)) from None
    except _Held as held:
        raise _held_error(path, held, f"send to {args.address!r}", "send") from None
    status = row.status if row is not None else "live"
    doc = {"sent": True, "address": args.address, "signal": signal.name, "payload": payload,
           "message": seq, "status": status}  # fmt: skip
    _emit(args, doc, lambda: (
        f"sent {signal.name!r} to {args.address} as message #{seq}; it is {status}, and "
        "takes the message when a system that runs its process next opens this journal"
    ))  # fmt: skip
    return OK


async def _cancel(args: argparse.Namespace) -> int:
    path = _journal_dir(args)
    try:
        async with _writing(path) as journal:
            with journal.reader() as r:
                root = _instance(r, args.address, path)
                if root.status not in _CANCELLABLE:
                    words = STATUS_WORDS.get(root.status, f"it is {root.status}")
                    at = root.record.get("updated")
                    raise CLIError(
                        f"nothing to cancel at {args.address!r}: {words}"
                        + (f" at {_when(at)}" if at and root.status in _TERMINAL else "")
                    )
                plan: list[tuple[InstanceRow, list[Any], str]] = []
                _plan_cancel(r, root, args.reason, plan, set())
            pending = [(row.address, len(_saga.pending(row.record))) for row, _, _ in plan
                       if _saga.pending(row.record)]  # fmt: skip
            if pending and not args.force:
                which = ", ".join(f"{a} ({n})" for a, n in pending)
                raise CLIError(
                    f"not cancelled: saga compensations are pending in {which}, and only "
                    "the application can run them; cancel through the application "
                    "(system.cancel), or pass --force to cancel without compensating"
                )
            txn = _cancel_txn(plan, time.time())
            try:
                await journal.commit(txn, durable=True)
            except Conflict as exc:  # pragma: no cover - we hold the journal
                raise CLIError(f"not cancelled: {exc}; try again") from None
    except _Held as held:
        raise _held_error(path, held, f"cancel {args.address!r}", "cancel") from None
    cancelled = [row.address for row, _, _ in plan]
    descendants = cancelled[:-1]
    doc = {"cancelled": cancelled, "address": args.address, "reason": args.reason,
           "uncompensated": [a for a, _ in pending]}  # fmt: skip

    def render() -> str:
        lines = [f"cancelled {args.address} ({root.status} before): {args.reason}"]
        if descendants:
            lines.append(f"and its {len(descendants)} live descendant(s), children first:")
            lines += [f"  {a}" for a in descendants]
        if pending:
            lines.append("compensations not run (--force): " + ", ".join(a for a, _ in pending))
        return "\n".join(lines)

    _emit(args, doc, render)
    return OK


def _plan_cancel(
    r: Reader, row: InstanceRow, reason: str, plan: list[Any], seen: set[bytes]
) -> None:
    """Add ``row`` to ``plan`` after its live descendants (depth first, as the runtime)."""
    seen.add(row.iid)
    try:
        log = r.log(row.iid, row.record.get("run", 0))
        timers = r.timers(row.iid)
        children = _sup.children_in_log(log)
        for address in children:
            iid = instance_id(address)
            if iid in seen:
                continue
            child = r.instance(iid)
            if child is not None and child.status in _CANCELLABLE:
                _plan_cancel(r, child, f"parent {row.address} cancelled", plan, seen)
    except JournalCorrupt as exc:
        raise CLIError(
            f"not cancelled: records under {row.address!r} are corrupt ({exc}); start a "
            "system on the journal, which marks corrupt instances, and cancel from there",
            CORRUPT,
        ) from None
    plan.append((row, timers, reason))


def _cancel_txn(plan: list[tuple[InstanceRow, list[Any], str]], now: float) -> Txn:
    """One transaction for the whole subtree, each write as `ActorSystem._cancel_iid` makes it."""
    txn = Txn()
    for row, timers, reason in plan:
        record = dict(row.record, reason=reason, updated=now, last_error=None)
        txn.require(row.iid, _CANCELLABLE)
        try:
            txn.put_instance(
                row.iid, address=row.address, process=row.process, status="cancelled",
                record=record,
            )  # fmt: skip
        except EncodeError as exc:
            raise CLIError(
                f"not cancelled: the record of {row.address!r} holds values of a class this "
                "process has not imported; pass --import MODULE for the module that defines "
                f"it ({exc})"
            ) from None
        for timer in timers:
            txn.cancel_timer(row.iid, timer.run, timer.seq)
        parent = row.record.get("parent")
        if row.record.get("awaited") and parent:
            end = fx.end_signal(row.address)
            txn.append_message(
                instance_id(parent), [end.name, _sup.end_payload("cancelled", record), now]
            )
    return txn


# -- tail ------------------------------------------------------------------------------------------


@attrs.define
class _Tail:
    """Where a tail is: the next index to print and what the last read saw."""

    args: argparse.Namespace
    path: Path
    iid: bytes
    position: int | None = None  # next index to print; None until first read
    cursor_before: int | None = None
    status: str | None = None
    length: int = 0
    printed: list[dict[str, Any]] = attrs.field(factory=list)

    def start(self, cursor: int | None) -> int:
        if cursor is not None:
            return cursor
        return 0 if self.args.from_ == "start" else self.length

    def read(self, r: Reader, *, from_cursor: bool) -> list[tuple[int, Any]]:
        row = r.instance(self.iid)
        if row is None:
            if self.position is None:
                raise CLIError(
                    f"no instance at {self.args.address!r} in {self.path}; check the address",
                    NOT_FOUND,
                )
            self.status = None  # cleaned up meanwhile
            return []
        self.status, self.length = row.status, r.stream_length(self.iid)
        cursor = r.cursors(self.iid).get(self.args.consumer)
        if self.position is None:
            self.cursor_before = cursor
        if from_cursor or self.position is None:
            self.position = self.start(cursor)
        return r.stream(self.iid, self.position, _BATCH)

    def show(self, values: list[tuple[int, Any]]) -> None:
        for index, value in values:
            if self.args.json and self.args.follow:
                print(json.dumps({"index": index, "value": _jsonable(value)}, ensure_ascii=False))
            elif self.args.json:
                self.printed.append({"index": index, "value": value})
            else:
                print(f"{index:>6}  {_compact(value, 1 << 20)}")
        sys.stdout.flush()
        if values:
            self.position = values[-1][0] + 1


async def _tail(args: argparse.Namespace) -> int:
    if not args.follow:
        return await _tail_loop(args, trio.Event())
    # Ctrl-C ends a follow between polls, never between printing values and
    # recording that they were consumed.
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for _ in signals:
                    stop.set()

            nursery.start_soon(watch)
            code = await _tail_loop(args, stop)
            nursery.cancel_scope.cancel()
    return INTERRUPTED if stop.is_set() else code


async def _tail_loop(args: argparse.Namespace, stop: trio.Event) -> int:
    path = _journal_dir(args)
    tail = _Tail(args, path, instance_id(args.address))
    advancing = True
    first = True
    while not stop.is_set():
        if advancing and (first or await _tail_has_new(tail)):
            try:
                async with _writing(path) as journal:
                    with journal.reader() as r:
                        values = tail.read(r, from_cursor=True)
                    tail.show(values)
                    if tail.position is not None and (
                        values or (first and tail.cursor_before is None)
                    ):  # a value printed counts as consumed; a new consumer is recorded
                        txn = Txn()
                        txn.set_cursor(tail.iid, args.consumer, tail.position)
                        await journal.commit(txn, durable=True)
            except _Held as held:
                advancing = False
                pid = f" (pid {held.pid})" if held.pid else ""
                print(
                    f"actors: the journal is owned by a running system{pid}: printing from the "
                    f"cursor of consumer {args.consumer!r} without moving it (read through "
                    "the application, system.stream(...), to consume)",
                    file=sys.stderr,
                )
                continue
        elif not advancing:
            async with _reading(path) as journal:
                with journal.reader() as r:
                    values = tail.read(r, from_cursor=False)
            tail.show(values)
        first = False
        assert tail.position is not None
        if tail.position < tail.length and tail.status is not None:
            continue  # more than one batch waiting
        if not args.follow or tail.status is None or tail.status in _TERMINAL:
            break
        with trio.move_on_after(args.interval):
            await stop.wait()
    if args.json and not args.follow:
        doc = {"address": args.address, "consumer": args.consumer, "read_only": not advancing,
               "cursor_before": tail.cursor_before, "cursor_after": tail.position,
               "length": tail.length, "status": tail.status, "values": tail.printed}  # fmt: skip
        print(json.dumps(_jsonable(doc), indent=2, ensure_ascii=False))
    elif not args.json and not args.follow:
        moved = "moved to" if advancing else "left at"
        before = tail.cursor_before if tail.cursor_before is not None else "(new)"
        after = tail.position if advancing else before
        print(f"actors: consumer {args.consumer!r}: cursor {before}, {moved} {after} of "
              f"{tail.length} values", file=sys.stderr)  # fmt: skip
    if tail.status is None and tail.position is not None:
        print(f"actors: {args.address!r} was removed from the journal", file=sys.stderr)
    return OK


async def _tail_has_new(tail: _Tail) -> bool:
    """Peek without the owner lock: are there values past the position?"""
    async with _reading(tail.path) as journal:
        with journal.reader() as r:
            row = r.instance(tail.iid)
            tail.status = row.status if row is not None else None
            tail.length = r.stream_length(tail.iid)
    return tail.position is not None and tail.length > tail.position


_COMMANDS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "list": _list, "show": _show, "send": _send, "cancel": _cancel, "tail": _tail,
    "stats": _stats,
}  # fmt: skip
