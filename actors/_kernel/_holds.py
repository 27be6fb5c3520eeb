"""`Holds`: instances held off memory while something is done of them."""

from __future__ import annotations

from collections.abc import Iterator

import trio

__all__ = ["Holds"]


class Holds:
    """Instances being brought into memory, or held off it while something
    is written of them (a cancel, a dropped message): a set of ids whose
    holders say when they let go, so that whoever waits for one sleeps
    until then instead of polling."""

    __slots__ = ("_released",)

    def __init__(self) -> None:
        self._released: dict[bytes, trio.Event] = {}

    def __contains__(self, iid: bytes) -> bool:
        return iid in self._released

    def __len__(self) -> int:
        return len(self._released)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._released)

    def add(self, iid: bytes) -> None:
        if iid not in self._released:
            self._released[iid] = trio.Event()

    def discard(self, iid: bytes) -> None:
        released = self._released.pop(iid, None)
        if released is not None:
            released.set()

    async def wait_released(self, iid: bytes) -> None:
        """Return once ``iid`` is not held (at once if it is not)."""
        released = self._released.get(iid)
        if released is not None:
            await released.wait()
