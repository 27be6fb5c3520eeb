"""`InstanceRecord`: the runtime's snapshot of one instance, typed.

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

from typing import Any

import attrs

__all__ = ["InstanceRecord", "RecordShapeError"]


class RecordShapeError(ValueError):
    """A stored record decoded to a value of the wrong shape; the message
    says what is wrong (the journal turns it into `JournalCorrupt`)."""


@attrs.frozen(slots=True)
class InstanceRecord:
    """What the runtime keeps about one instance, beside its status.

    Frozen: a change is a new record (`attrs.evolve`), written by the
    transaction that records it, so a write that fails to encode leaves the
    record in memory as it was.
    """

    # -- identity and input
    #: the path params, one per ``:name`` of the process template
    params: list[str] = attrs.field(factory=list)
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
    restarts: list[dict[str, Any]] = attrs.field(factory=list)

    # -- how it ended, or why it is parked
    result: Any = None
    #: the error record (`describe_error`) of a failed instance
    error: dict[str, Any] | None = None
    #: why it was cancelled
    reason: str | None = None
    #: why a live instance is suspended or stuck (e.g. a NonDeterminismError)
    last_error: str | None = None

    # -- saga
    #: the failure being compensated, and the end it leads to ("failed", "cancelled")
    failure: dict[str, Any] | None = None
    failure_end: str | None = None
    #: the error record of a compensation that is stuck
    stuck: dict[str, Any] | None = None
    #: set when an operator abandoned a stuck compensation
    abandoned: bool = False
    #: each registered compensation, in order: ``{"id": ..., "name": ..., ...}``
    compensations: list[dict[str, Any]] = attrs.field(factory=list)
    #: the ids of the compensations that ran to completion
    compensated: list[str] = attrs.field(factory=list)
    #: compensation id -> attempts made so far
    comp_attempts: dict[str, int] = attrs.field(factory=dict)

    # -- exports
    exports: Any = None
    #: one on per publish; 0 before any
    exports_version: int = 0

    #: stored fields this version does not know, kept as they were
    extra: dict[str, Any] = attrs.field(factory=dict)

    def to_stored(self) -> dict[str, Any]:
        """The map to encode: the fields away from their defaults."""
        stored: dict[str, Any] = {}
        for name, key, default in _STORED:
            value = getattr(self, name)
            if value != default or name in _ALWAYS:
                stored[key] = value
        if self.extra:
            stored.update(self.extra)
        return stored

    @classmethod
    def from_stored(cls, value: Any) -> InstanceRecord:
        """The record a stored map holds.

        Raises:
            RecordShapeError: the value is not a map, or a field has a type
                the runtime cannot use.
        """
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
            ("restarts", record.restarts, "at"), ("compensations", record.compensations, "id"),
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
        wanted = sum(part.startswith(":") for part in process.split("/"))
        if len(self.params) != wanted:
            return f"the record has {len(self.params)} path param(s) where {process!r} takes {wanted}"
        for param in self.params:
            if not isinstance(param, str) or not param or "/" in param:
                return f"the record's path param {param!r} is not a non-empty str without '/'"
        return None


_ATTRS = attrs.fields(InstanceRecord)
_NUMBER = (int, float)
_NONE = type(None)
# stored key -> (field, the types its value may have, () for any); a stored
# key is the field's name except where the first format chose a shorter one
_READ: dict[str, tuple[str, tuple[type, ...]]] = {
    "params": ("params", (list,)), "input": ("input", (dict, _NONE)), "run": ("run", (int,)),
    "inc": ("incarnation", (int,)), "created": ("created", (*_NUMBER, _NONE)),
    "updated": ("updated", (*_NUMBER, _NONE)), "trace": ("trace", (str, _NONE)),
    "parent": ("parent", (str, _NONE)), "awaited": ("awaited", (bool,)),
    "restart": ("restart", (str, _NONE)), "restarts": ("restarts", (list,)),
    "result": ("result", ()), "error": ("error", (dict, _NONE)),
    "reason": ("reason", (str, _NONE)), "last_error": ("last_error", (str, _NONE)),
    "failure": ("failure", (dict, _NONE)), "failure_end": ("failure_end", (str, _NONE)),
    "stuck": ("stuck", (dict, _NONE)), "abandoned": ("abandoned", (bool,)),
    "compensations": ("compensations", (list,)), "compensated": ("compensated", (list,)),
    "comp_attempts": ("comp_attempts", (dict,)), "exports": ("exports", ()),
    "exports_version": ("exports_version", (int,)),
}  # fmt: skip
def _default(name: str) -> Any:
    default = getattr(_ATTRS, name).default
    return default.factory() if isinstance(default, attrs.Factory) else default  # type: ignore[arg-type]


# (field, stored key, default) for each stored field, in a stable order
_STORED: tuple[tuple[str, str, Any], ...] = tuple(
    (name, key, _default(name)) for key, (name, _) in _READ.items()
)
# stored even at their defaults: every record names its run and incarnation
_ALWAYS = frozenset({"run", "incarnation"})
