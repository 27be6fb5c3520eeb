"""The journal's records, typed: `InstanceRecord` (the runtime's snapshot
of one instance) and `LogEntry` (one position of a run's effect log).

A journal stores it as a msgpack map beside the instance's status and
address (see `Txn.put_instance`) and hands it back as an `InstanceRecord`
in `InstanceRow.record`; nothing reads it with string keys. The maps'
keys, and what a field left out means, are `storage._stored`'s; the code
written field by field for the hot paths is `storage._generated`'s.

Reading checks the type of every field the runtime uses: valid msgpack of
another shape (a damaged byte that still decodes) is reported as corrupt
where it is read, naming database and key, instead of failing deep in the
runtime with an AttributeError.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from ._generated import (
    ShapeReaders,
    write_entry_builder,
    write_record_evolve,
    write_record_reader,
    write_record_to_stored,
    write_shape_reader,
)
from ._stored import (
    EMPTY,
    ENTRY_DEFAULTS,
    ENTRY_POSITION,
    ENTRY_TYPES,
    NO_VALUE,
    RECORD_KEYS,
    RecordShapeError,
)

__all__ = ["ENTRY_READERS", "NO_VALUE", "InstanceRecord", "LogEntry", "RecordShapeError"]


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
    comp_attempts: Mapping[str, int] = EMPTY

    # -- exports
    exports: Any = None
    #: one on per publish; 0 before any
    exports_version: int = 0

    #: stored fields this version does not know, kept as they were
    extra: Mapping[str, Any] = EMPTY

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
            known = RECORD_KEYS.get(key)
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


_record_to_stored = write_record_to_stored(InstanceRecord)
_record_evolve = write_record_evolve(InstanceRecord, _Unfrozen)
_DEFAULT_RECORD = InstanceRecord()


@functools.lru_cache(maxsize=64)  # (the templates a journal holds are few; a damaged one's, any)
def _params_wanted(process: str) -> int:
    """How many path params the process template ``process`` takes."""
    return sum(part.startswith(":") for part in process.split("/"))


_RECORD_READERS = ShapeReaders(functools.partial(write_record_reader, InstanceRecord, _Unfrozen))


# -- log entries ------------------------------------------------------------------


@attrs.frozen(slots=True, eq=True)
class LogEntry:
    """One position of a run's log: immutable, built once (an effect's
    `describe` with the fields its outcome sets; `attrs.evolve` for another).

    An entry holding a value or an error is an *outcome*; one without is a
    *started* record (a step attempt, a timer's due time, a call's child)
    that lets a resumed run continue where the last one stopped.

    In the journal an entry is a map with short keys (listed in
    `storage._stored`); `to_stored` and `from_stored` are the only code
    that knows them. Keys this version does not know are kept (``extra``)
    and written back as they were.
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
    # itself (see write_entry_builder), set below the class: one call.
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
        args = ENTRY_DEFAULTS.copy()
        extra = None
        for key, value in stored.items():
            i = ENTRY_POSITION.get(key)
            if i is None:
                if extra is None:
                    extra = {}
                extra[key] = value
                continue
            types = ENTRY_TYPES[i]
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


# stored keys by position (see storage._stored) follow these fields
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


class _UnfrozenEntry(LogEntry):
    """A `LogEntry` while a reader fills it in: plain attribute stores, then
    ``__class__`` becomes `LogEntry` before anyone sees it (as `_Unfrozen`
    does for records): a wake reads every entry of a log."""

    __slots__ = ()
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


# A reader fills every field, as LogEntry.__init__ would (there is nothing
# else it does: no validator, no converter).
assert all(f.validator is None and f.converter is None for f in attrs.fields(LogEntry))
assert not hasattr(LogEntry, "__attrs_post_init__")

_SHAPE_READERS = ShapeReaders(functools.partial(write_shape_reader, LogEntry, _UnfrozenEntry))

# For a loop over a whole log (`_reading.decode_entries`): the keys of a
# stored entry, in their order -> the reader of that shape, or None where
# only `LogEntry.from_stored`'s checked way reads it. A reader returns None
# for a map it does not take.
ENTRY_READERS: Mapping[tuple[Any, ...], Callable[[dict[Any, Any]], LogEntry | None] | None] = (
    _SHAPE_READERS
)

LogEntry.build = staticmethod(write_entry_builder(LogEntry, _UnfrozenEntry))
