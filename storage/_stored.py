"""The stored format of the journal's records: the keys of the msgpack
maps that hold an `InstanceRecord` and a `LogEntry`, the types a value
under each may have, and what a field left out means.

A record's map keeps the short field names written since the first
journal format (``inc`` for the incarnation) and leaves out fields at
their defaults, so records written by earlier versions read unchanged and
new ones stay small. A key this version does not know is kept (in
``extra``) and written back as it was, never dropped.

A log entry's map has short keys:

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

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "ALWAYS",
    "EMPTY",
    "ENTRY_DEFAULTS",
    "ENTRY_KEYS",
    "ENTRY_POSITION",
    "ENTRY_TYPES",
    "NONE",
    "NOTHING",
    "NO_VALUE",
    "NUMBER",
    "RECORD_KEYS",
    "RecordShapeError",
]


class RecordShapeError(ValueError):
    """A stored record decoded to a value of the wrong shape; the message
    says what is wrong (the journal turns it into `JournalCorrupt`)."""


# The default of the record's container fields: shared and immutable, so a
# record allocates nothing for the fields it does not use (there is one per
# live instance).
EMPTY: Mapping[str, Any] = MappingProxyType({})


class _NoValue:
    """The value of a log entry that holds none (``None`` is a value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_VALUE"


#: The ``value`` of an entry that holds none (``None`` is a value).
NO_VALUE: Any = _NoValue()

NUMBER = (int, float)
NONE = type(None)

# -- instance records

# stored key -> (field, the types its value may have, () for any); a stored
# key is the field's name except where the first format chose a shorter one
RECORD_KEYS: dict[str, tuple[str, tuple[type, ...]]] = {
    "params": ("params", (list,)),
    "input": ("input", (dict, NONE)),
    "run": ("run", (int,)),
    "inc": ("incarnation", (int,)),
    "created": ("created", (*NUMBER, NONE)),
    "updated": ("updated", (*NUMBER, NONE)),
    "trace": ("trace", (str, NONE)),
    "parent": ("parent", (str, NONE)),
    "awaited": ("awaited", (bool,)),
    "restart": ("restart", (str, NONE)),
    "restarts": ("restarts", (list,)),
    "result": ("result", ()),
    "error": ("error", (dict, NONE)),
    "reason": ("reason", (str, NONE)),
    "last_error": ("last_error", (str, NONE)),
    "held": ("held", (str, NONE)),
    "failure": ("failure", (dict, NONE)),
    "failure_end": ("failure_end", (str, NONE)),
    "stuck": ("stuck", (dict, NONE)),
    "abandoned": ("abandoned", (bool,)),
    "compensations": ("compensations", (list,)),
    "compensated": ("compensated", (list,)),
    "comp_attempts": ("comp_attempts", (dict,)),
    "exports": ("exports", ()),
    "exports_version": ("exports_version", (int,)),
}
# the empty containers that mean "the default": a record read with an empty
# list is stored like one never given any
NOTHING = ((), EMPTY)
# stored even at their defaults: every record names its run and incarnation
ALWAYS = frozenset({"run", "incarnation"})

# -- log entries

# The stored keys, in the order of LogEntry's fields (from_stored fills
# positional arguments by these positions), each field's value when its key
# is absent, and the types a present value may have (None: any).
ENTRY_KEYS = ("k", "n", "h", "v", "e", "m", "s", "a", "f", "c", "key", "due", "child", "q", "p")
ENTRY_POSITION = {key: i for i, key in enumerate(ENTRY_KEYS)}
ENTRY_DEFAULTS: list[Any] = ["", "", b"", NO_VALUE] + [None] * 11
ENTRY_TYPES: tuple[tuple[type, ...] | None, ...] = (
    (str,),
    (str, NONE),
    None,
    None,
    (dict,),
    (int,),
    (str,),
    (int,),
    None,
    None,
    None,
    NUMBER,
    None,
    (list,),
    (list,),
)
