"""Where the features are wired into the core, in one place, when a system
is built (`wire`, called by `ActorSystem`): nothing registers itself at
import, so the order of imports cannot change what runs.

Two tables, read as they stand, and what the system's services complete:

- `LIVE`: which `Behaviour` runs each kind of leaf effect live. A subclass
  has a row of its own (`fx.SendMany` beside `fx.Send`; `fx.Call` and
  `Ask`, which are waits, their own): the actor looks a leaf's class up,
  with no walk of its bases. Kinds that never run live have none: a
  recorded value, a patch marker and continue-as-new are answered by the
  driver, and composites settle from their leaves. A behaviour that needs
  a service of the system (a reply's: the asks in flight) is made by `wire`
  with it, an instance of its row's class.
- `RUN_ENDS` and `DISK_ENDS`: what a feature owes when a run ends, in the
  end's own transaction (see `_hooks`): on a live actor, and on an instance
  ended on disk; each bound by `wire` to the service it answers with.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from .._actor._arrivals import TimerBehaviour, WaitBehaviour
from .._features import (
    _ask_forms,
    _asks,
    _joins,
    _sends,
    _signals,
    _steps,
    _streams,
    _supervision,
)
from .._kernel import _effects as fx
from .._kernel._hooks import After, DiskEnd, RunEnd, Wiring

__all__ = ["DISK_ENDS", "LIVE", "RUN_ENDS", "wire"]

LIVE: tuple[tuple[type[fx.Effect[Any]], type[fx.Behaviour]], ...] = (
    (fx.Wait, WaitBehaviour),
    (fx.Timer, TimerBehaviour),
    (fx.Step, _steps.StepBehaviour),
    (fx.Spawn, _supervision.SpawnBehaviour),
    (fx.Call, _supervision.CallBehaviour),
    (fx.Join, _joins.JoinBehaviour),
    (fx.Send, _sends.SendBehaviour),
    (fx.SendMany, _sends.SendBehaviour),
    (_signals.SignalEffect, _signals.SignalBehaviour),
    (_ask_forms.Ask, _asks.AskBehaviour),
    (_ask_forms.Reply, _asks.ReplyBehaviour),  # (made with the asks in flight: see `wire`)
    (fx.Emit, _streams.EmitBehaviour),
    (fx.Publish, _streams.PublishBehaviour),
)

# (Each takes the service first: `wire` binds it, making a `RunEnd`/`DiskEnd`.)
_Hook = Callable[..., list[After]]
RUN_ENDS: tuple[_Hook, ...] = (_asks.at_run_end,)  # the asks it took hear it ended
DISK_ENDS: tuple[_Hook, ...] = (_asks.at_disk_end,)  # (the same, for a run on disk)


def wire(asks: _asks.Asks) -> Wiring:
    """The hooks one system is built with, from the tables above, bound to
    its services: ``asks``, the asks in flight (what a reply and a run's
    end answer with)."""
    behaviours: dict[type[fx.Effect[Any]], fx.Behaviour | type[fx.Behaviour]] = dict(LIVE)
    behaviours[_ask_forms.Reply] = _asks.ReplyBehaviour(asks)
    run_ends: tuple[RunEnd, ...] = tuple(partial(hook, asks) for hook in RUN_ENDS)
    disk_ends: tuple[DiskEnd, ...] = tuple(partial(hook, asks) for hook in DISK_ENDS)
    return Wiring(behaviours=behaviours, run_ends=run_ends, disk_ends=disk_ends)
