"""The code written for the journal's records, as attrs writes an
``__init__``: `InstanceRecord.to_stored`, `InstanceRecord.evolve`,
`LogEntry.build` and a reader per stored shape of record or entry, each
written out field by field (a loop over the fields cost two to three
times as much, and every change of an instance's state, every effect and
every wake goes through one of them).

The source of each holds only names of ours (field names, stored keys from
`storage._stored`, defaults by name) and is registered in `linecache`, so
tracebacks and debuggers show it.

Every function here takes the record class and its unfrozen twin (the same
slots with plain attribute stores, see `storage._records._Unfrozen`): a
maker fills the twin, then sets ``__class__`` to the frozen class before
anyone else sees it.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from ._stored import (
    ALWAYS,
    ENTRY_DEFAULTS,
    ENTRY_POSITION,
    ENTRY_TYPES,
    NO_VALUE,
    NONE,
    NOTHING,
    RECORD_KEYS,
)

__all__ = [
    "ShapeReaders",
    "write_entry_builder",
    "write_record_evolve",
    "write_record_reader",
    "write_record_to_stored",
    "write_shape_reader",
]

_Record = TypeVar("_Record", bound=attrs.AttrsInstance)


def _define(source: str, filename: str, scope: dict[str, Any], name: str) -> Any:
    """Compile ``source`` and return the function ``name`` it defines, with
    its source registered in `linecache` under ``filename`` (as attrs does
    for the methods it writes), so that tracebacks and debuggers show it."""
    exec(compile(source, filename, "exec"), scope)  # our own source: names of ours only
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return scope[name]


# -- instance records


def write_record_to_stored(record: type) -> Callable[[Any], dict[str, Any]]:
    """`InstanceRecord.to_stored`: each field away from its default, under
    its stored key; run and incarnation always; then the kept extra keys."""
    fields = attrs.fields(record)
    lines = ["def to_stored(self):", "    stored = {}"]
    scope: dict[str, Any] = {}
    for key, (name, _) in RECORD_KEYS.items():
        default = getattr(fields, name).default
        if name in ALWAYS:
            lines.append(f"    stored[{key!r}] = self.{name}")
            continue
        lines.append(f"    value = self.{name}")
        if default in NOTHING:
            lines.append("    if value:")  # an empty container means the default
        elif default is None:
            lines.append("    if value is not None:")
        else:
            scope[f"default_{name}"] = default
            lines.append(f"    if value != default_{name}:")
        lines.append(f"        stored[{key!r}] = value")
    lines += ["    if self.extra:", "        stored.update(self.extra)", "    return stored"]
    to_stored: Callable[[Any], dict[str, Any]] = _define(
        "\n".join(lines), "<InstanceRecord.to_stored>", scope, "to_stored"
    )
    return to_stored


def write_record_evolve(
    record: type[_Record], unfrozen: type[_Record]
) -> Callable[[_Record, dict[str, Any]], _Record]:
    """`InstanceRecord.evolve`: copy every slot into an ``unfrozen``, set
    the changed ones (a name that is no field is refused), freeze it."""
    names = [f.name for f in attrs.fields(record)]
    lines = ["def evolve(self, changes):", "    new = object_new(Unfrozen)"]
    lines += [f"    new.{name} = self.{name}" for name in names]
    lines += [
        "    for name, value in changes.items():",
        "        if name not in NAMES:",
        "            raise TypeError(f'InstanceRecord has no field {name!r}')",
        "        setattr(new, name, value)",
        "    new.__class__ = InstanceRecord",
        "    return new",
    ]
    scope: dict[str, Any] = {
        "InstanceRecord": record,
        "Unfrozen": unfrozen,
        "object_new": object.__new__,
        "NAMES": frozenset(names),
    }
    evolve: Callable[[_Record, dict[str, Any]], _Record] = _define(
        "\n".join(lines), "<InstanceRecord.evolve>", scope, "evolve"
    )
    return evolve


def write_record_reader(
    record: type, unfrozen: type, keys: tuple[Any, ...]
) -> Callable[[dict[Any, Any]], Any] | None:
    """The reader of records stored with ``keys`` (a `ShapeReaders` writer),
    or None for the checked way. It takes what `InstanceRecord._checked`
    takes, checking each field by the exact class msgpack gives, and returns
    None for anything else."""
    if not all(type(key) is str and key in RECORD_KEYS for key in keys):
        return None  # a field of another version: kept in extra, the checked way
    fields = attrs.fields(record)
    names = {key: f"_{i}" for i, key in enumerate(keys)}
    refused = [_refused(names[key], RECORD_KEYS[key][1] or None) for key in keys]
    if "run" in names:  # journals key log entries by a 4-byte run
        refused.append(f"not 0 <= {names['run']} <= 0xFFFFFFFF")
    for key, part in (("restarts", "at"), ("compensations", "id")):
        if key in names:
            refused.append(f"not all(i.__class__ is dict and {part!r} in i for i in {names[key]})")
    condition = " or ".join(r for r in refused if r) or "False"
    # The source holds only names of ours: keys of RECORD_KEYS, fields by
    # name; a field the map leaves out takes its default (each is immutable).
    given = {RECORD_KEYS[key][0]: names[key] for key in keys}
    stores = [f"new.{f.name} = {given.get(f.name, f'default_{f.name}')}" for f in fields]
    source = "\n    ".join(
        [
            "def read(stored):",
            f"{', '.join(names.values())}, = stored.values()" if keys else "pass",
            f"if {condition}:",
            "    return None",
            "new = object_new(Unfrozen)",  # filled in, then frozen (see _Unfrozen)
            *stores,
            "new.__class__ = InstanceRecord",
            "return new",
        ]
    )
    scope: dict[str, Any] = {
        "InstanceRecord": record,
        "Unfrozen": unfrozen,
        "object_new": object.__new__,
        **{f"default_{f.name}": f.default for f in fields},
    }
    read: Callable[[dict[Any, Any]], Any] = _define(
        source, f"<InstanceRecord reader of {keys!r}>", scope, "read"
    )
    return read


# -- log entries


def write_entry_builder(entry: type, unfrozen: type) -> Callable[..., Any]:
    """`LogEntry.build`: LogEntry.__init__'s parameters and defaults, written
    out with plain stores into an ``unfrozen``."""
    fields = attrs.fields(entry)
    first, rest = [f.name for f in fields[:3]], fields[3:]
    keywords = ", ".join(f"{f.name}={_literal(f.default)}" for f in rest)
    params = f"{', '.join(first)}, *, {keywords}"
    names = [f.name for f in fields]
    build: Callable[..., Any] = _define_entry_maker(
        entry, unfrozen, "build", params, [], names, "<LogEntry.build>"
    )
    build.__doc__ = """``LogEntry(kind, name, hash, **fields)`` at about half the
    cost (plain stores, then frozen: see `_UnfrozenEntry`); the runtime makes
    one for every effect it logs."""
    return build


def write_shape_reader(
    entry: type, unfrozen: type, keys: tuple[Any, ...]
) -> Callable[[dict[Any, Any]], Any] | None:
    """The reader of entries stored with ``keys`` (a `ShapeReaders` writer),
    or None for the checked way."""
    if "k" not in keys or not all(type(key) is str and key in ENTRY_POSITION for key in keys):
        return None
    # The source holds only names of ours: every key is one of ENTRY_KEYS,
    # and its value is named by its field's position.
    given = {ENTRY_POSITION[key]: f"_{ENTRY_POSITION[key]}" for key in keys}
    refused = [_refused(given[i], types) for i, types in enumerate(ENTRY_TYPES) if i in given]
    if ENTRY_POSITION["due"] not in given:
        refused.append('_0 == "sleep"')  # a timer's entry without its due time ('due')
    values = [given.get(i, _literal(default)) for i, default in enumerate(ENTRY_DEFAULTS)]
    values.append("None")  # extra: every key is known
    checks = [
        f"{', '.join(given[ENTRY_POSITION[key]] for key in keys)}, = stored.values()",
        f"if {' or '.join(r for r in refused if r)}:",
        "    return None",
    ]
    filename = f"<LogEntry reader of {keys!r}>"
    read: Callable[[dict[Any, Any]], Any] = _define_entry_maker(
        entry, unfrozen, "read", "stored", checks, values, filename
    )
    return read


def _define_entry_maker(
    entry: type,
    unfrozen: type,
    name: str,
    params: str,
    checks: list[str],
    values: list[str],
    filename: str,
) -> Any:
    """Function ``name`` taking ``params``: ``checks`` (source lines) first,
    then what every maker of entries does: fill an ``unfrozen`` with
    ``values`` (source text, one per field, in order), freeze it, return it."""
    fields = [f.name for f in attrs.fields(entry)]
    stores = [f"entry.{field} = {value}" for field, value in zip(fields, values, strict=True)]
    body = ["entry = new(Unfrozen)", *stores, "entry.__class__ = LogEntry", "return entry"]
    scope: dict[str, Any] = {
        "LogEntry": entry,
        "Unfrozen": unfrozen,
        "NO_VALUE": NO_VALUE,
        "new": object.__new__,
    }
    source = "\n    ".join([f"def {name}({params}):", *checks, *body])
    return _define(source, filename, scope, name)


def _refused(name: str, types: tuple[type, ...] | None) -> str:
    """Source text that is true when ``name`` is not of an exact class of ``types``."""
    if types is None:
        return ""
    exact = [f"{name} is None" if t is NONE else f"{name}.__class__ is {t.__name__}" for t in types]
    return f"not ({' or '.join(exact)})"


def _literal(default: Any) -> str:
    """A field's default as source text."""
    return "NO_VALUE" if default is NO_VALUE else repr(default)


# -- reading one shape fast
#
# The writer stores every entry of a kind with the same keys in the same
# order (and every record of the same fields so), so a log holds a handful
# of shapes. For each shape made only of known keys, a reader is written
# that unpacks the values by position, checks each field whose type
# matters by its exact class (msgpack gives exactly str, int, float, list,
# dict or None for those) and fills a new entry's fields. It returns None
# for anything it does not take (a subclass, a value of another type, a
# timer without its due time): then the checked way (`LogEntry._checked`,
# `InstanceRecord._checked`) decides. The fast way takes only what the
# checked one takes, and builds the same value from it.

_SHAPES_KEPT = 64  # a damaged journal may hold any number of shapes; these many are kept


class ShapeReaders(dict[tuple[Any, ...], Any]):
    """The keys of a stored map, in their order -> its reader, or None: the
    checked way. A shape's reader is written (by ``write``) at its first map."""

    def __init__(self, write: Callable[[tuple[Any, ...]], Any]) -> None:
        super().__init__()
        self._write = write

    def __missing__(self, keys: tuple[Any, ...]) -> Any:
        read = self._write(keys)
        if len(self) < _SHAPES_KEPT:
            self[keys] = read
        return read

    def read(self, stored: Any) -> Any:
        """What the reader of ``stored``'s shape makes of it; None where the
        checked way is to decide (not a map, a shape or value it does not take)."""
        if type(stored) is not dict:
            return None
        read = self[tuple(stored)]
        return None if read is None else read(stored)
