"""Effects handed a process and not yet awaited: the forgotten-effect check.

Every effect `Context` hands the process must be awaited (alone or in a
`first`/`all`/`settled`): one dropped unawaited raises `ContextError` in the
process at its next effect, one still unawaited when the run returns or
continues as new fails it there. The driver (`Driver`) keeps the account.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ..errors import ContextError
from . import _effects as fx
from ._effects import Effect

__all__ = ["Unawaited"]


class Unawaited:
    """The effects a process coroutine was handed and has not awaited."""

    __slots__ = ("fresh",)

    # Invariant: fresh holds the effects `Context` handed the coroutine
    # that it has neither awaited nor put in a composite, in the order
    # made: None, the one such effect (the usual case: made, then
    # awaited at once, costs no list), or a list.
    fresh: Effect[Any] | list[Effect[Any]] | None

    def made(self, effect: Effect[Any]) -> None:
        """The coroutine was handed ``effect``: it must await it (alone or in
        a composite) before it returns. One it drops unawaited raises
        `ContextError` at its next effect (see `forgotten`)."""
        fresh = self.fresh
        if fresh is None:
            self.fresh = effect
        elif isinstance(fresh, list):
            fresh.append(effect)
        else:
            self.fresh = [fresh, effect]

    def joined(self, composite: fx.Composite[Any]) -> None:
        """As `made`, for a composite: its children are its to await now."""
        self.unmade(composite.children)
        self.made(composite)

    def unmade(self, effects: list[Effect[Any]]) -> None:
        """Stop tracking ``effects`` (a composite took them, or the process
        never got them: the call that made them raised half-way)."""
        fresh = self.fresh
        if fresh is None or not effects:
            return
        if not isinstance(fresh, list):
            if any(fresh is effect for effect in effects):
                self.fresh = None
            return
        taken = {id(effect) for effect in effects}
        self._keep([each for each in fresh if id(each) not in taken])

    def _keep(self, effects: list[Effect[Any]]) -> None:
        self.fresh = None if not effects else effects[0] if len(effects) == 1 else effects

    def forgotten(self, awaited: object, ending: bool) -> ContextError | None:
        """The coroutine awaits ``awaited`` (None: it returned); the error
        naming the effects it was handed and will never await, if any.

        Those are the ones nothing refers to any more (the coroutine dropped
        them: ``ctx.step(charge)`` without ``await``) and, when ``ending``
        (the run returns or continues as new), all the rest. An effect the
        coroutine still holds may yet be awaited; so it is kept. Reference
        counts are deterministic, so replay raises at the same effect."""
        # Counted below: no reference but the list `pending` may remain here
        # (so the caller keeps none either).
        fresh, self.fresh = self.fresh, None
        pending = [
            each
            for each in (fresh if isinstance(fresh, list) else (fresh,))
            if each is not None and each is not awaited
        ]
        del fresh
        lost: list[Effect[Any]] = []
        kept: list[Effect[Any]] = []
        if ending:
            lost = pending
        else:
            for each, count in zip(pending, _refcounts(pending), strict=True):
                # A composite is referred to by its children's parent pointers too.
                own = len(each.children) if isinstance(each, fx.Composite) else 0
                (lost if count <= _ALONE + own else kept).append(each)
        self._keep(kept)
        if not lost:
            return None
        made = " and ".join(f"{each.as_call()} made at {each.made_where()}" for each in lost)
        if len(lost) == 1:
            return ContextError(
                f"{made} was never awaited, so it never ran: await it, or pass it to "
                "ctx.first/all/settled"
            )
        return ContextError(
            f"{made} were never awaited, so they never ran: await each, or pass them to "
            "ctx.first/all/settled"
        )


def _refcounts(objects: Sequence[object]) -> list[int]:
    return [sys.getrefcount(each) for each in objects]


# What `_refcounts` gives for an object only its list refers to: measured
# through the same code, so it holds for any interpreter that counts references.
_ALONE = _refcounts([object()])[0]
