"""A durable actor runtime for trio.

Processes are plain ``async def`` functions; each instance is an actor with
its own mailbox, addressed by identity (``orders/o-17`` from the template
``orders/:order_id``), journaled so that it survives crashes and restarts
with nothing lost and no recorded side effect repeated.

    async with actors.open_system(LMDBJournal("./state"), processes=[order]) as system:
        handle = await system.start(order, "o-17", amount=100)
        await system.send("orders/o-17", approved, {"by": "ann"})
        print(await handle.result())
"""

import importlib.metadata as _metadata
import pathlib as _pathlib
import tomllib as _tomllib

from storage import serializable as serializable

from ._actor._context import Context as Context
from ._features._queue_state import Queue as Queue, QueueInfo as QueueInfo, Rate as Rate
from ._features._schedules import ScheduleInfo as ScheduleInfo
from ._features._steps import StepInfo as StepInfo, current_step as current_step
from ._kernel._handles import ChildHandle as ChildHandle, Handle as Handle
from ._kernel._process import (
    OneForAll as OneForAll,
    OneForOne as OneForOne,
    ProcessDef as ProcessDef,
    RestForOne as RestForOne,
    process as process,
)
from ._kernel._public import name_public_classes as _name_public_classes
from ._kernel._values import (
    InstanceInfo as InstanceInfo,
    Outcome as Outcome,
    Retry as Retry,
    Signal as Signal,
)
from ._system._facade import ActorSystem as ActorSystem
from ._system._mail import DeadLetter as DeadLetter, Message as Message
from ._system._open import open_system as open_system
from ._system._service import run_until_signalled as run_until_signalled
from .errors import (
    ActorError as ActorError,
    AlreadyStarted as AlreadyStarted,
    AskTimeout as AskTimeout,
    ChildFailed as ChildFailed,
    ContextError as ContextError,
    EncodeError as EncodeError,
    HistoryFormatError as HistoryFormatError,
    InstanceRemoved as InstanceRemoved,
    InvalidArguments as InvalidArguments,
    JournalClosed as JournalClosed,
    JournalCorrupt as JournalCorrupt,
    JournalDiskFull as JournalDiskFull,
    JournalFull as JournalFull,
    JournalLocked as JournalLocked,
    JournalUnavailable as JournalUnavailable,
    LimitExceeded as LimitExceeded,
    NonDeterminismError as NonDeterminismError,
    NotDelivered as NotDelivered,
    ProcessCancelled as ProcessCancelled,
    ProcessFailed as ProcessFailed,
    StepFailed as StepFailed,
    StepTimeout as StepTimeout,
    UnknownProcess as UnknownProcess,
)

# The public names, one place: `from actors import *` gives these, and a
# test checks that the documentation site renders each with its docstring.
__all__ = [
    "ActorError",
    "ActorSystem",
    "AlreadyStarted",
    "AskTimeout",
    "ChildFailed",
    "ChildHandle",
    "Context",
    "ContextError",
    "DeadLetter",
    "EncodeError",
    "Handle",
    "HistoryFormatError",
    "InstanceInfo",
    "InstanceRemoved",
    "InvalidArguments",
    "JournalClosed",
    "JournalCorrupt",
    "JournalDiskFull",
    "JournalFull",
    "JournalLocked",
    "JournalUnavailable",
    "LimitExceeded",
    "Message",
    "NonDeterminismError",
    "NotDelivered",
    "OneForAll",
    "OneForOne",
    "Outcome",
    "ProcessCancelled",
    "ProcessDef",
    "ProcessFailed",
    "Queue",
    "QueueInfo",
    "Rate",
    "RestForOne",
    "Retry",
    "ScheduleInfo",
    "Signal",
    "StepFailed",
    "StepInfo",
    "StepTimeout",
    "UnknownProcess",
    "current_step",
    "open_system",
    "process",
    "run_until_signalled",
    "serializable",
]

_name_public_classes(globals(), __name__)


def _find_version() -> str:
    """The installed distribution's version; from a checkout that was never
    installed, the one its pyproject.toml names."""
    try:
        return _metadata.version("trio-actors")
    except _metadata.PackageNotFoundError:
        pyproject = _pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
        with pyproject.open("rb") as file:
            return str(_tomllib.load(file)["project"]["version"])


#: This library's version, e.g. ``"0.1.0"``.
__version__: str = _find_version()
