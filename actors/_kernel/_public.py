"""What makes a class public, besides being exported: the module it names
(`name_public_classes`) and whether users may construct it
(`NoPublicConstructor`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["NoPublicConstructor", "name_public_classes"]

T = TypeVar("T")


class NoPublicConstructor(type):
    """A metaclass for classes users receive but never make (`ActorSystem`,
    `Handle`): ``Class(...)`` raises, naming the call that gives one (the
    class's ``_made_by``); the runtime makes them with ``Class._create(...)``.
    Modelled on trio's ``NoPublicConstructor``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor: "
            f"{getattr(cls, '_made_by', 'the runtime makes it')}"
        )

    if TYPE_CHECKING:

        def _create(cls: type[T], *args: Any, **kwargs: Any) -> T: ...

    else:
        # ``type.__call__`` itself, bound to the class (this metaclass's
        # ``__call__`` passed over): a handle made at every start costs
        # no frame of ours besides its ``__init__``.
        _create = type.__call__


def name_public_classes(namespace: dict[str, Any], module: str) -> None:
    """Make the classes a public module exports (its ``__all__``) from a
    private one of this package report ``module`` as theirs, as trio's do:
    users see where they import them from in reprs, docs and tracebacks."""
    for name in namespace["__all__"]:
        obj = namespace[name]
        if isinstance(obj, type) and obj.__module__.startswith("actors._"):
            obj.__module__ = module
