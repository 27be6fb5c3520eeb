"""Lending the GIL to a journal's writer thread when the trio thread keeps it.

Both journals commit in a writer thread of their own (LMDB's writer,
PostgreSQL's committer). The writer is a Python thread, and every step it
takes ends by taking the GIL back: waking from a wait, each LMDB call
(py-lmdb makes each put and the commit with the GIL released), each round
trip to the PostgreSQL server (psycopg waits on its socket with the GIL
released). CPython forces a hand-over only for a thread that has waited a
whole switch interval (5 ms) with no other thread taking the GIL; when the
holder drops it, the waiter is woken and starts a new interval. Trio's run
loop drops the GIL for an instant on every pass (an ``epoll_wait`` with
timeout 0 while any task is runnable) and takes it straight back, usually
before the woken thread runs. So beside a task that computes and
checkpoints often (``await trio.sleep(0)`` after each millisecond of work)
the trio thread holds the GIL nearly always but never for a whole
interval: a waiting thread is woken and beaten a thousand times a second
and may wait seconds to run a line. A commit then takes seconds, though
its fsync took 0.3 ms, or its round trips to PostgreSQL 1 ms (beside such
a task 18 sends got through to PostgreSQL in 3 s, 127 ms each at the
median, against 3.6 ms without it). (Measured: with no trio and no LMDB, a
thread sleeping 0.3 ms in a loop beside one that spins 1 ms and polls
epoll with timeout 0 waited up to 0.3-1.2 s for the GIL in runs of 5 s.)

Only the trio thread can let go, so the cure lives there: while writes are
in flight, a system task looks every `NUDGE_AFTER` whether the writer took a
step since its last look; if it did not, it blocks the trio thread with the
GIL released until a batch is handed back to trio, for at most `NUDGE_WAIT`.
While the writer is in a commit, waiting for the disk (or the server), such
a wait may be in vain (a slow fsync, not a starved thread); when one is,
the looks space out (doubling, up to `NUDGE_AFTER_MAX`) until the commit
returns, so a slow disk costs the loop a few percent of its time at most.
Anywhere else a thread that took no step is starved (of the GIL, or of a
core on a loaded machine), and the looks stay `NUDGE_AFTER` apart.

PostgreSQL's committer times its commits (`Handoff.committing` with
``timed``): a batch there is round trips and the server's fsync, 8.6 ms
at the median under a hundred workers, so a look 5 ms in found no step in
nearly every batch and blocked the trio thread until the batch came back
(1.1-1.5 s in a 6 s run of 1-step processes, which the trio thread, their
bottleneck, never got back). A look now leaves a timed commit alone until
it has taken twice what one usually takes (10-20 ms): 8-11 such waits in
the same run, and 1-step processes 1,755 -> 2,048/s (three runs each).

LMDB's writer hands batches back through a `Doorbell`, which wakes the
trio thread without the writer letting go of the GIL.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import trio

__all__ = ["NUDGE_AFTER", "NUDGE_AFTER_MAX", "NUDGE_WAIT", "Doorbell", "Handoff"]

T = TypeVar("T")

# The interpreter's own bound (sys.getswitchinterval() by default): a thread
# that waited this long is owed the GIL. Healthy steps (a batch applied, an
# fsync) take less, so the looks rarely find nothing done and cost a wake-up
# of the loop each.
NUDGE_AFTER = 0.005
# The most one look blocks the trio loop: enough for the writer to apply a
# large batch and commit it on a healthy disk.
NUDGE_WAIT = 0.010
# Looks after fruitless waits space out to this (a slow disk, not a starved
# writer): one wait of NUDGE_WAIT in this long keeps the cost under 10%.
NUDGE_AFTER_MAX = 0.1


class Handoff:
    """The trio side of the writer's progress: looks for a starved writer
    and, finding one, lets the GIL go until a batch is handed back.

    ``busy`` says whether writes are in flight (called in the trio thread).
    The writer thread calls `step` after each step, `handed_back` after
    handing a batch to trio and `committing` as it starts a commit; the
    trio thread calls `start`, `wake` (writes went in flight) and `stop`.
    """

    __slots__ = (
        "_began",
        "_busy",
        "_idle",
        "_on_disk",
        "_reached",
        "_scope",
        "_seen",
        "_steps",
        "_timed",
        "_waiting",
        "nudges",
        "usual",
    )

    def __init__(self, busy: Callable[[], bool]) -> None:
        self._busy = busy
        # Bumped by the writer thread, read by the trio thread; a look only
        # asks whether the count moved.
        self._steps = 0
        self._on_disk = False  # the writer is in a commit (until its next step)
        # A commit timed (`committing(timed=True)`): when it began, and how
        # long such a commit usually takes (a moving average of those no
        # look let the GIL go for; 0 until one is measured).
        self._began = 0.0
        self._timed = -1  # `nudges` when the timed commit began (-1: none)
        self.usual = 0.0
        self._waiting = False  # the trio thread waits for `_reached`
        self._reached = threading.Event()
        # While no writes are in flight, the looking task sleeps in this
        # scope until `wake` sets its deadline (None: it is not idle).
        self._idle: trio.CancelScope | None = None
        self._seen = 0  # `_steps` when writes last went in flight (see `wake`)
        self._scope: trio.CancelScope | None = None
        self.nudges = 0  # looks that found nothing done and let the GIL go

    # -- the writer thread ---------------------------------------------------

    def committing(self, *, timed: bool = False) -> None:
        """The writer starts a commit (a round trip to the server, an
        fsync); ``timed``: its time counts toward `usual` (the committer's
        commits, not a worker thread's reads)."""
        self._on_disk = True
        if timed:
            self._began = time.monotonic()
            self._timed = self.nudges

    def step(self) -> None:
        if self._timed == self.nudges:  # (a commit no look let the GIL go for)
            took = time.monotonic() - self._began
            self.usual += (took - self.usual) / 8 if self.usual else took
        self._timed = -1
        self._on_disk = False
        self._steps += 1

    def handed_back(self) -> None:
        self._steps += 1
        if self._waiting:
            self._reached.set()

    # -- the trio thread -------------------------------------------------------

    def start(self) -> None:
        """Start looking (from the trio thread, as the journal opens)."""
        self._scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(self._look, name="journal-handoff")

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    def wake(self) -> None:
        """Writes went in flight: if idle, look `NUDGE_AFTER` from now.

        The idle task is not woken now only to start a sleep (a resumption
        of the task in the middle of every write that goes in flight): its
        idle wait ends at the deadline set here, where its first look
        falls, with the writer's steps counted from now, as they would be
        after that sleep.
        """
        idle = self._idle
        if idle is not None:
            self._idle = None
            self._seen = self._steps
            idle.deadline = trio.current_time() + NUDGE_AFTER

    async def _look(self) -> None:
        assert self._scope is not None
        with self._scope:
            after = NUDGE_AFTER
            while True:
                if not self._busy():
                    # Invariant: no checkpoint between the look at `_busy`
                    # and the idle wait, so the `wake` of the next writes
                    # in flight finds this task idle and sets the deadline.
                    with trio.CancelScope() as idle:
                        self._idle = idle
                        try:
                            await trio.sleep_forever()
                        finally:
                            self._idle = None
                    seen = self._seen
                    after = NUDGE_AFTER
                else:
                    seen = self._steps
                    await trio.sleep(after)
                if not self._busy() or self._steps != seen:
                    after = NUDGE_AFTER
                elif self._in_usual_commit():
                    after = NUDGE_AFTER  # not starved: its commit takes this long
                elif self._let_go() or not self._on_disk:
                    after = NUDGE_AFTER
                else:  # a slow disk: look less often until the commit returns
                    after = min(after * 2, NUDGE_AFTER_MAX)

    def _in_usual_commit(self) -> bool:
        """Whether the writer is in a timed commit that has taken less than
        twice what one usually takes (twice `NUDGE_AFTER` at least, four
        times at most): a batch of PostgreSQL statements takes its round
        trips and the server's fsync (8.6 ms at the median for the writes
        of 52 processes), and letting the GIL go for it only stops the trio
        thread, which found no step after 5 ms in nearly every batch. One
        that takes longer may be starved after its round trips, and is let
        go for as before, at most 15 ms later."""
        if self._timed < 0 or not self._on_disk:
            return False
        allowance = min(2 * max(self.usual, NUDGE_AFTER), 4 * NUDGE_AFTER)
        return time.monotonic() - self._began < allowance

    def _let_go(self) -> bool:
        """Block this (the trio) thread, the GIL released, until a batch is
        handed back or NUDGE_WAIT passes; False if the threads took no step
        meanwhile (they wait for the disk, not for the GIL)."""
        self.nudges += 1
        seen = self._steps
        self._reached.clear()
        self._waiting = True
        try:
            # Event.wait releases the GIL and holds it off: this thread does
            # not run (and take it back) until woken, unlike a loop pass.
            return self._reached.wait(NUDGE_WAIT) or self._steps != seen
        finally:
            self._waiting = False


def _gil_holding_write() -> Callable[[int], object]:
    """A one-byte write to a file descriptor that keeps the GIL.

    ``os.write`` (like every I/O call) releases the GIL for its system call,
    and the thread the write wakes may take the GIL meanwhile: on the same
    core the kernel runs the woken thread at once, and the writing thread
    then waits for the GIL until the woken one idles or a switch interval
    (5 ms) passes. A C function called through `ctypes.PyDLL` runs with the
    GIL held, so it is the woken thread that waits, for a microsecond.
    Where ctypes cannot reach ``write``, ``os.write``.
    """
    try:
        write = ctypes.PyDLL(None).write
    except (OSError, AttributeError):  # pragma: no cover - no C library to reach
        return lambda fd: os.write(fd, b"\0")
    write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
    write.restype = ctypes.c_ssize_t
    return lambda fd: write(fd, b"\0", 1)


_ring = _gil_holding_write()


class Doorbell(Generic[T]):
    """Hands items from a thread to the trio thread, in order: `ring`
    queues an item and writes a byte on a pipe without releasing the GIL
    (see `_gil_holding_write`), and a system task waiting on the pipe calls
    ``deliver`` with each item, in the trio thread.

    The writer thread hands back a committed batch this way just before it
    starts its next commit: the trio thread wakes as the commit releases
    the GIL, with no thread in between (a waker thread that makes the
    call, trio's ``run_sync_soon``, costs a thread wake-up more, ~0.1 ms,
    while both the trio thread and the GIL wait).
    """

    __slots__ = ("_deliver", "_fds", "_items", "_scope")

    def __init__(self, deliver: Callable[[T], None]) -> None:
        self._deliver = deliver
        self._items: deque[T] = deque()  # rung, not yet delivered (append/popleft: atomic)
        self._fds: tuple[int, int] | None = None  # the pipe: (read end, write end)
        self._scope: trio.CancelScope | None = None

    def open(self) -> None:
        """Start answering (from the trio thread)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)  # a full pipe has a byte to read already
        self._fds = (read_fd, write_fd)
        self._scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(self._answer, read_fd, name="journal-doorbell")

    def ring(self, item: T) -> None:
        """Hand ``item`` to the trio thread (from any thread, while open)."""
        assert self._fds is not None
        self._items.append(item)
        _ring(self._fds[1])

    def close(self) -> None:
        """Stop answering (from the trio thread); items rung and not yet
        delivered are dropped."""
        if self._fds is None:
            return
        read_fd, write_fd = self._fds
        self._fds = None
        assert self._scope is not None
        self._scope.cancel()
        trio.lowlevel.notify_closing(read_fd)
        os.close(read_fd)
        os.close(write_fd)

    async def _answer(self, read_fd: int) -> None:
        assert self._scope is not None
        items = self._items
        with self._scope:
            while True:
                try:
                    await trio.lowlevel.wait_readable(read_fd)
                except trio.ClosedResourceError:
                    return
                try:  # noqa: SIM105 - the wake path: suppress() would cost a context manager a pass
                    os.read(read_fd, 4096)
                except BlockingIOError:  # drained by an earlier pass
                    pass
                # Invariant: an item is appended before its byte is written,
                # so each byte read finds its item here (or an earlier pass
                # delivered it).
                while items:
                    self._deliver(items.popleft())
