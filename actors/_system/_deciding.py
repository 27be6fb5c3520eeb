"""One start of an address at a time on this system (`Lifecycle.deciding`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from ._registry import Registry

__all__ = ["Deciding"]


class Deciding:
    """`Lifecycle.deciding`'s block (a class: a start pays for no async
    generator)."""

    __slots__ = ("activate", "creating", "done", "iids", "registry")

    def __init__(
        self,
        registry: Registry,
        creating: dict[bytes, trio.Event],
        iids: tuple[bytes, ...],
        activate: bool,
    ) -> None:
        self.registry, self.creating, self.iids, self.activate = registry, creating, iids, activate
        self.done = trio.Event()

    async def __aenter__(self) -> None:
        creating = self.creating
        while True:
            waiting = next((creating[iid] for iid in self.iids if iid in creating), None)
            if waiting is None:
                break
            await waiting.wait()
        # Invariant: nothing yields from the check above to this claim.
        for iid in self.iids:
            creating[iid] = self.done

    async def __aexit__(self, *exc_info: object) -> None:
        for iid in self.iids:
            del self.creating[iid]
        self.done.set()
        if self.activate:
            registry = self.registry
            for iid in self.iids:
                if iid in registry.routed_absent and iid not in registry.live:
                    registry.activate(iid)
