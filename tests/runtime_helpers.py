"""Helpers for runtime tests: systems on LMDB that can be closed and reopened."""

from __future__ import annotations

from contextlib import aclosing

import trio

import actors
from storage import LMDBJournal, MemoryJournal

EPOCH = 1_800_000_000.0


def virtual_wall() -> float:
    """A wall clock that moves with trio's (Mock)Clock, so virtual time carries across reopens."""
    return EPOCH + trio.current_time()


class Opener:
    """Opens systems on one journal store, as restarts of one program would."""

    def __init__(self, tmp_path, backend: str = "lmdb") -> None:
        self.path = tmp_path / "journal"
        self.backend = backend
        self._memory = MemoryJournal()

    def journal(self):
        return LMDBJournal(self.path) if self.backend == "lmdb" else self._memory

    def __call__(self, *processes, **kw):
        kw.setdefault("now", virtual_wall)
        return actors.open_system(self.journal(), processes=list(processes), **kw)


# Under autojump_clock a wait that nothing will end jumps here at once and
# fails, instead of hanging the run; no test waits a century of virtual time.
_NEVER = 100 * 365 * 86400.0


async def wait_status(handle, *statuses: str) -> str:
    with trio.move_on_after(_NEVER) as waited:
        async with aclosing(handle.status_changes()) as changes:
            async for status in changes:
                if status in statuses:
                    return status
    if waited.cancelled_caught:
        raise AssertionError(f"{handle.id} never reached {statuses}: it stayed {handle.status}")
    return handle.status


class ReadsOffTheLoop(MemoryJournal):
    """A memory journal that reads as a remote one does (`reads_at_once`
    False: the system caches what it reads), and holds the next read once
    armed by ``slow`` (setting ``held``) until ``until`` is set, returning
    what it found at its start."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = False
        self.held = trio.Event()
        self.until = trio.Event()

    async def read(self, fn):
        found = await super().read(fn)
        if self.slow:
            self.slow = False
            self.held.set()
            await self.until.wait()
        return found
