"""`ContextCore`: what each family of ``ctx``'s effects stands on: the
actor, whether its process still runs, and handing a made effect to it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from .._kernel import _effects as fx
from .._kernel._interfaces import ActorAPI
from .._kernel._values import Signal
from ..errors import ContextError, InvalidArguments

__all__ = ["ContextCore", "check_effects", "check_signals"]


E = TypeVar("E", bound=fx.Effect[Any])  # an effect made for the process
C = TypeVar("C", bound=fx.Composite[Any])  # a composite made for the process


class ContextCore:
    """The actor a `Context` serves; the families of its effects
    (`MessageEffects`, `ChildEffects`) and `Context` itself make effects
    through `_made`, which every such method calls last, directly."""

    __slots__ = ("_actor",)

    def __init__(self, actor: ActorAPI) -> None:
        self._actor = actor

    def _live(self) -> ActorAPI:
        actor = self._actor
        if actor.done:
            raise ContextError(
                f"the ctx of {actor.address!r} was used after its process ended; "
                "use ctx only inside the process function"
            )
        return actor

    # Called last by each method that gives the process an effect to await,
    # directly (the caller's caller is the code that made the effect).

    def _made(self, effect: E, *, composite: bool = False) -> E:
        """Hand ``effect`` to the process: the driver tracks it until it is
        awaited (a ``composite``'s children are the composite's from now on)."""
        # Where it was made, cheaply: the code and the instruction offset;
        # the line is looked up only if the effect is never awaited.
        frame = sys._getframe(2)
        effect.made_in = frame.f_code
        effect.made_at = frame.f_lasti
        driver = self._actor.driver
        if driver.seq <= driver.last:  # (its last leaf's outcome is logged)
            effect.logged = driver
        if composite:
            driver.joined(cast("fx.Composite[Any]", effect))
        elif driver.fresh is None:  # (`Unawaited.made`'s usual case, written out)
            driver.fresh = effect
        else:
            driver.made(effect)
        return effect

    def _compose(self, make: Callable[[list[fx.Effect[Any]]], C], children: list[Any]) -> C:
        """``make(children)``, once they are known to be effects; if it
        raises, the process no longer holds them as unawaited."""
        try:
            check_effects(children)
            return make(children)
        except BaseException:
            self._actor.driver.unmade(children)  # refused: the process has them no more
            raise


def check_signals(signals: tuple[Signal, ...]) -> None:
    """Raise `InvalidArguments` unless each of ``signals`` is a `Signal`."""
    for signal in signals:
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"expected an actors.Signal, got {signal!r}")


def check_effects(effects: Any) -> None:
    """Raise `InvalidArguments` unless each of ``effects`` may go into a
    race or a join: an effect that neither ends the run nor sends."""
    for effect in effects:
        if not isinstance(effect, fx.Effect):
            raise InvalidArguments(
                f"ctx.first/all/settled take effects (ctx.wait(...), ctx.sleep(...), "
                f"ctx.step(...), ...), got {effect!r}"
            )
        if effect.ends_run:
            raise InvalidArguments(
                "ctx.continue_as_new(...) ends the run, so it races and joins nothing: "
                "await it alone"
            )
        if isinstance(effect, fx.Send):  # (SendMany and ctx.signal's too)
            # A send is written with its log entry whatever a race decides,
            # so a replay could pick another winner than the live run did.
            raise InvalidArguments(
                "ctx.send(...), ctx.send_many(...) and ctx.signal(...) take effect where "
                "they are awaited, so they race and join nothing: await them alone"
            )
