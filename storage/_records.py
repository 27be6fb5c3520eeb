"""The journal's records, typed: `InstanceRecord` (the runtime's snapshot
of one instance) and `LogEntry` (one position of a run's effect log).

A journal stores it as a msgpack map beside the instance's status and
address (see `Txn.put_instance`) and hands it back as an `InstanceRecord`
in `InstanceRow.record`; nothing reads it with string keys.

The stored map keeps the short field names written since the first
journal format (``inc`` for the incarnation) and leaves out fields at
their defaults, so records written by earlier versions read unchanged and
new ones stay small. A field this version does not know is kept in
``extra`` and written back as it was, never dropped.

Reading checks the type of every field the runtime uses: valid msgpack of
another shape (a damaged byte that still decodes) is reported as corrupt
where it is read, naming database and key, instead of failing deep in the
runtime with an AttributeError.
"""

from __future__ import annotations

import functools
import linecache
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import attrs

__all__ = ["NO_VALUE", "InstanceRecord", "LogEntry", "RecordShapeError"]


class RecordShapeError(ValueError):
    """A stored record decoded to a value of the wrong shape; the message
    says what is wrong (the journal turns it into `JournalCorrupt`)."""


# The default of the record's container fields: shared and immutable, so a
# record allocates nothing for the fields it does not use (there is one per
# live instance).
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@attrs.frozen(slots=True)
class InstanceRecord:
    """What the runtime keeps about one instance, beside its status.

    Frozen: a change is a new record (`evolve`), written by the
    transaction that records it, so a write that fails to encode leaves the
    record in memory as it was.
    """

    # -- identity and input
    #: the path params, one per ``:name`` of the process template
    params: Sequence[str] = ()
    #: the keyword input the process was started with (or continued as new with)
    input: dict[str, Any] | None = None
    #: the run number: one on per restart and continue-as-new (keys the log)
    run: int = 0
    #: the incarnation: one on each time the address starts afresh after an end
    incarnation: int = 1
    created: float | None = None
    updated: float | None = None
    #: the starter's W3C traceparent, when tracing was on
    trace: str | None = None

    # -- supervision
    #: the parent's address, for a child
    parent: str | None = None
    #: whether the parent waits for this child's end (``ctx.call``)
    awaited: bool = False
    #: the child's restart type ("permanent", "transient", "temporary")
    restart: str | None = None
    #: each restart so far: ``{"at": epoch, "reason": ..., "count": n}``
    restarts: Sequence[dict[str, Any]] = ()

    # -- how it ended, or why it is parked
    result: Any = None
    #: the error record (`describe_error`) of a failed instance
    error: dict[str, Any] | None = None
    #: why it was cancelled
    reason: str | None = None
    #: why a live instance is suspended or stuck (e.g. a NonDeterminismError)
    last_error: str | None = None
    #: why a live instance cannot run until its code or the system's
    #: configuration changes, in a few words ("non-determinism at effect 4",
    #: "process 'shipment/:id' not registered"); cleared when it runs again
    held: str | None = None

    # -- saga
    #: the failure being compensated, and the end it leads to ("failed", "cancelled")
    failure: dict[str, Any] | None = None
    failure_end: str | None = None
    #: the error record of a compensation that is stuck
    stuck: dict[str, Any] | None = None
    #: set when an operator abandoned a stuck compensation
    abandoned: bool = False
    #: each registered compensation, in order: ``{"id": ..., "name": ..., ...}``
    compensations: Sequence[dict[str, Any]] = ()
    #: the ids of the compensations that ran to completion
    compensated: Sequence[str] = ()
    #: compensation id -> attempts made so far
    comp_attempts: Mapping[str, int] = _EMPTY

    # -- exports
    exports: Any = None
    #: one on per publish; 0 before any
    exports_version: int = 0

    #: stored fields this version does not know, kept as they were
    extra: Mapping[str, Any] = _EMPTY

    def to_stored(self) -> dict[str, Any]:
        """The map to encode: the fields away from their defaults."""
        return _record_to_stored(self)  # written below, once its fields are known

    def evolve(self, **changes: Any) -> InstanceRecord:
        """A copy with ``changes`` (field names), as `attrs.evolve` makes
        one at half its cost: a record is replaced at every change of an
        instance's state."""
        return _record_evolve(self, changes)

    @classmethod
    def new(cls, **fields: Any) -> InstanceRecord:
        """``InstanceRecord(**fields)`` at a third of its cost: every start
        makes one (see `_Unfrozen`)."""
        return _record_evolve(_DEFAULT_RECORD, fields)

    @classmethod
    def from_stored(cls, value: Any) -> InstanceRecord:
        """The record a stored map holds.

        Raises:
            RecordShapeError: the value is not a map, or a field has a type
                the runtime cannot use.
        """
        # Every send and wake reads a record: a map of a shape seen before
        # takes the reader written for that shape (as log entries do, below);
        # anything it does not take goes the checked way, which says why.
        record: InstanceRecord | None = _RECORD_READERS.read(value)
        return record if record is not None else cls._checked(value)

    @classmethod
    def _checked(cls, value: Any) -> InstanceRecord:
        """`from_stored`, field by field: every shape, and the words for
        what is wrong with one."""
        if not isinstance(value, dict):
            raise RecordShapeError(f"the record is a {type(value).__name__}, not a map")
        fields: dict[str, Any] = {}
        extra: dict[str, Any] | None = None
        for key, field in value.items():
            known = _READ.get(key)
            if known is None:
                if extra is None:
                    extra = {}
                extra[key] = field
                continue
            name, types = known
            if types and (
                not isinstance(field, types) or (isinstance(field, bool) and bool not in types)
            ):
                raise RecordShapeError(
                    f"the record's {key!r} is {field!r}, a {type(field).__name__}"
                )
            fields[name] = field
        if extra is not None:
            fields["extra"] = extra
        record = cls(**fields)
        if not 0 <= record.run <= 0xFFFFFFFF:  # journals key log entries by a 4-byte run
            raise RecordShapeError(f"the record's run number {record.run} is out of range")
        for name, items, part in (
            ("restarts", record.restarts, "at"),
            ("compensations", record.compensations, "id"),
        ):
            for item in items:
                if not isinstance(item, dict) or part not in item:
                    raise RecordShapeError(
                        f"the record's {name!r} holds {item!r}, not a map with {part!r}"
                    )
        return record

    def params_problem(self, process: str) -> str | None:
        """What is wrong with the path params for ``process`` (one non-empty
        str without "/" per ``:name`` segment), if anything."""
        wanted = _params_wanted(process)
        if len(self.params) != wanted:
            return (
                f"the record has {len(self.params)} path param(s) where {process!r} takes {wanted}"
            )
        for param in self.params:
            if not isinstance(param, str) or not param or "/" in param:
                return f"the record's path param {param!r} is not a non-empty str without '/'"
        return None


_ATTRS = attrs.fields(InstanceRecord)
# Records are also built without __init__ (evolve, new, the shape readers),
# which is right only while __init__ does nothing but store its arguments
# and every default is one immutable value.
assert all(f.validator is None and f.converter is None for f in _ATTRS)
assert not any(isinstance(f.default, attrs.Factory) for f in _ATTRS)  # type: ignore[arg-type]
assert not hasattr(InstanceRecord, "__attrs_post_init__")
_NUMBER = (int, float)
_NONE = type(None)
# stored key -> (field, the types its value may have, () for any); a stored
# key is the field's name except where the first format chose a shorter one
_READ: dict[str, tuple[str, tuple[type, ...]]] = {
    "params": ("params", (list,)),
    "input": ("input", (dict, _NONE)),
    "run": ("run", (int,)),
    "inc": ("incarnation", (int,)),
    "created": ("created", (*_NUMBER, _NONE)),
    "updated": ("updated", (*_NUMBER, _NONE)),
    "trace": ("trace", (str, _NONE)),
    "parent": ("parent", (str, _NONE)),
    "awaited": ("awaited", (bool,)),
    "restart": ("restart", (str, _NONE)),
    "restarts": ("restarts", (list,)),
    "result": ("result", ()),
    "error": ("error", (dict, _NONE)),
    "reason": ("reason", (str, _NONE)),
    "last_error": ("last_error", (str, _NONE)),
    "held": ("held", (str, _NONE)),
    "failure": ("failure", (dict, _NONE)),
    "failure_end": ("failure_end", (str, _NONE)),
    "stuck": ("stuck", (dict, _NONE)),
    "abandoned": ("abandoned", (bool,)),
    "compensations": ("compensations", (list,)),
    "compensated": ("compensated", (list,)),
    "comp_attempts": ("comp_attempts", (dict,)),
    "exports": ("exports", ()),
    "exports_version": ("exports_version", (int,)),
}
# the empty containers that mean "the default": a record read with an empty
# list is stored like one never given any
_NOTHING = ((), _EMPTY)
# stored even at their defaults: every record names its run and incarnation
_ALWAYS = frozenset({"run", "incarnation"})


def _define(source: str, filename: str, scope: dict[str, Any], name: str) -> Any:
    """Compile ``source`` and return the function ``name`` it defines, with
    its source registered in `linecache` under ``filename`` (as attrs does
    for the methods it writes), so that tracebacks and debuggers show it."""
    exec(compile(source, filename, "exec"), scope)  # noqa: S102 - our own source
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return scope[name]


def _write_record_to_stored() -> Callable[[InstanceRecord], dict[str, Any]]:
    """`InstanceRecord.to_stored`, written out field by field as attrs writes
    ``__init__`` (a record is stored at every change of an instance's state;
    a loop over the fields cost three times as much). The source holds only
    names of ours: field names and stored keys from `_READ`, defaults by name."""
    lines = ["def to_stored(self):", "    stored = {}"]
    scope: dict[str, Any] = {}
    for key, (name, _) in _READ.items():
        default = getattr(_ATTRS, name).default
        if name in _ALWAYS:
            lines.append(f"    stored[{key!r}] = self.{name}")
            continue
        lines.append(f"    value = self.{name}")
        if default in _NOTHING:
            lines.append("    if value:")  # an empty container means the default
        elif default is None:
            lines.append("    if value is not None:")
        else:
            scope[f"default_{name}"] = default
            lines.append(f"    if value != default_{name}:")
        lines.append(f"        stored[{key!r}] = value")
    lines += ["    if self.extra:", "        stored.update(self.extra)", "    return stored"]
    to_stored: Callable[[InstanceRecord], dict[str, Any]] = _define(
        "\n".join(lines), "<InstanceRecord.to_stored>", scope, "to_stored"
    )
    return to_stored


_record_to_stored = _write_record_to_stored()


class _Unfrozen(InstanceRecord):
    """An `InstanceRecord` while it is being filled in: the same slots, with
    plain attribute stores (a frozen class sets each field through
    ``object.__setattr__``, three times the cost). A record is built as one
    of these and turned into an `InstanceRecord` before anyone else sees
    it (``__class__`` is reassigned: the layout is the same), so every
    record anyone holds is frozen."""

    __slots__ = ()
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__  # both, or the type keeps the slow setattr path


def _write_record_evolve() -> Callable[[InstanceRecord, dict[str, Any]], InstanceRecord]:
    """`InstanceRecord.evolve`, written out field by field: copy every slot
    into an `_Unfrozen`, set the changed ones (a name that is no field is
    refused), freeze it."""
    names = [f.name for f in _ATTRS]
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
        "InstanceRecord": InstanceRecord,
        "Unfrozen": _Unfrozen,
        "object_new": object.__new__,
        "NAMES": frozenset(names),
    }
    evolve: Callable[[InstanceRecord, dict[str, Any]], InstanceRecord] = _define(
        "\n".join(lines), "<InstanceRecord.evolve>", scope, "evolve"
    )
    return evolve


_record_evolve = _write_record_evolve()
_DEFAULT_RECORD = InstanceRecord()


@functools.lru_cache(maxsize=64)  # (the templates a journal holds are few; a damaged one's, any)
def _params_wanted(process: str) -> int:
    """How many path params the process template ``process`` takes."""
    return sum(part.startswith(":") for part in process.split("/"))


def _write_record_reader(keys: tuple[Any, ...]) -> Callable[[dict[Any, Any]], Any] | None:
    """The reader of records stored with ``keys`` (a `_ShapeReaders` writer),
    or None for the checked way. It takes what `InstanceRecord._checked`
    takes, checking each field by the exact class msgpack gives, and returns
    None for anything else."""
    if not all(type(key) is str and key in _READ for key in keys):
        return None  # a field of another version: kept in extra, the checked way
    names = {key: f"_{i}" for i, key in enumerate(keys)}
    refused = [_refused(names[key], _READ[key][1] or None) for key in keys]
    if "run" in names:  # journals key log entries by a 4-byte run
        refused.append(f"not 0 <= {names['run']} <= 0xFFFFFFFF")
    for key, part in (("restarts", "at"), ("compensations", "id")):
        if key in names:
            refused.append(f"not all(i.__class__ is dict and {part!r} in i for i in {names[key]})")
    condition = " or ".join(r for r in refused if r) or "False"
    # The source holds only names of ours: keys of _READ, fields by name;
    # a field the map leaves out takes its default (each is immutable).
    given = {_READ[key][0]: names[key] for key in keys}
    fields = [f"new.{f.name} = {given.get(f.name, f'default_{f.name}')}" for f in _ATTRS]
    source = "\n    ".join(
        [
            "def read(stored):",
            f"{', '.join(names.values())}, = stored.values()" if keys else "pass",
            f"if {condition}:",
            "    return None",
            "new = object_new(Unfrozen)",  # filled in, then frozen (see _Unfrozen)
            *fields,
            "new.__class__ = InstanceRecord",
            "return new",
        ]
    )
    scope: dict[str, Any] = {
        "InstanceRecord": InstanceRecord,
        "Unfrozen": _Unfrozen,
        "object_new": object.__new__,
        **{f"default_{f.name}": f.default for f in _ATTRS},
    }
    read: Callable[[dict[Any, Any]], Any] = _define(
        source, f"<InstanceRecord reader of {keys!r}>", scope, "read"
    )
    return read


# -- log entries ------------------------------------------------------------------


class _NoValue:
    """The value of a log entry that holds none (``None`` is a value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_VALUE"


#: The ``value`` of an entry that holds none (``None`` is a value).
NO_VALUE: Any = _NoValue()


@attrs.frozen(slots=True, eq=True)
class LogEntry:
    """One position of a run's log: immutable, built once (an effect's
    `describe` with the fields its outcome sets; `attrs.evolve` for another).

    An entry holding a value or an error is an *outcome*; one without is a
    *started* record (a step attempt, a timer's due time, a call's child)
    that lets a resumed run continue where the last one stopped.

    In the journal an entry is a map with short keys; `to_stored` and
    `from_stored` are the only code that knows them. Keys this version
    does not know are kept (``extra``) and written back as they were.

    =====  =============================================
    key    field
    =====  =============================================
    k      kind (the effect's kind: "step", "wait", ...)
    n      name
    h      argument hash
    v      value (present only in an outcome)
    e      error record (present only in a failed outcome)
    m      seq of the message a wait or call took
    s      signal name of the message a ``receive`` took
    a      attempt (steps, from 1)
    f      failed attempts so far (steps)
    c      attempts cut short by closing the system (steps)
    key    idempotency key (steps)
    due    due time, epoch seconds (timers)
    child  address of the child a call created
    q      the ask a wait took: ``[ask id, reply-to address, asker's node]``
    p      each argument's digest (steps, calls, spawns with arguments):
           ``[positional, keywords]``, see `storage.argument_digests`; an entry
           written before entries kept it has none (messages then name no
           argument)
    =====  =============================================
    """

    kind: str
    name: str = ""
    hash: bytes = b""
    value: Any = NO_VALUE
    error: dict[str, Any] | None = None
    message: int | None = None
    signal: str | None = None
    attempt: int | None = None
    failures: int | None = None
    closed: int | None = None
    key: str | None = None
    due: float | None = None
    child: str | None = None
    ask: list[Any] | None = None
    parts: list[Any] | None = None
    extra: dict[str, Any] | None = None  # keys of another version, kept as they were

    # LogEntry.build(kind, name, hash, **fields): the generated function
    # itself (see _write_entry_builder), set below the class: one call.
    build: ClassVar[Callable[..., LogEntry]]

    @property
    def is_outcome(self) -> bool:
        """True if the entry holds the effect's value or error."""
        return self.value is not NO_VALUE or self.error is not None

    def to_stored(self) -> dict[str, Any]:
        """The map the journal stores."""
        stored: dict[str, Any] = {"k": self.kind, "n": self.name, "h": self.hash}
        if self.value is not NO_VALUE:
            stored["v"] = self.value
        if self.error is not None:
            stored["e"] = self.error
        if self.message is not None:
            stored["m"] = self.message
        if self.signal is not None:
            stored["s"] = self.signal
        if self.attempt is not None:
            stored["a"] = self.attempt
        if self.failures is not None:
            stored["f"] = self.failures
        if self.closed is not None:
            stored["c"] = self.closed
        if self.key is not None:
            stored["key"] = self.key
        if self.due is not None:
            stored["due"] = self.due
        if self.child is not None:
            stored["child"] = self.child
        if self.ask is not None:
            stored["q"] = self.ask
        if self.parts is not None:
            stored["p"] = self.parts
        if self.extra:
            stored.update(self.extra)
        return stored

    @classmethod
    def from_stored(cls, stored: Any) -> LogEntry:
        """The entry of a map the journal stored.

        Raises:
            RecordShapeError: not a map, no kind, a timer without its due
                time, or a field of a type the runtime cannot use.
        """
        # A wake reads every entry of the run's log, so this is its hot
        # loop: an entry of a shape seen before (the same keys in the same
        # order) takes the reader made for that shape; anything it does
        # not take goes the checked way, which says what is wrong.
        entry: LogEntry | None = _SHAPE_READERS.read(stored)
        return entry if entry is not None else cls._checked(stored)

    @classmethod
    def _checked(cls, stored: Any) -> LogEntry:
        """`from_stored`, field by field: every shape, and the words for
        what is wrong with one."""
        if type(stored) is not dict:
            raise RecordShapeError(f"the log entry is a {type(stored).__name__}, not a map")
        args = _ENTRY_DEFAULTS.copy()
        extra = None
        for key, value in stored.items():
            i = _ENTRY_POSITION.get(key)
            if i is None:
                if extra is None:
                    extra = {}
                extra[key] = value
                continue
            types = _ENTRY_TYPES[i]
            if types is not None and (
                not isinstance(value, types) or (value.__class__ is bool and bool not in types)
            ):
                raise RecordShapeError(
                    f"the log entry's {key!r} is {value!r}, a {type(value).__name__}"
                )
            args[i] = value
        if "k" not in stored:
            raise RecordShapeError("the log entry has no kind ('k')")
        if args[0] == "sleep" and args[11] is None:
            raise RecordShapeError("the timer's log entry has no due time ('due')")
        args.append(extra)  # the last field, after the 15 that args holds
        return cls(*args)

    def identity(self) -> dict[str, str]:
        """``{"k": kind, "n": name}``: how `NonDeterminismError` reports an effect."""
        return {"k": self.kind, "n": self.name}

    def show(self) -> str:
        """``step 'charge'``: kind and name, for messages."""
        return f"{self.kind} {self.name!r}" if self.name else self.kind


# The stored keys, in the order of LogEntry's fields (from_stored fills
# positional arguments by these positions), each field's value when its key
# is absent, and the types a present value may have (None: any).
_ENTRY_KEYS = ("k", "n", "h", "v", "e", "m", "s", "a", "f", "c", "key", "due", "child", "q", "p")
_ENTRY_POSITION = {key: i for i, key in enumerate(_ENTRY_KEYS)}
_ENTRY_DEFAULTS: list[Any] = ["", "", b"", NO_VALUE] + [None] * 11
_ENTRY_TYPES: tuple[tuple[type, ...] | None, ...] = (
    (str,),
    (str, _NONE),
    None,
    None,
    (dict,),
    (int,),
    (str,),
    (int,),
    None,
    None,
    None,
    _NUMBER,
    None,
    (list,),
    (list,),
)
assert [f.name for f in attrs.fields(LogEntry)] == [
    "kind",
    "name",
    "hash",
    "value",
    "error",
    "message",
    "signal",
    "attempt",
    "failures",
    "closed",
    "key",
    "due",
    "child",
    "ask",
    "parts",
    "extra",
]


# -- reading one shape of entry fast -------------------------------------------------
#
# The writer stores every entry of a kind with the same keys in the same
# order, so a log holds a handful of shapes. For each shape made only of
# known keys (a kind among them), `_write_shape_reader` writes a function, as
# attrs writes an __init__, that unpacks the values by position, checks
# each field whose type matters by its exact class (msgpack gives exactly
# str, int, float, list, dict or None for those) and fills a new entry's
# fields. It returns None for anything it does not take (a subclass, a
# value of another type, a timer without its due time): then
# `LogEntry._checked` decides. The fast way takes only what the checked one
# takes, and builds the same entry from it.

_Reader = Callable[[dict[Any, Any]], "LogEntry | None"]
_SHAPES_KEPT = 64  # a damaged journal may hold any number of shapes; these many are kept


class _ShapeReaders(dict[tuple[Any, ...], Any]):
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


_RECORD_READERS = _ShapeReaders(_write_record_reader)


class _UnfrozenEntry(LogEntry):
    """A `LogEntry` while a reader fills it in: plain attribute stores, then
    ``__class__`` becomes `LogEntry` before anyone sees it (as `_Unfrozen`
    does for records): a wake reads every entry of a log."""

    __slots__ = ()
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


# LogEntry's fields in order; a reader fills them all, as LogEntry.__init__
# would (there is nothing else it does: no validator, no converter).
_FIELDS = [f.name for f in attrs.fields(LogEntry)]
assert all(f.validator is None and f.converter is None for f in attrs.fields(LogEntry))
assert not hasattr(LogEntry, "__attrs_post_init__")


def _write_entry_builder() -> Callable[..., LogEntry]:
    """`LogEntry.build`: LogEntry.__init__'s parameters and defaults, written
    out with plain stores into an `_UnfrozenEntry`."""
    first, rest = _FIELDS[:3], attrs.fields(LogEntry)[3:]
    keywords = ", ".join(f"{f.name}={_literal(f.default)}" for f in rest)
    params = f"{', '.join(first)}, *, {keywords}"
    build: Callable[..., LogEntry] = _define_entry_maker(
        "build", params, [], _FIELDS, "<LogEntry.build>"
    )
    build.__doc__ = """``LogEntry(kind, name, hash, **fields)`` at about half the
    cost (plain stores, then frozen: see `_UnfrozenEntry`); the runtime makes
    one for every effect it logs."""
    return build


def _define_entry_maker(
    name: str, params: str, checks: list[str], values: list[str], filename: str
) -> Any:
    """Function ``name`` taking ``params``: ``checks`` (source lines) first,
    then what every maker of entries does: fill an `_UnfrozenEntry` with
    ``values`` (source text, one per field, in order), freeze it, return it."""
    stores = [f"entry.{field} = {value}" for field, value in zip(_FIELDS, values, strict=True)]
    body = ["entry = new(Unfrozen)", *stores, "entry.__class__ = LogEntry", "return entry"]
    scope: dict[str, Any] = {
        "LogEntry": LogEntry,
        "Unfrozen": _UnfrozenEntry,
        "NO_VALUE": NO_VALUE,
        "new": object.__new__,
    }
    source = "\n    ".join([f"def {name}({params}):", *checks, *body])
    return _define(source, filename, scope, name)


def _write_shape_reader(keys: tuple[Any, ...]) -> _Reader | None:
    """The reader of entries stored with ``keys``, or None for the checked way."""
    if "k" not in keys or not all(type(key) is str and key in _ENTRY_POSITION for key in keys):
        return None
    # The source holds only names of ours: every key is one of _ENTRY_KEYS,
    # and its value is named by its field's position.
    given = {_ENTRY_POSITION[key]: f"_{_ENTRY_POSITION[key]}" for key in keys}
    refused = [_refused(given[i], types) for i, types in enumerate(_ENTRY_TYPES) if i in given]
    if _ENTRY_POSITION["due"] not in given:
        refused.append('_0 == "sleep"')  # a timer's entry without its due time ('due')
    values = [given.get(i, _literal(default)) for i, default in enumerate(_ENTRY_DEFAULTS)]
    values.append("None")  # extra: every key is known
    checks = [
        f"{', '.join(given[_ENTRY_POSITION[key]] for key in keys)}, = stored.values()",
        f"if {' or '.join(r for r in refused if r)}:",
        "    return None",
    ]
    filename = f"<LogEntry reader of {keys!r}>"
    read: _Reader = _define_entry_maker("read", "stored", checks, values, filename)
    return read


_SHAPE_READERS = _ShapeReaders(_write_shape_reader)

# For a loop over a whole log (`_reading.decode_entries`): the keys of a
# stored entry, in their order -> the reader of that shape, or None where
# only `LogEntry.from_stored`'s checked way reads it. A reader returns None
# for a map it does not take.
ENTRY_READERS: Mapping[tuple[Any, ...], _Reader | None] = _SHAPE_READERS


def _refused(name: str, types: tuple[type, ...] | None) -> str:
    """Source text that is true when ``name`` is not of an exact class of ``types``."""
    if types is None:
        return ""
    exact = [
        f"{name} is None" if t is _NONE else f"{name}.__class__ is {t.__name__}" for t in types
    ]
    return f"not ({' or '.join(exact)})"


def _literal(default: Any) -> str:
    """A field's default as source text."""
    return "NO_VALUE" if default is NO_VALUE else repr(default)


LogEntry.build = staticmethod(_write_entry_builder())
