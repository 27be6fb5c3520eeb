"""Where the features are wired into the core, in one place, when a system
is built (`wire`, called by `ActorSystem`): nothing registers itself at
import, so the order of imports cannot change what runs.

Two tables, read as they stand:

- `LIVE`: which `Behaviour` runs each kind of leaf effect live. A subclass
  has a row of its own (`fx.SendMany` beside `fx.Send`; `fx.Call` and
  `fx.Ask`, which are waits, their own): the actor looks a leaf's class up,
  with no walk of its bases. Kinds that never run live have none: a
  recorded value, a patch marker and continue-as-new are answered by the
  driver, and composites settle from their leaves.
- `RUN_ENDS` and `DISK_ENDS`: what a feature owes when a run ends, in the
  end's own transaction (see `_hooks`): on a live actor, and on an instance
  ended on disk.
"""

from __future__ import annotations

from typing import Any

from .._actor._arrivals import TimerBehaviour, WaitBehaviour
from .._features import (
    _asks,
    _asks_on_disk,
    _joins,
    _sends,
    _signals,
    _steps,
    _streams,
    _supervision,
)
from .._kernel import _effects as fx
from .._kernel._hooks import DiskEnd, RunEnd, Wiring

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
    (fx.Ask, _asks.AskBehaviour),
    (fx.Reply, _asks.ReplyBehaviour),
    (fx.Emit, _streams.EmitBehaviour),
    (fx.Publish, _streams.PublishBehaviour),
)

RUN_ENDS: tuple[RunEnd, ...] = (_asks.at_run_end,)  # the asks it took hear it ended
DISK_ENDS: tuple[DiskEnd, ...] = (_asks_on_disk.at_disk_end,)  # (the same, for a run on disk)


def wire() -> Wiring:
    """The hooks one system is built with, from the tables above."""
    return Wiring(behaviours=dict(LIVE), run_ends=RUN_ENDS, disk_ends=DISK_ENDS)
