"""A trio run made a function of a seed: the scheduler's order, worker
threads run inline, seeded uuid4; and the names of the tasks it last ran."""

from __future__ import annotations

import random as _random
import uuid as _uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio
import trio.testing

__all__ = ["Picks", "deterministic"]


class Picks(trio.abc.Instrument):
    """Keeps the names of the last tasks the scheduler ran."""

    def __init__(self, keep: int) -> None:
        self.picks: deque[str] = deque(maxlen=keep)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.picks.append(task.name)


@contextmanager
def deterministic(seed: int, root: list[trio.lowlevel.Task]) -> Iterator[None]:
    """Make a trio run (whose root task ``root`` will hold) a function of ``seed``.

    trio shuffles each batch of runnable tasks with ``trio._core._run._r``;
    with ``_ALLOW_DETERMINISTIC_SCHEDULING`` (what Hypothesis turns on) it
    sorts the batch by task creation first, so a seeded ``_r`` gives the
    same order on every run. Worker threads finish when the OS says, so
    ``trio.to_thread.run_sync`` runs its function inline in that run; and
    the runtime draws ask ids from ``uuid.uuid4``, which gives seeded values
    there. Everything is put back afterwards; other trio runs (in other
    threads) keep the real ones.
    """
    run = trio._core._run
    saved = (run._ALLOW_DETERMINISTIC_SCHEDULING, run._r.getstate())
    real_run_sync = trio.to_thread.run_sync
    real_uuid4 = _uuid.uuid4
    ids = _random.Random(f"{seed}:uuid")

    def ours() -> bool:
        return (
            trio.lowlevel.in_trio_run()
            and bool(root)
            and (trio.lowlevel.current_root_task() is root[0])
        )

    async def run_sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not ours():
            return await real_run_sync(fn, *args, **kwargs)
        await trio.lowlevel.checkpoint()
        return fn(*args)

    def uuid4() -> _uuid.UUID:
        if not ours():
            return real_uuid4()
        return _uuid.UUID(int=ids.getrandbits(128), version=4)

    setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", True)  # noqa: B010 - Final in trio's types
    run._r.seed(f"{seed}:scheduler")
    setattr(trio.to_thread, "run_sync", run_sync)  # noqa: B010 - typed otherwise in trio
    _uuid.uuid4 = uuid4
    try:
        yield
    finally:
        _uuid.uuid4 = real_uuid4
        setattr(trio.to_thread, "run_sync", real_run_sync)  # noqa: B010 - as above
        setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", saved[0])  # noqa: B010 - as above
        run._r.setstate(saved[1])
