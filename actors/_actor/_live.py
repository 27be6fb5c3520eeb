"""An actor's live leaves (`Actor.live`): a tuple while there are few, a set
past `FEW`.

Most live instances wait on one wait: a tuple of it is 48 B, where a set
of one is 216 B. A scope over many children keeps a set's O(1) membership.
Readers outside the actor use ``in`` and iterate, as on any collection;
only the functions here make a new one (the tuple is replaced, never
changed; the set is changed in place).
"""

from __future__ import annotations

from typing import Any, TypeAlias

from .._kernel._effects import Effect

__all__ = ["FEW", "Live", "with_leaf", "without_leaf"]

FEW = 8  # the most leaves kept in a tuple

Live: TypeAlias = tuple[Effect[Any], ...] | set[Effect[Any]]


def with_leaf(live: Live, leaf: Effect[Any]) -> Live:
    """``live`` with ``leaf`` added (not in it yet)."""
    if isinstance(live, tuple):
        if len(live) < FEW:
            return (*live, leaf)
        live = set(live)
    live.add(leaf)
    return live


def without_leaf(live: Live, leaf: Effect[Any]) -> Live:
    """``live`` without ``leaf`` (in it or not)."""
    if isinstance(live, tuple):
        if len(live) == 1:
            return () if live[0] is leaf else live
        return tuple(each for each in live if each is not leaf) if leaf in live else live
    live.discard(leaf)
    return live if live else ()
