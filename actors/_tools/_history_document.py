"""A history file's document: what it holds of the exported instance and
its descendants (`History`, `InstanceHistory`, `Message`, `Timer`), and the
format's name and version. `_history_file` writes it as bytes and reads it
back; `_history_journal` reads it out of a journal and imports it into one;
`_history` says what the format holds, docs/histories.md field by field."""

from __future__ import annotations

from typing import Any

import attrs

from storage import InstanceRecord, LogEntry

from .._system._kept import Kept

__all__ = ["FORMAT", "VERSION", "History", "InstanceHistory", "Message", "Timer"]

#: The ``format`` field of every history file.
FORMAT = "actors-history"
#: The version of the format `_history_file` writes, and the only one it reads.
VERSION = 1


@attrs.frozen
class Message:
    """An unread message: its id in the journal it came from, signal name,
    payload, when it was sent, and the sender's traceparent (or None)."""

    id: int
    signal: str
    payload: Any
    sent: float | None
    trace: str | None = None


@attrs.frozen
class Timer:
    """A durable timer: effect ``effect`` of run ``run``, due at epoch ``due``."""

    run: int
    effect: int
    due: float


@attrs.frozen
class InstanceHistory:
    """Everything a history holds of one instance."""

    address: str
    process: str
    status: str
    record: InstanceRecord
    runs: dict[int, dict[int, LogEntry]]  # run -> effect -> entry
    mail: list[Message]
    timers: list[Timer]
    stream: list[Any]
    consumers: dict[str, int]
    send_keys: list[str]
    incarnations: list[Kept]  # earlier incarnations a retry kept, oldest first

    @property
    def log(self) -> dict[int, LogEntry]:
        """The current run's log."""
        return self.runs.get(self.record.run, {})


@attrs.frozen
class History:
    """A history file: the exported instance (``address``) first, then its descendants."""

    address: str
    exported: float
    source: str
    instances: list[InstanceHistory]
    version: int = VERSION
