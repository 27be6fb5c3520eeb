"""Sends with an idempotency key: ``system.send(..., key=K)``.

A keyed send first looks for the key among the incarnation's keys (a cursor
named ``_protocol.KEY_PREFIX + key``, see `_protocol`); found, it stores
nothing and returns. Else it writes the message and the key in one
transaction, on condition that the key is still absent when it commits
(`storage.Txn.require_no_cursor`, checked under the instance's row lock):
a send of the same key through another node that committed since makes it
store nothing and return, as if it had been read. So the key is unique in
the journal, whatever node sent it. Keyed sends of one key to one instance
also take turns within a system, so a client that retries while its first
send is still being written reads the key rather than failing on it.

Keys live as long as the incarnation: continue-as-new and restarts keep
them (cursors carry over), a new incarnation at the address (after a
cancel) starts with none, since the start replaces the old one whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .._kernel._checks import check_name
from .._kernel._interfaces import SystemAPI
from .._kernel._protocol import KEY_PREFIX
from .._kernel._records import Signal

__all__ = ["KeyedSends"]


class KeyedSends:
    """One system's keyed sends in flight, by (instance id, key)."""

    def __init__(self, system: SystemAPI) -> None:
        self.system = system
        self._writing: dict[tuple[bytes, str], trio.Event] = {}

    async def send(
        self,
        iid: bytes,
        address: str,
        signal: Signal | None,
        payload: Any,
        key: Any,
        send: Callable[..., Awaitable[None]],
    ) -> None:
        """Send unless the incarnation at ``iid`` has had ``key`` already
        (``send`` writes the message with its key; ``signal`` and ``payload``
        are passed on to it, None where its transaction holds them)."""
        key = check_name(key, "send(key=...)")
        slot = (iid, key)
        # Invariant: at most one keyed send per (instance, key) reads and writes at a time.
        while (writing := self._writing.get(slot)) is not None:
            await writing.wait()
        self._writing[slot] = done = trio.Event()
        try:
            name = KEY_PREFIX + key
            seen = await self.system.journal.read(lambda r: r.cursor(iid, name))
            if seen is not None:
                return  # sent already to this incarnation: nothing more is stored
            await send(iid, address, signal, payload, key=key)
        finally:
            del self._writing[slot]
            done.set()
