"""What the runtime logs: one function per event, the whole vocabulary here.

(Named for what it is, the runtime's reports to operators; an instance's
own log, the entries of its effects, is `_log`.)

Records go through stdlib `logging` under the logger ``actors`` (and its
children ``actors.system``, ``actors.supervision``, ``actors.instance``),
so ``logging.basicConfig(level=logging.INFO)`` shows them. Each record
names the instance's address in its message and carries it as
``record.actors_address`` (``extra={"actors_address": ...}``); the
system-wide events (opened, closed) carry None there.

Levels:

- WARNING: a process or child crashed (one line; its traceback at DEBUG
  when the process's own code raised it, on the WARNING otherwise), a restart
  (which instance, count, strategy, delay), a lease lost (each instance the
  node lets go of), an instance given up because another node took it over,
  an instance stuck (kept from running until the code or the system's
  configuration changes: see `held_diverged`, `held_unregistered`; or until
  an operator's ``retry``, a step whose crash budget is spent:
  `held_crashed`), a recorded compensation this system was not given
  (`compensation_unknown`).
- ERROR: a top-level process failed, a child failed past its parent's
  restart limit, an instance parked ``compensation_stuck``, a corrupt record.
- INFO: the system opened (with what recovery found: resumed, stuck by
  kind, orphans, corrupt) and closed.
- DEBUG: messages delivered to live instances and effects completed. These
  are on the hot path: callers check `debug_enabled` once (the system
  caches it when it opens) and call `delivered`/`effect_done` only then,
  so nothing is formatted, nor a function called, while DEBUG is off.

Messages use %-style arguments: nothing is formatted unless a handler
takes the record. A process's exception enters a message as `_summary`
text, never as the object: its ``__str__`` is user code and may raise.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from . import _tracing
from ._failures import exception_text

__all__ = [
    "CRASHED",
    "NON_DETERMINISM",
    "UNFIT_INPUT",
    "UNREGISTERED",
    "closing",
    "compensation_stuck",
    "compensation_unknown",
    "corrupt",
    "crashed",
    "debug_enabled",
    "delivered",
    "effect_done",
    "failed",
    "gave_up",
    "held_crashed",
    "held_diverged",
    "held_kind",
    "held_unregistered",
    "is_crashed",
    "lease_lost",
    "opened",
    "restarting",
    "sibling_restarting",
    "stuck",
    "taken_over",
    "unregistered",
    "unregistered_fix",
    "unregistered_more",
]

_system = logging.getLogger("actors.system")
_supervision = logging.getLogger("actors.supervision")
_instance = logging.getLogger("actors.instance")


def _at(address: str | None) -> dict[str, Any]:
    return {"actors_address": address}


def _summary(exc: BaseException) -> str:
    """``"ValueError: boom"``, for any exception (one whose ``__str__`` raises too)."""
    message = exception_text(exc, "<unprintable>")
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


def debug_enabled() -> bool:
    """True if `delivered` and `effect_done` records would be handled."""
    return _instance.isEnabledFor(logging.DEBUG)


# -- the system --------------------------------------------------------------------


def _journal(journal: Any) -> str:
    path = getattr(journal, "path", None)
    name = type(journal).__name__
    return f"{name}({str(path)!r})" if path is not None else name


def opened(
    journal: Any, *, resumed: int, stuck: Mapping[str, int], orphans: int, corrupt: int
) -> None:
    """INFO: the system opened ``journal`` and recovery found this much.

    ``stuck`` counts the live instances that cannot run, by kind (`held_kind`):
    those of processes this system does not register, and those recorded
    stuck by an earlier run (non-determinism, input that does not fit), which
    are replayed on this code all the same and warn again if still stuck.
    """
    total = sum(stuck.values())
    kinds = ", ".join(f"{stuck[kind]} {kind}" for kind in _KINDS if stuck.get(kind))
    _system.info(
        "system opened on %s: resumed %d, stuck %d%s, %d orphaned child(ren) to cancel, %d corrupt",
        _journal(journal),
        resumed,
        total,
        f" ({kinds})" if kinds else "",
        orphans,
        corrupt,
        extra=_at(None),
    )


def closing(journal: Any, *, live: int) -> None:
    """INFO: the system closes, leaving ``live`` instances to resume on the next open."""
    _system.info(
        "system closing on %s: %d live instance(s) stay as they are and resume on the next open",
        _journal(journal),
        live,
        extra=_at(None),
    )


def corrupt(address: str, error: BaseException, *, at_open: bool = False) -> None:
    """ERROR: an instance's records do not decode; it is marked corrupt."""
    if at_open:
        _system.error(
            "instance %r is corrupt and is not recovered: %s",
            address,
            error,
            extra=_at(address),
        )
    else:
        _system.error("instance %r is corrupt: %s", address, error, extra=_at(address))


# -- supervision ------------------------------------------------------------------------


# Modules whose frames are the runtime's (and the libraries it drives), not a process's code.
_RUNTIME = ("actors.", "storage.", "trio.", "outcome.")


def _raised_by_process(exc: BaseException) -> bool:
    """True if ``exc`` came out of the process's own code: its traceback runs
    through a coroutine outside the runtime (the process function), so the
    process raised it or let it through (an uncaught `StepFailed`, say). An
    error the runtime made around the process (its result did not encode, a
    forgotten await found at its end) has no such frame."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_flags & inspect.CO_COROUTINE and not str(
            frame.f_globals.get("__name__", "")
        ).startswith(_RUNTIME):
            return True
        tb = tb.tb_next
    return False


def crashed(address: str, exc: BaseException, *, parent: str | None) -> None:
    """WARNING: the process raised ``exc`` (its supervisor decides what follows);
    recorded on its process span too.

    One line when the process's own code raised it (the usual case: a process
    that fails on purpose, or lets a failed step through), with the traceback
    in a DEBUG record after it; the traceback rides on the WARNING itself when
    the runtime raised it around the process.
    """
    summary = _summary(exc)
    _tracing.record_crash(exc, summary)
    own = _raised_by_process(exc)
    if parent:
        _supervision.warning(
            "child %r of %r crashed: %s",
            address,
            parent,
            summary,
            exc_info=None if own else exc,
            extra=_at(address),
        )
    else:
        _supervision.warning(
            "process %r crashed: %s",
            address,
            summary,
            exc_info=None if own else exc,
            extra=_at(address),
        )
    if own and _supervision.isEnabledFor(logging.DEBUG):
        _supervision.debug(
            "traceback of the crash of %r: %s",
            address,
            summary,
            exc_info=exc,
            extra=_at(address),
        )


def restarting(address: str, *, count: int, reason: str, strategy: Any, delay: float) -> None:
    """WARNING: the instance restarts (its ``count``-th restart) after ``delay`` s."""
    _supervision.warning(
        "restarting %r (restart %d, %s) in %.3g s under %r",
        address,
        count,
        reason,
        delay,
        strategy,
        extra=_at(address),
    )


def sibling_restarting(address: str, *, reason: str, strategy: Any) -> None:
    """WARNING: the instance restarts because a sibling crashed (one-for-all, rest-for-one)."""
    _supervision.warning(
        "restarting %r (%s) under %r", address, reason, strategy, extra=_at(address)
    )


def failed(address: str, summary: str) -> None:
    """ERROR: a top-level instance ended failed."""
    _supervision.error("process %r failed: %s", address, summary, extra=_at(address))


def gave_up(address: str, *, parent: str, why: str, strategy: Any) -> None:
    """ERROR: a child failed past its parent's restart limit; the parent is told to crash."""
    _supervision.error(
        "child %r failed past the restart limit of %r (%d within %s s under %r): %s; "
        "the parent crashes with ChildFailed",
        address,
        parent,
        strategy.max_restarts,
        strategy.within,
        strategy,
        why,
        extra=_at(address),
    )


def compensation_stuck(address: str, error: str | None) -> None:
    """ERROR: a compensation gave up; the instance is parked ``compensation_stuck``."""
    _supervision.error(
        "instance %r is parked compensation_stuck: %s; resume_compensation or "
        "abandon_compensation decides",
        address,
        error,
        extra=_at(address),
    )


def compensation_unknown(address: str, name: str, why: str) -> None:
    """WARNING: a recorded compensation names no function this system was
    given; nothing runs in its place and the instance parks
    ``compensation_stuck`` (stored data never chooses code, see `_compensations`)."""
    _supervision.warning(
        "instance %r: compensation %s is not run: %s",
        address,
        name,
        why,
        extra=_at(address),
    )


# -- instances ----------------------------------------------------------------------


def taken_over(address: str, node: str | None, error: BaseException) -> None:
    """WARNING: another node owns the instance now; this one lets go of it."""
    _instance.warning(
        "node %r gave up %r: another node took it over (%s)",
        node,
        address,
        error,
        extra=_at(address),
    )


def lease_lost(node: str | None, address: str) -> None:
    """WARNING: the node lost its lease (it froze, or the database did not
    answer) and took it again; it lets go of the instance it held from before."""
    _instance.warning(
        "node %r lost its lease and took it again: it lets go of %r, loaded again "
        "(from the journal) when needed",
        node,
        address,
        extra=_at(address),
    )


def delivered(address: str, seq: int, signal: str) -> None:
    """DEBUG: message ``seq`` reached the live instance (call only if `debug_enabled`)."""
    _instance.debug("message %d (%r) delivered to %r", seq, signal, address, extra=_at(address))


def effect_done(address: str, seq: int, kind: str, error: BaseException | None) -> None:
    """DEBUG: the live effect ``seq`` completed (call only if `debug_enabled`)."""
    if error is None:
        _instance.debug("effect %d (%s) of %r done", seq, kind, address, extra=_at(address))
    else:
        _instance.debug(
            "effect %d (%s) of %r raised %s",
            seq,
            kind,
            address,
            _summary(error),
            extra=_at(address),
        )


# -- stuck instances ------------------------------------------------------------------
#
# A live instance that cannot run until its code or the system's configuration
# changes is kept as it is (never failed or lost) with its record's ``held``
# saying why in a few words, which `list`, `show` and the web inspector show
# as "stuck: <held>". Its handle's result() keeps waiting: a redeploy resumes it
# (one parked by a step's crash budget: an operator's `system.retry`).

UNREGISTERED = "unregistered process"
NON_DETERMINISM = "non-determinism"
UNFIT_INPUT = "input that does not fit"
CRASHED = "crash budget spent"
# In the order the INFO line counts them.
_KINDS = (UNREGISTERED, NON_DETERMINISM, UNFIT_INPUT, CRASHED)


def held_unregistered(process: str) -> str:
    """``held`` of an instance whose process the system does not register."""
    return f"process {process!r} not registered"


def held_diverged(exc: BaseException) -> str:
    """``held`` of an instance whose replay raised ``exc`` (a
    `NonDeterminismError`, or `InvalidArguments` for stored params or input
    the function does not take)."""
    position = getattr(exc, "position", None)
    if isinstance(position, int):
        return f"{NON_DETERMINISM} at effect {position}"
    return "its stored params or input do not fit the code"


def held_crashed(step: str) -> str:
    """``held`` of an instance parked because the attempts of its step
    ``step`` kept being cut short by crashes (see `_steps`)."""
    return f"{CRASHED} by step {step!r}"


def is_crashed(held: str | None) -> bool:
    """Whether ``held`` is `held_crashed`'s: ``system.retry`` resumes it."""
    return held is not None and held.startswith(CRASHED)


def held_kind(held: str) -> str:
    """The kind of a ``held`` text, as the open's INFO line counts them."""
    if held.startswith("process "):
        return UNREGISTERED
    if held.startswith(NON_DETERMINISM):
        return NON_DETERMINISM
    if held.startswith(CRASHED):
        return CRASHED
    return UNFIT_INPUT


_UNREGISTERED_TEXT = (
    "instance %r belongs to process %r, which this system does not register: pass it "
    "in open_system(processes=[...]); until then it stays as it is on disk and result() waits"
)


def unregistered_fix(address: str, process: str) -> str:
    """The warning's text, which is also the ``last_error`` recorded, for an
    instance whose process is not registered."""
    return _UNREGISTERED_TEXT % (address, process)


def unregistered(address: str, process: str) -> None:
    """WARNING: the instance is stuck: its process is not registered here."""
    _system.warning(_UNREGISTERED_TEXT, address, process, extra=_at(address))


def unregistered_more(process: str, count: int) -> None:
    """WARNING: ``count`` more instances of ``process`` are stuck, beyond those named."""
    _system.warning(
        "and %d more instance(s) of process %r, which this system does not register: "
        "pass it in open_system(processes=[...])",
        count,
        process,
        extra=_at(None),
    )


def stuck(address: str, held: str, error: BaseException) -> None:
    """WARNING: replaying the instance raised ``error`` (whose message names
    the fix); it is kept suspended, ``held``."""
    _instance.warning(
        "instance %r is stuck (%s): %s", address, held, _summary(error), extra=_at(address)
    )
