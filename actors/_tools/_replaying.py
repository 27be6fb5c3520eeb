"""What `actors.testing`'s replay checks share: the `ReplayProblem` they
report, the system they build actors in (it never runs one), one
instance's replay against its log, and the reading of a history file and of
the process definitions they are given, with the errors that say what to
pass instead.

The public functions (`replay_check`, `replay_history`, `import_history`)
stay in ``actors.testing``; this module holds their machinery.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from storage import Journal

from .._actor._instance import Actor
from .._kernel._checks import check_many
from .._kernel._process import ProcessDef
from .._system._facade import ActorSystem
from ..errors import HistoryFormatError, InvalidArguments
from . import _history
from ._simulation import virtual_wall

__all__ = [
    "ReplayProblem",
    "check_definitions",
    "checking_system",
    "read_history_file",
    "replay_one",
    "shown",
    "unreplayed",
]


@attrs.frozen
class ReplayProblem:
    """An instance whose recorded history the current code does not match."""

    address: str
    process: str
    status: str
    position: int
    expected: Any  # what the log holds there (kind, name), or None
    found: Any  # what the code asked for there, or None (it stopped early)
    message: str

    def __str__(self) -> str:
        return f"{self.address} ({self.status}) at effect {self.position}: {self.message}"


def checking_system(journal: Journal, processes: Iterable[ProcessDef[..., Any]]) -> ActorSystem:
    """The system a replay check builds its actors in: it never runs one."""
    return ActorSystem._create(
        journal,
        processes,
        random.Random(0),
        passivate_after=0,
        max_sync_steps=1,
        max_payload=1 << 30,
        now=virtual_wall,
    )


def unreplayed(one: _history.InstanceHistory, message: str) -> ReplayProblem:
    """The problem of a history's instance that could not be replayed at all."""
    return ReplayProblem(
        address=one.address,
        process=one.process,
        status=one.status,
        position=0,
        expected=None,
        found=None,
        message=message,
    )


async def read_history_file(path: Any, what: str) -> _history.History:
    """The history in file ``path``, for ``what`` (the caller's name).

    Raises:
        InvalidArguments: ``path`` is no str or os.PathLike.
        HistoryFormatError: the file cannot be read, or holds no history.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArguments(
            f"{what} takes the path of a history file (a str or os.PathLike), not "
            f"{shown(path)}; write one with 'python -m actors --journal PATH export ADDRESS "
            "--output FILE'"
        )
    try:
        data = await trio.Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise HistoryFormatError(
            f"no history file at {os.fspath(path)!r}; check the path, or write one with "
            "'python -m actors --journal PATH export ADDRESS --output FILE'"
        ) from exc
    except IsADirectoryError as exc:
        raise HistoryFormatError(
            f"{os.fspath(path)!r} is a directory, not a history file; pass the file that "
            "'python -m actors export ADDRESS --output FILE' wrote (a journal's directory "
            "is read by replay_check)"
        ) from exc
    except OSError as exc:
        raise HistoryFormatError(
            f"cannot read the history file {os.fspath(path)!r} ({exc.strerror or exc}); "
            "check its permissions, or export it again"
        ) from exc
    return _history.loads(data)


def check_definitions(processes: Any, what: str) -> list[ProcessDef[..., Any]]:
    """``processes`` as a list, if it is a collection of ``@process`` definitions."""
    found = check_many(processes, f"{what}'s processes", "@actors.process definitions")
    for proc in found:
        if not isinstance(proc, ProcessDef):
            raise InvalidArguments(
                f"{what}'s processes are definitions made with @actors.process, and one is "
                f"{shown(proc)}; pass the decorated functions"
            )
    return found


def shown(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} (of type {type(value).__qualname__})"


async def replay_one(
    system: ActorSystem, row: Any, proc: ProcessDef[..., Any], log: dict[int, Any]
) -> ReplayProblem | None:
    actor = Actor(system, row.iid, row.address, proc, row.record)
    exc = await actor.check_history(log)
    if exc is None:
        return None
    return ReplayProblem(
        address=row.address,
        process=row.process,
        status=row.status,
        position=exc.position,
        expected=exc.expected,
        found=exc.found,
        message=str(exc),
    )
