"""Errors raised by journals and the codec.

The common root, `ActorError`, lives here rather than in `actors` so that
`storage` never imports `actors`; `actors.errors` re-exports every name below
and adds the runtime's own errors under the same root.
"""

from __future__ import annotations


class ActorError(Exception):
    """The root of every error the runtime and its journals raise on purpose."""


class EncodeError(ActorError, TypeError):
    """A value the codec cannot carry; raised before anything is written.

    ``path`` names where the value sits inside what was being encoded, for
    example ``payload["items"][3]``.
    """

    def __init__(self, message: str, *, path: str = "", value_type: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.value_type = value_type


class JournalCorrupt(ActorError):
    """A stored record failed to decode; ``database`` and ``key`` say which one."""

    def __init__(self, message: str, *, database: str = "", key: bytes | str = b"") -> None:
        super().__init__(message)
        self.database = database
        self.key = key


class JournalFull(ActorError):
    """The journal has no room left for a transaction; it names the setting to raise.

    Nothing of the transaction was written; the same call succeeds once there
    is room (a larger map, or instances cleaned up).
    """


class JournalDiskFull(JournalFull):
    """The filesystem under the journal has no space left (or failed a write);
    ``path`` names the journal. Nothing of the transaction was written."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class JournalLocked(ActorError, RuntimeError):
    """Another system (in this or another OS process) already owns the journal.

    ``pid`` is the owner's process id when the journal records it, else None.
    """

    def __init__(self, message: str, *, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class JournalClosed(ActorError, RuntimeError):
    """The journal was used before ``open`` or after ``close``."""


class Conflict(ActorError):
    """A transaction's precondition did not hold; nothing of it was written.

    Journals raise it for `Txn.require` checks. ``reason`` is machine-readable
    (``"missing"``, ``"status"``, ``"epoch"``), ``status`` the status found.
    """

    def __init__(self, message: str, *, reason: str, status: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


class JournalUnavailable(JournalClosed, ConnectionError):
    """The journal's server cannot be reached, or the connection was lost
    mid-commit; the message names the server and how to point at another."""


class CommitOutcomeUnknown(JournalUnavailable):
    """The connection was lost after COMMIT was sent and the server could not
    say whether the transaction was written: it may be in the journal or not.

    Running it again could write it twice; read back what it was meant to
    write (an instance's status, log or mailbox) and decide from that.
    """
