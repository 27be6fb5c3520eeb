"""What the command line reports on failure: exit codes and `CLIError`."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CORRUPT",
    "HELD",
    "INTERRUPTED",
    "NOT_FOUND",
    "OK",
    "REFUSED",
    "USAGE",
    "CLIError",
    "held_error",
]

# Exit codes (the module docstring of `actors._tools._cli` lists them for users).
OK, REFUSED, USAGE, NOT_FOUND, HELD, CORRUPT, INTERRUPTED = 0, 1, 2, 3, 4, 5, 130


class CLIError(Exception):
    """A failure the user can act on: printed without a traceback, exits with ``code``."""

    def __init__(self, message: str, code: int = REFUSED) -> None:
        super().__init__(message)
        self.code = code


def held_error(
    path: Path, pid: int | None, doing: str, instead: str, *, served: bool = False
) -> CLIError:
    """The refusal to write to a journal that a running system holds: one
    that serves no control socket (``open_system(..., control=False)``), or,
    with ``served``, a write the socket does not offer."""
    owner = f" (pid {pid})" if pid else ""
    why = "" if served else " that serves no control socket (opened with control=False, or closing)"
    return CLIError(
        f"cannot {doing}: the journal at {path} is owned by a running system{owner}{why}. "
        "The CLI writes only to a journal no system holds, since a running system would "
        f"not see the change; {instead} through that application, or stop it first",
        HELD,
    )
