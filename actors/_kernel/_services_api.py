"""What the runtime's modules may ask of the system's services: the loops
`open_system` runs (`Service`) and the services' narrow Protocols (timers,
nodes, keyed sends, signals).

`SystemAPI` (``actors._kernel._interfaces``) hands them out (the asks' and
the queues' Protocols are beside it there, so that what names those
features stays in as few modules as it can); they are Protocols so that
the runtime's modules name a service without importing its feature module.
This module imports only modules below all of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from storage import Txn

from ._values import Signal

__all__ = ["KeysAPI", "NodesAPI", "Service", "SignalsAPI", "TimersAPI"]


class Service(Protocol):
    """A loop of the system's that `open_system` runs, again after each
    journal outage (`JournalWatch.keep_running`): ``what`` names it."""

    what: str

    async def run(self) -> None: ...


class TimersAPI(Protocol):
    """What the runtime's modules use of the `TimerService` (``actors._features._timers``)."""

    def schedule(self, due: float, iid: bytes) -> None: ...


class NodesAPI(Protocol):
    """What the runtime's modules use of the `NodeView` (``actors._system._nodes``)."""

    def claimed(self, iid: bytes, epoch: int | None) -> None: ...

    def running(self, iid: bytes) -> None: ...

    def forgotten(self, iid: bytes) -> None: ...

    def trusted(self, iid: bytes) -> bool: ...

    def owned_elsewhere(self, iid: bytes) -> bool: ...

    def mail_noticed(self, iid: bytes) -> None: ...

    def let_go_of_the_lost(self) -> None: ...


class KeysAPI(Protocol):
    """What the runtime's modules use of the `KeyedSends` in flight (``actors._features._sends``)."""

    async def send(
        self,
        iid: bytes,
        address: str,
        signal: Signal | None,
        payload: Any,
        key: Any,
        send: Callable[..., Awaitable[None]],
    ) -> None: ...


class SignalsAPI(Protocol):
    """What the runtime's modules use of the `SignalRouter` (``actors._features._signals``)."""

    def arrange(self, signal: Signal, values: tuple[str, ...]) -> tuple[str, ...]: ...

    async def deliver(
        self,
        signal: Signal,
        values: tuple[str, ...],
        payload: Any,
        key: str | None,
        commit: Callable[[Txn, int], Awaitable[list[int]]],
    ) -> int: ...
