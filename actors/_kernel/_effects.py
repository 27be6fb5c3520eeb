"""Effects: the lazily-run, numbered operations a process awaits.

An effect takes its sequence number when the process *creates* it, and its
outcome is logged under that number, so ``ctx.all(a, b)`` replays the same
whichever of ``a`` and ``b`` finished first. Awaiting an effect yields it to
the instance's driver (see `_instance`), which answers from the log or runs
it live. Composites (`First`, `All`) have no number of their own: their
outcome follows from their children's.

The base (`Effect`, `Composite`, `Behaviour`) is in `_effect`,
the kinds in `_leaves` and `_composites`; this module holds them all, the
namespace the runtime reads them by (``from .._kernel import _effects as fx``).
"""

from __future__ import annotations

from ._composites import All as All, First as First, Then as Then
from ._effect import (  # (_reused: for the driver, which names it fx._reused)
    Behaviour as Behaviour,
    Composite as Composite,
    Effect as Effect,
    _reused as _reused,
    shorten as shorten,
)
from ._leaves import (
    END_PREFIX as END_PREFIX,
    Call as Call,
    ContinueAsNew as ContinueAsNew,
    Emit as Emit,
    Join as Join,
    Marker as Marker,
    Publish as Publish,
    Recorded as Recorded,
    Send as Send,
    SendMany as SendMany,
    Spawn as Spawn,
    StartGate as StartGate,
    Step as Step,
    Timer as Timer,
    Wait as Wait,
    end_signal as end_signal,
)
