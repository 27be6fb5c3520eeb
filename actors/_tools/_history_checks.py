"""What a history file must be before it is read: the checks `start` makes.

`actors._tools._history.loads` reads a file someone else wrote, to import it into
a journal where the runtime will trust it as its own. So a history is held
to what the runtime checks when it is given the same things (`start`, a
send, `process`): every address is its process template's, filled with its
path params (under its parent's address for a child), and each param a
non-empty name without "/" (`ProcessDef.resolve`); names hold no NUL or
other control character (`_checks.check_name`), except the runtime's own
signal names, which start with one of its prefixes; statuses are the
documented ones; numbers are in range (a due time is a finite epoch within
`_checks.MAX_SECONDS`); keys and addresses are within the journals' limits.

Bounds: the JSON document nests at most `MAX_DEPTH` levels (a reader that
recursed further would overflow Python's stack: `too_deep` finds the place
without recursing, and `deep_at` finds it in text JSON could not parse).

Each check raises `HistoryFormatError` through `_history_values.bad`: one
line naming the path in the file (``instances[0]['record']['params'][0]``)
and what is wrong. The checks read the parsed document, whose shapes
`_history_file._Doc` has checked before (a list is a list, a str a str).
"""

from __future__ import annotations

import math
import re
from typing import Any

from storage import MAX_ADDRESS_BYTES, STATUSES

from .._kernel._checks import MAX_SECONDS
from .._kernel._message_txns import MAX_KEY_BYTES
from .._kernel._process import RESTART_TYPES
from ._history_values import bad

__all__ = [
    "ENTRY_TYPES",
    "IMPORTABLE_STATUSES",
    "MAX_DEPTH",
    "RECORD_TYPES",
    "as_tuple",
    "check_document",
    "check_types",
    "deep_at",
    "show",
    "too_deep",
]

#: How deep a history's JSON may nest, values included (a value nests some
#: 190 levels below the document's own). The codec carries deeper lists,
#: which a history cannot hold.
MAX_DEPTH = 200

#: The statuses an imported instance may have (docs/histories.md): every
#: status but "corrupt", which names a journal's damage, not an instance's state.
IMPORTABLE_STATUSES = frozenset(STATUSES) - {"corrupt"}

# The runtime's own signal names (mail it sends itself: a child's end, a
# reply, a supervisor's orders) start with NUL and one of these words.
_RUNTIME_SIGNALS = (
    "\x00end ",
    "\x00reply ",
    "\x00ask ",
    "\x00escalate",
    "\x00cancel",
    "\x00restart",
)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_FAILURE_ENDS = (None, "failed", "cancelled")
_SHOWN = 60  # characters of a value a message shows


def show(value: Any) -> str:
    """``value``'s repr, cut to a length a one-line message can hold."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


# -- shapes ------------------------------------------------------------------------------


_N = type(None)
_NUM = (int, float)
# The type each field may have, by its name in the file (the journal checks
# them again, by its own names, on the stored form).
RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "params": (list,),
    "input": (dict, _N),
    "run": (int,),
    "incarnation": (int,),
    "created": (*_NUM, _N),
    "updated": (*_NUM, _N),
    "trace": (str, _N),
    "parent": (str, _N),
    "awaited": (bool,),
    "restart": (str, _N),
    "restarts": (list,),
    "error": (dict, _N),
    "reason": (str, _N),
    "last_error": (str, _N),
    "held": (str, _N),
    "failure": (dict, _N),
    "failure_end": (str, _N),
    "stuck": (dict, _N),
    "abandoned": (bool,),
    "compensations": (list,),
    "compensated": (list,),
    "comp_attempts": (dict,),
    "exports_version": (int,),
    "extra": (dict,),
}
ENTRY_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "name": (str,),
    "error": (dict,),
    "message": (int,),
    "signal": (str,),
    "attempt": (int,),
    "failures": (int,),
    "closed": (int,),
    "key": (str,),
    "due": _NUM,
    "child": (str,),
    "ask": (list,),
    "parts": (list,),
    "extra": (dict,),
}
# The list fields of an entry whose elements have a shape: the types at
# each position, and the words for it.
ENTRY_LISTS: dict[str, tuple[tuple[tuple[type, ...], ...], str]] = {
    "ask": (((str,), (str,), (str, _N)), "[ask id, reply-to address, node]"),
}


def check_types(fields: dict[str, Any], types: dict[str, tuple[type, ...]], at: str) -> None:
    """Each of ``fields`` is of a type ``types`` allows it (a bool only where named)."""
    for name, value in fields.items():
        allowed = types.get(name)
        if allowed is not None and (
            not isinstance(value, allowed) or (type(value) is bool and bool not in allowed)
        ):
            raise bad(f"{at}[{name!r}]", f"is {show(value)}, a {type(value).__name__}")


def as_tuple(types: Any) -> tuple[Any, ...]:
    """``types`` (a type or a tuple of them, as isinstance takes) as a tuple."""
    return types if isinstance(types, tuple) else (types,)


# -- depth -------------------------------------------------------------------------------


def too_deep(doc: Any) -> str | None:
    """The path of the first place ``doc`` nests past `MAX_DEPTH`, or None.
    Iterative: a document deep enough to matter would overflow recursion."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(doc, 1, ())]
    while stack:
        value, depth, path = stack.pop()
        if not isinstance(value, (list, dict)):
            continue
        if depth > MAX_DEPTH:
            return _path(path)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        stack.extend((item, depth + 1, (*path, key)) for key, item in items)
    return None


def _path(path: tuple[Any, ...]) -> str:
    """``instances[0]['mail'][0]['payload'][0]...``: as the other checks name places."""
    parts = [f"[{key!r}]" if isinstance(key, str) else f"[{key}]" for key in path[1:]]
    if len(parts) > 12:  # the start says where; the rest is the same brackets again
        parts = [*parts[:12], "..."]
    return f"{path[0]}{''.join(parts)}" if path else "the history"


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def deep_at(text: str) -> tuple[int, int] | None:
    """Line and column (from 1) where ``text`` (JSON) opens its level
    `MAX_DEPTH` + 1, or None if it never nests that deep."""
    depth = 0
    for token in _TOKEN.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                start = token.start()
                line = text.count("\n", 0, start) + 1
                return line, start - (text.rfind("\n", 0, start) + 1) + 1
        elif char in "]}":
            depth -= 1
    return None


# -- the document ------------------------------------------------------------------------


def check_document(doc: dict[str, Any]) -> None:
    """Check every instance of a parsed history as `start` would check it.

    Raises:
        HistoryFormatError: the first thing wrong, naming where it is.
    """
    for i, one in enumerate(doc["instances"]):
        _instance(one, f"instances[{i}]")


def _instance(one: dict[str, Any], at: str) -> None:
    record = one["record"]
    params = _template_params(one["process"], f"{at}['process']")
    _address(one["address"], f"{at}['address']")
    if one["status"] not in IMPORTABLE_STATUSES:
        raise bad(
            f"{at}['status']",
            f"is {show(one['status'])}, not a status (one of {sorted(IMPORTABLE_STATUSES)})",
        )
    _record(record, f"{at}['record']", len(params))
    expected = _resolve(one["process"], record["params"])
    parent = record.get("parent")
    if parent is not None:
        expected = f"{parent}/{expected}"
    if one["address"] != expected:
        raise bad(
            f"{at}['address']",
            f"is {show(one['address'])}, but process {show(one['process'])} with params "
            f"{show(record['params'])}"
            + (f" under parent {show(parent)}" if parent is not None else "")
            + f" is at {show(expected)}",
        )
    for i, run in enumerate(one["runs"]):
        where = f"{at}['runs'][{i}]"
        _count(run["run"], f"{where}['run']")
        for j, entry in enumerate(run["log"]):
            _entry(entry, f"{where}['log'][{j}]")
    for i, message in enumerate(one["mail"]):
        where = f"{at}['mail'][{i}]"
        _count(message["id"], f"{where}['id']")
        _signal(message["signal"], f"{where}['signal']")
        _time(message.get("sent"), f"{where}['sent']")
        _text(message.get("trace"), f"{where}['trace']")
    for i, timer in enumerate(one["timers"]):
        where = f"{at}['timers'][{i}]"
        _count(timer["run"], f"{where}['run']")
        _count(timer["effect"], f"{where}['effect']", least=1)
        _time(timer["due"], f"{where}['due']")
    for name in one.get("consumers", {}):
        _name(name, f"{at}['consumers'][{show(name)}]")
    for i, key in enumerate(one.get("send_keys", [])):
        where = f"{at}['send_keys'][{i}]"
        _name(key, where)
        if len(key.encode()) > MAX_KEY_BYTES:
            raise bad(where, f"is longer than the {MAX_KEY_BYTES} bytes a send key may be")
    for i, kept in enumerate(one.get("incarnations", [])):
        where = f"{at}['incarnations'][{i}]"
        _count(kept["incarnation"], f"{where}['incarnation']", least=1)
        kept_params = _template_params(kept["process"], f"{where}['process']")
        if kept["status"] not in IMPORTABLE_STATUSES:
            raise bad(f"{where}['status']", f"is {show(kept['status'])}, not a status")
        _time(kept["replaced"], f"{where}['replaced']")
        _record(kept["record"], f"{where}['record']", len(kept_params))


def _record(record: dict[str, Any], at: str, params: int) -> None:
    given = record["params"]
    if len(given) != params:
        raise bad(f"{at}['params']", f"holds {len(given)} params, and its process takes {params}")
    for i, param in enumerate(given):
        where = f"{at}['params'][{i}]"
        _name(param, where)
        if "/" in param:
            raise bad(where, f"is {show(param)}: a path param holds no '/'")
    if record.get("parent") is not None:
        _address(record["parent"], f"{at}['parent']")
    for name, least in (("run", 0), ("incarnation", 1), ("exports_version", 0)):
        if name in record:
            _count(record[name], f"{at}[{name!r}]", least=least)
    for name in ("created", "updated"):
        _time(record.get(name), f"{at}[{name!r}]")
    if record.get("restart") not in (None, *RESTART_TYPES):
        raise bad(f"{at}['restart']", f"is {show(record['restart'])}, not one of {RESTART_TYPES}")
    if record.get("failure_end") not in _FAILURE_ENDS:
        raise bad(
            f"{at}['failure_end']", f"is {show(record['failure_end'])}, not failed or cancelled"
        )
    for name in ("trace", "reason", "last_error", "held"):
        _text(record.get(name), f"{at}[{name!r}]")


def _entry(entry: dict[str, Any], at: str) -> None:
    _count(entry["effect"], f"{at}['effect']", least=1)
    _name(entry["kind"], f"{at}['kind']")
    if entry.get("name"):
        _signal(entry["name"], f"{at}['name']")
    for name in ("message", "attempt", "failures", "closed"):
        if entry.get(name) is not None:
            _count(entry[name], f"{at}[{name!r}]")
    if entry.get("signal") is not None:
        _signal(entry["signal"], f"{at}['signal']")
    if entry.get("child") is not None:
        _address(entry["child"], f"{at}['child']")
    if entry.get("key") is not None:
        _name(entry["key"], f"{at}['key']")
    _time(entry.get("due"), f"{at}['due']")
    for name, (shape, words) in ENTRY_LISTS.items():
        value = entry.get(name)
        if value is not None and not (
            len(value) == len(shape) and all(map(isinstance, value, shape))
        ):
            raise bad(f"{at}[{name!r}]", f"is {show(value)}, not {words}")


# -- names and numbers -------------------------------------------------------------------


def _template_params(template: str, at: str) -> list[str]:
    """The param names of process template ``template`` (checked as `process` does)."""
    _name(template, at)
    segments = template.split("/")
    if template.startswith("/") or template.endswith("/") or any(s in ("", ":") for s in segments):
        raise bad(at, f"is {show(template)}, not a process template like 'orders/:order_id'")
    names = [s[1:] for s in segments if s.startswith(":")]
    if len(set(names)) != len(names):
        raise bad(at, f"is {show(template)}, which repeats a param name")
    return names


def _resolve(template: str, params: list[str]) -> str:
    """The address `ProcessDef.resolve` gives: each ``:name`` segment, its param."""
    given = iter(params)
    return "/".join(next(given) if s.startswith(":") else s for s in template.split("/"))


def _address(address: str, at: str) -> None:
    _name(address, at)
    if len(address.encode()) > MAX_ADDRESS_BYTES:
        raise bad(at, f"is longer than the {MAX_ADDRESS_BYTES} bytes an address may be")


def _name(value: Any, at: str) -> None:
    if not isinstance(value, str) or not value:
        raise bad(at, f"is {show(value)}, not a name (a non-empty str)")
    _no_control(value, at)


def _signal(value: Any, at: str) -> None:
    """A signal or step name: a name, or one of the runtime's own."""
    if isinstance(value, str) and value.startswith(_RUNTIME_SIGNALS):
        prefix = next(p for p in _RUNTIME_SIGNALS if value.startswith(p))
        _no_control(value[len(prefix) :], at)
        return
    _name(value, at)


def _text(value: Any, at: str) -> None:
    if value is not None:
        _no_control(value, at, allowed="\t\n\r")


def _no_control(value: str, at: str, allowed: str = "") -> None:
    found = next((m for m in _CONTROL.finditer(value) if m.group() not in allowed), None)
    if found is not None:
        code = ord(found.group())
        char = "NUL" if code == 0 else f"U+{code:04X}"
        raise bad(at, f"holds a control character ({char} at index {found.start()})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise bad(at, f"is not valid Unicode (a lone surrogate at index {exc.start})") from None


def _count(value: Any, at: str, *, least: int = 0) -> None:
    if type(value) is not int or value < least:
        raise bad(at, f"is {show(value)}, not a whole number of {least} or more")


def _time(value: Any, at: str) -> None:
    """None, or epoch seconds: finite, from 0 to `MAX_SECONDS`."""
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise bad(at, f"is {show(value)}, not epoch seconds")
    if not (math.isfinite(value) and 0 <= value <= MAX_SECONDS):
        raise bad(at, f"is {show(value)}, not epoch seconds from 0 to {MAX_SECONDS:.0f}")
