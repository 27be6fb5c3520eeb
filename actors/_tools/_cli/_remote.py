"""Asking the running system that holds a journal to write, through its
control socket (`actors._system._control`), with the CLI's errors and exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storage.errors import JournalLocked

from ...errors import NotDelivered
from .._admin import ControlUnavailable, RemoteError, request
from ._errors import CORRUPT, USAGE, CLIError, held_error

__all__ = ["owner", "through_system"]

# Error types the running system may answer with, as the CLI reports them
# (any other is refused, exit 1).
_CODES = {"JournalCorrupt": CORRUPT, "InvalidArguments": USAGE}


async def through_system(
    path: Path, held: JournalLocked, op: str, *, doing: str, instead: str, **fields: Any
) -> Any:
    """The result of ``op`` done by the system that holds the journal at ``path``.

    Raises:
        CLIError: it serves no control socket (exit 4), or it answered an
            error the CLI reports with a code of its own.
        NotDelivered: as `ActorSystem.send` raises it (exit 3 or 1).
        ActorError: any other error it answered, or no answer (exit 1).
    """
    try:
        return await request(path, op, **fields)
    except ControlUnavailable:
        raise held_error(path, held.pid, doing, instead) from None
    except RemoteError as exc:
        if exc.type == "NotDelivered":
            raise NotDelivered(
                exc.message, address=str(fields.get("address", "")), reason=exc.reason or "unknown"
            ) from None
        if exc.type in _CODES:
            raise CLIError(exc.message, _CODES[exc.type]) from None
        raise


def owner(held: JournalLocked) -> str:
    """ "the running system (pid N)", for what the CLI prints."""
    return "the running system" + (f" (pid {held.pid})" if held.pid else "")
