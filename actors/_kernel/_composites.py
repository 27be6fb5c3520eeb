"""The composite effects: races and joins over child effects (`First`,
`All`) and `Then`; unnumbered, their outcome follows from their children's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._effect import Composite, Effect
from ._values import Outcome

__all__ = ["All", "First", "Then"]

T = TypeVar("T", covariant=True)  # what awaiting the effect gives


def _first_seq(effect: Effect[Any]) -> int:
    return min(leaf.seq for leaf in effect.leaves())


class First(Composite[tuple[str, Any]]):
    """Done when its first child is: ``(name, value)``, or that child's error."""

    __slots__ = ()
    kind = "first"

    def settle_from_children(self, child: Effect[Any] | None = None) -> bool:
        for name, each in zip(self.names or (), self.children, strict=False):
            if each.done if child is None else each is child:
                self.done = True
                if each.error is not None:
                    self.error = each.error
                else:
                    self.value = (name, each.value)
                return True
        return False

    def as_call(self) -> str:
        named = zip(self.names or (), self.children, strict=False)
        return f"ctx.first({', '.join(f'{name}={each.as_call()}' for name, each in named)})"


class All(Composite[list[Any]]):
    """``all``: a list of values, or the error of the lowest-numbered failure.
    ``settled``: a list of `Outcome`, never an error."""

    __slots__ = ("settled",)
    kind = "all"

    def __init__(self, children: list[Effect[Any]], settled: bool) -> None:
        super().__init__(children, None)
        self.settled = settled

    def settle_from_children(self, child: Effect[Any] | None = None) -> bool:
        if child is not None:  # live: one more child finished
            self.remaining -= 1
            if not self.settled and child.error is not None:
                self.done = True
                self.error = child.error
                return True
            if self.remaining > 0:
                return False
        elif not self.settled:  # replay: the lowest-numbered failure wins
            for each in sorted(self.children, key=_first_seq):
                if each.done and each.error is not None:
                    self.done = True
                    self.error = each.error
                    return True
        self.remaining = sum(1 for c in self.children if not c.done)
        if self.remaining == 0:
            self.done = True
            if self.settled:
                self.value = [
                    Outcome(ok=c.error is None, value=c.value, error=c.error) for c in self.children
                ]
            else:
                self.value = [c.value for c in self.children]
            return True
        return False

    def as_call(self) -> str:
        verb = "settled" if self.settled else "all"
        return f"ctx.{verb}({', '.join(each.as_call() for each in self.children)})"


class Then(Composite[T]):
    """One child's value passed through ``fn`` (which may raise instead):
    what ``ctx.ask(..., timeout=)`` and ``ctx.scope`` give. The child's
    error passes through unchanged. As any composite, it logs nothing of its
    own, so replay decides it from the child's outcome again."""

    __slots__ = ("call", "fn")
    kind = "then"

    def __init__(self, child: Effect[Any], fn: Callable[[Any], T], call: str) -> None:
        Composite.__init__(self, [child], None)
        self.fn = fn
        self.call = call  # what as_call says

    def settle_from_children(self, child: Effect[Any] | None = None) -> bool:
        only = self.children[0]
        if not only.done:
            return False
        self.done = True
        if only.error is not None:
            self.error = only.error
        else:
            try:
                self.value = self.fn(only.value)
            except Exception as exc:  # noqa: BLE001 - raised in the process, as if it ran there
                self.error = exc
        return True

    def as_call(self) -> str:
        return self.call
