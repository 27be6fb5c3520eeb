"""Journals for the actor runtime: the `Journal` interface, the msgpack codec,
the embedded LMDB journal (the default), an in-memory one, and a simulated
one for deterministic simulation (`actors.testing.simulate`).

`storage` never imports `actors`; the runtime builds on it.
"""

import typing as _typing

from ._clock import AutojumpHold as AutojumpHold
from ._codec import (
    Opaque as Opaque,
    decode as decode,
    digest as digest,
    encode as encode,
    lenient_decoding as lenient_decoding,
    serializable as serializable,
)
from ._digests import PART_SIZE as PART_SIZE, argument_digests as argument_digests
from ._journal import (
    LIVE_STATUSES as LIVE_STATUSES,
    MAIL_STATUSES as MAIL_STATUSES,
    MAX_ADDRESS_BYTES as MAX_ADDRESS_BYTES,
    STATUS_WORDS as STATUS_WORDS,
    STATUSES as STATUSES,
    TERMINAL_STATUSES as TERMINAL_STATUSES,
    UNFINISHED_STATUSES as UNFINISHED_STATUSES,
    CorruptRecord as CorruptRecord,
    Durability as Durability,
    InstanceRow as InstanceRow,
    Journal as Journal,
    Reader as Reader,
    Status as Status,
    Ticket as Ticket,
    TimerRow as TimerRow,
    Txn as Txn,
    instance_id as instance_id,
)
from ._lmdb import JournalHolder as JournalHolder, LMDBJournal as LMDBJournal
from ._memory import MemoryJournal as MemoryJournal
from ._parking import Parking as Parking
from ._records import NO_VALUE as NO_VALUE, InstanceRecord as InstanceRecord, LogEntry as LogEntry
from ._simulated import SimulatedJournal as SimulatedJournal, WriteLog as WriteLog
from ._simulated_faults import HostCrashed as HostCrashed, JournalFaults as JournalFaults
from ._simulated_nodes import SimulatedNode as SimulatedNode, simulated_nodes as simulated_nodes
from ._states import StateOps as StateOps, StateRow as StateRow
from .errors import (
    ActorError as ActorError,
    CommitOutcomeUnknown as CommitOutcomeUnknown,
    Conflict as Conflict,
    EncodeError as EncodeError,
    JournalClosed as JournalClosed,
    JournalCorrupt as JournalCorrupt,
    JournalDiskFull as JournalDiskFull,
    JournalFull as JournalFull,
    JournalLocked as JournalLocked,
    JournalUnavailable as JournalUnavailable,
)

# The public names, one place (PostgresJournal is left out: it needs the
# optional 'postgres' extra, so `from storage import *` must not import it).
# A test checks that the documentation site renders each with its docstring.
__all__ = [
    "LIVE_STATUSES",
    "MAIL_STATUSES",
    "MAX_ADDRESS_BYTES",
    "NO_VALUE",
    "STATUSES",
    "STATUS_WORDS",
    "TERMINAL_STATUSES",
    "UNFINISHED_STATUSES",
    "ActorError",
    "AutojumpHold",
    "CommitOutcomeUnknown",
    "Conflict",
    "CorruptRecord",
    "Durability",
    "EncodeError",
    "HostCrashed",
    "InstanceRecord",
    "InstanceRow",
    "Journal",
    "JournalClosed",
    "JournalCorrupt",
    "JournalDiskFull",
    "JournalFaults",
    "JournalFull",
    "JournalHolder",
    "JournalLocked",
    "JournalUnavailable",
    "LMDBJournal",
    "LogEntry",
    "MemoryJournal",
    "Opaque",
    "Parking",
    "Reader",
    "SimulatedJournal",
    "SimulatedNode",
    "StateOps",
    "StateRow",
    "Status",
    "Ticket",
    "TimerRow",
    "Txn",
    "WriteLog",
    "decode",
    "digest",
    "encode",
    "instance_id",
    "lenient_decoding",
    "serializable",
    "simulated_nodes",
]

# Public classes say where users find them (``storage.LMDBJournal``, not the
# private module that defines it), in reprs, docs and tracebacks.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and _obj.__module__.startswith("storage._"):
        _obj.__module__ = "storage"


if _typing.TYPE_CHECKING:
    from ._postgres import PostgresJournal as PostgresJournal
else:

    def __getattr__(name: str) -> type:  # PostgresJournal needs the optional 'postgres' extra
        if name == "PostgresJournal":
            from ._postgres import PostgresJournal

            PostgresJournal.__module__ = "storage"
            return PostgresJournal
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
