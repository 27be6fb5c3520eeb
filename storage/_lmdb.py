"""`LMDBJournal`: the embedded, durable default journal, with group commit.

Layout: one LMDB environment in a directory, named databases with
big-endian keys so a prefix scan returns records in order:

=============  =====================================  ==========================
database       key                                    value
=============  =====================================  ==========================
instances      iid(16)                                status(1) hlen(2) header record
status         status(1) iid(16)                      process template (utf-8)
log            iid(16) run(4) seq(4)                  entry
mail           iid(16) seq(8)                         message
timers         due_us(8) iid(16) run(4) seq(4)        empty
timer_ids      iid(16) run(4) seq(4)                  due_us(8)
stream         iid(16) index(8)                       value
cursors        iid(16) consumer(utf-8)                position(8)
counters       iid(16) kind(1)                        next number(8)
=============  =====================================  ==========================

Group commit: one writer thread owns every write transaction (py-lmdb binds
a write transaction to the OS thread that began it). Transactions submitted
while a commit is in flight wait in the next batch; each batch is one LMDB
transaction, committed with LMDB's own synced commit (data fsync, then the
meta page). Then one call through the trio token hands the batch back, and
the trio thread reschedules each caller with its own outcome: one fsync and
one wake-up of the event loop per batch. A small second thread, the waker,
makes that call when the writer is busy with the next batch (see
`LMDBJournal._write_loop` for why). A lone caller skips all this and commits
in the trio thread (`LMDBJournal._commit_inline`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import queue
import struct
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import lmdb
import msgpack
import trio
from outcome import Error, Value

from . import _journal as j
from . import _shapes
from ._clock import AutojumpHold
from ._journal import (
    ADD_TIMER,
    APPEND_MESSAGE,
    APPEND_STREAM,
    CANCEL_TIMER,
    DELETE_CURSOR,
    DELETE_INSTANCE,
    DROP_LOG,
    PUT_INSTANCE,
    PUT_LOG,
    SET_CURSOR,
    SET_STATUS,
    TAKE_MESSAGE,
    CorruptRecord,
    InstanceRow,
    Journal,
    Reader,
    Ticket,
    TimerRow,
    Txn,
)
from .errors import (
    ActorError,
    Conflict,
    EncodeError,
    JournalClosed,
    JournalCorrupt,
    JournalDiskFull,
    JournalFull,
    JournalLocked,
)

__all__ = ["LMDBJournal", "JournalHolder"]

_RUN_SEQ = struct.Struct(">II")
_Q = struct.Struct(">Q")
_H = struct.Struct(">H")
_DBS = (
    "instances", "status", "log", "mail", "timers", "timer_ids", "stream", "cursors", "counters",
    "meta",
)  # fmt: skip
# The journal format: the layout of the databases and of the records in
# them. Stored in meta["format"] when a journal is created, checked on every
# open. Invariant: a journal is read only by code that reads its format; a
# change to the layout bumps _FORMAT and brings a migration or a refusal.
_FORMAT = b"1"


def _format_mismatch(path: Path, found: bytes | None) -> JournalCorrupt:
    """The error for a journal whose format this code does not read."""
    mine = _FORMAT.decode()
    if found is None:
        return JournalCorrupt(
            f"{path} has no journal format marker (this version reads format {mine}): "
            "it was not written by this library, or its meta database was damaged; "
            "open a journal directory this library created",
            database="meta",
            key=b"format",
        )
    theirs = found.decode(errors="replace")
    newer = found.isdigit() and int(found) > int(_FORMAT)
    advice = (
        "upgrade the library to a version that reads it"
        if newer
        else f"open it with the version of the library that wrote it (format {theirs})"
    )
    return JournalCorrupt(
        f"{path} holds journal format {theirs}, and this version of the library reads "
        f"format {mine} only; nothing was read or changed. To use it, {advice}",
        database="meta",
        key=b"format",
    )
_NO_SPLIT = 1 << 62  # batch size limit meaning "no limit"
_MIN_SPLIT = 64  # see LMDBJournal._next_split
# "async" durability acknowledges a write once it is queued, but only while
# fewer than ASYNC_WINDOW_TXNS transactions wait to be committed and the
# oldest of them was queued less than ASYNC_WINDOW_SECONDS ago; past either
# bound the caller waits for its own commit. So acknowledged writes that a
# crash can lose number at most ASYNC_WINDOW_TXNS, and when the disk falls
# behind, writers slow down to its pace instead of queueing without end.
ASYNC_WINDOW_TXNS = 1000
ASYNC_WINDOW_SECONDS = 1.0
# Operations that only remove records (see LMDBJournal._write's reserve).
_FREEING_OPS = frozenset({DELETE_INSTANCE, DROP_LOG, TAKE_MESSAGE, CANCEL_TIMER})
# A key of the due-time index that is not this long is damaged: the global
# scans pass it by (the timer service must not stop for it), and the
# instance's own read of its timers reports it (`_LMDBReader.timers`).
_TIMER_KEY = 32
_MAIL_COUNTER = b"m"
_STREAM_COUNTER = b"s"

_DIR_MODE = 0o700  # see LMDBJournal._make_private_dir
_FILE_MODE = 0o600
_FILES = ("data.mdb", "lock.mdb", "owner.lock")
# A commit failing with one of these means the filesystem is full (on some,
# tmpfs among them, a short write shows as EIO) or failing.
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)

_log = logging.getLogger("storage")

_open_journals: weakref.WeakSet[LMDBJournal] = weakref.WeakSet()


def _forget_after_fork() -> None:
    # An LMDB environment must not be used in a forked child: its locks and
    # the writer thread belong to the parent.
    for journal in list(_open_journals):
        journal._forked = True


os.register_at_fork(after_in_child=_forget_after_fork)


class _Batch:
    """Transactions that commit together: one LMDB transaction, one fsync.

    The trio thread appends to ``txns`` (under the journal's lock) until the
    writer thread takes the batch; the writer then fills in ``outcomes`` and
    hands the batch back through the trio token. ``waiters``, ``finished``
    and ``event`` belong to the trio thread alone.
    """

    __slots__ = ("txns", "waiters", "outcomes", "finished", "event", "born")

    def __init__(self) -> None:
        self.born = time.monotonic()  # for the "async" window (see ASYNC_WINDOW_SECONDS)
        self.txns: list[Txn] = []
        # Parallel to txns: the task parked in `LMDBJournal.commit` for that
        # txn, or None (submitted without waiting, or its waiter was cancelled).
        self.waiters: list[trio.lowlevel.Task | None] = []
        self.outcomes: list[Any] = []  # per txn: its results, or the exception it failed with
        self.finished = False  # set in the trio thread once outcomes are final
        self.event: trio.Event | None = None  # made only when a `_Ticket` waits


class _Ticket(Ticket):
    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    @property
    def done(self) -> bool:
        return self._batch.finished

    async def wait(self) -> list[int]:
        batch = self._batch
        if batch.finished:
            await trio.lowlevel.checkpoint()
        else:
            if batch.event is None:
                batch.event = trio.Event()
            await batch.event.wait()
        return _unwrap(batch.outcomes[self._index])


def _unwrap(outcome: Any) -> list[int]:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _pid_hint(lock_path: Path) -> int | None:
    """The pid the owner lock file names, if that process is alive (a hint:
    the file outlives its writer)."""
    try:
        pid = int(lock_path.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


@attrs.frozen
class JournalHolder:
    """Who holds an LMDB journal, as `LMDBJournal.holder` finds it.

    ``held`` is True when a system holds the owner lock now, False when
    none does, and None when the platform cannot tell without taking the
    lock (then ``pid`` is only the hint the lock file keeps). ``pid`` is the
    holder's process id, when known.
    """

    held: bool | None
    pid: int | None


class LMDBJournal(Journal):
    """The durable journal in an LMDB environment at ``path`` (a directory).

    A directory it creates is private to its owner (0700, files 0600); an
    existing one that others can read is opened with a warning (logger
    ``storage``) saying which ``chmod`` to run.

    A commit that cannot be written fails with `JournalFull` (the map is at
    ``max_map_size``) or `JournalDiskFull` (the filesystem is full or
    failing); a transaction LMDB refuses (a key over its 511 bytes) fails
    alone with `EncodeError`. Either way nothing of it is written and the
    other transactions of its group commit go ahead.

    Args:
        path: directory of the environment (created if missing).
        map_size: initial size of the memory map in bytes. The file is
            sparse, so a generous value costs nothing up front.
        max_map_size: the map grows (doubling) up to this size; past it a
            transaction fails with `JournalFull` naming this setting (one
            that only deletes may use a small reserve past it, so cleanup
            can always make room).
        durability: ``"sync"`` (an awaited commit returns once on disk) or
            ``"async"`` (once queued, while fewer than `ASYNC_WINDOW_TXNS`
            transactions wait and the oldest has waited under
            `ASYNC_WINDOW_SECONDS`; past that, once committed. LMDB skips the
            meta-page fsync, which keeps integrity but may lose the last
            commit on a power cut).
        readonly: open an existing journal for reading only, as the CLI
            does: no owner lock is taken (so it works while a system in
            another process holds the journal) and no writer thread is
            started; ``submit`` and ``commit`` raise `JournalClosed`.

    Raises (from ``open``):
        JournalLocked: another system holds the directory (not with ``readonly``).
        JournalCorrupt: there is no readable journal at ``path`` (with ``readonly``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 1 << 30,
        max_map_size: int = 1 << 40,
        durability: str = "sync",
        readonly: bool = False,
    ) -> None:
        if durability not in ("sync", "async"):
            raise ValueError(f"durability must be 'sync' or 'async', not {durability!r}")
        self.path = Path(path)
        self.map_size = map_size
        self.max_map_size = max(max_map_size, map_size)
        self.durability = durability
        self.readonly = readonly
        self._env: lmdb.Environment | None = None
        self._dbs: dict[str, Any] = {}
        self._handles: tuple[Any, ...] = ()  # the databases a `_Applier` writes, in its order
        self._lock_fd: int | None = None
        self._forked = False
        # The lock guards the three fields below; the condition (on the same
        # lock) wakes the writer thread when a batch starts or on close. The
        # hot path takes only the plain lock, whose `with` costs no Python frame.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # Batches waiting for the writer, oldest first. Invariant: only the
        # last one still takes transactions.
        self._pending: deque[_Batch] = deque()
        self._split_at = _NO_SPLIT  # start a new pending batch at this size
        self._closing = False
        self._writer: threading.Thread | None = None
        self._waker: threading.Thread | None = None
        # Committed batches for the waker thread to hand back (None: stop),
        # and how many the writer queued and the waker handed back; each
        # counter has a single writing thread.
        self._to_wake: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._wakes_queued = 0
        self._wakes_done = 0
        self._token: trio.lowlevel.TrioToken | None = None
        # Readers hold this while a read transaction is open; the writer takes
        # it to resize the map (set_mapsize needs no transaction open).
        self._read_lock = threading.Lock()
        self._inflight = 0  # batches submitted and not yet finished (trio thread)
        # The trio thread's view of the "async" window: transactions queued
        # and not yet finished, and the batches holding them, oldest first
        # (finished ones leave from the front).
        self._uncommitted = 0
        self._unfinished: deque[_Batch] = deque()
        self._inline_claimed = False  # a caller is trying the fast path (trio thread)
        self._hold: AutojumpHold | None = None

    # -- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        if self._env is not None:
            raise JournalLocked(f"{self.describe()} is already open in this process")
        if self.readonly:
            self._open_readonly()
            return
        self._make_private_dir()
        self._lock_fd = self._take_lock()
        try:
            self._env = lmdb.open(
                str(self.path),
                mode=_FILE_MODE,
                map_size=self.map_size,
                max_dbs=len(_DBS),
                metasync=self.durability == "sync",
                sync=True,
                max_readers=1024,
            )
            self._env.reader_check()  # slots left by a SIGKILLed process
            for name in _DBS:
                self._dbs[name] = self._env.open_db(name.encode())
            self._handles = tuple(self._dbs[name] for name in _Applier.__slots__[1:])
            with self._env.begin(write=True, db=self._dbs["meta"]) as txn:
                found = txn.get(b"format")
                if found is None:
                    txn.put(b"format", _FORMAT)
                elif found != _FORMAT:
                    raise _format_mismatch(self.path, found)
        except lmdb.Error as exc:
            self._release()
            raise JournalCorrupt(
                f"cannot open LMDB journal at {self.path}: {exc}", database="", key=b""
            ) from exc
        except BaseException:
            self._release()
            raise
        self._token = trio.lowlevel.current_trio_token()
        self._hold = AutojumpHold.current()
        self._closing = False
        self._split_at = _NO_SPLIT
        self._writer = threading.Thread(
            target=self._write_loop, name=f"journal-writer {self.path}", daemon=True
        )
        self._waker = threading.Thread(
            target=self._wake_loop, name=f"journal-waker {self.path}", daemon=True
        )
        self._writer.start()
        self._waker.start()
        _open_journals.add(self)

    def _make_private_dir(self) -> None:
        # Payloads, inputs and results are the application's data: like
        # PostgreSQL's data directory, a journal is for its owner alone.
        # Invariant: a directory created here is 0700 and the files LMDB and
        # _take_lock create in it 0600; an existing one is left as it is
        # (it may be shared on purpose), but wider modes are reported.
        if not self.path.exists():
            self.path.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
            os.chmod(self.path, _DIR_MODE)  # mkdir's mode passes through the umask
            return
        self._warn_if_exposed()

    def _warn_if_exposed(self) -> None:
        exposed = []
        files = []
        for path in (self.path, *(self.path / name for name in _FILES)):
            try:
                mode = path.stat().st_mode & 0o777
            except OSError:
                continue  # not created yet
            if path != self.path:
                files.append(str(path))
            if mode & 0o077:
                exposed.append(f"{path} (mode {mode:04o})")
        if exposed:
            fix = f"chmod 700 {self.path}" + (f" && chmod 600 {' '.join(files)}" if files else "")
            _log.warning(
                "the journal at %s is open to other users of this host: %s; run '%s' "
                "to keep its payloads private",
                self.path, ", ".join(exposed), fix,
            )  # fmt: skip

    def _open_readonly(self) -> None:
        # No owner lock and no writer: LMDB lets readers in other processes
        # share the environment with the one that writes (lock=True keeps
        # their snapshots consistent with its commits).
        self._warn_if_exposed()
        try:
            self._env = lmdb.open(
                str(self.path), readonly=True, lock=True, max_dbs=len(_DBS), map_size=0,
                max_readers=1024,
            )  # fmt: skip
            for name in _DBS:
                self._dbs[name] = self._env.open_db(name.encode(), create=False)
            with self._env.begin(db=self._dbs["meta"]) as txn:
                found = txn.get(b"format")
        except lmdb.Error as exc:
            self._release()
            raise JournalCorrupt(
                f"cannot open an LMDB journal at {self.path} for reading: {exc}",
                database="", key=b"",
            ) from exc  # fmt: skip
        if found != _FORMAT:
            self._release()
            raise _format_mismatch(self.path, found)
        _open_journals.add(self)

    def _take_lock(self) -> int:
        lock_path = self.path / "owner.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, _FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = ""
            try:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            except OSError:
                pass
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise JournalLocked(
                    f"the journal at {self.path} is owned by another open system"
                    + (f" (pid {holder})" if holder else "")
                    + "; close that system first, or open a different path",
                    pid=int(holder) if holder.isdigit() else None,
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return fd

    def holder(self) -> JournalHolder:
        """Whether a system (in any process) holds this journal, and its pid.

        Reads the owner lock without taking it (from /proc/locks on Linux),
        so it can be asked beside a running system, on an open or a closed
        `LMDBJournal`. A journal this very object holds counts as held.
        """
        lock_path = self.path / "owner.lock"
        try:
            st = lock_path.stat()
        except OSError:
            return JournalHolder(False, None)
        try:
            locks = Path("/proc/locks").read_text()
        except OSError:
            return JournalHolder(None, _pid_hint(lock_path))
        file = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in locks.splitlines():
            fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2171344 0 EOF"
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == file:
                return JournalHolder(True, int(fields[4]) if fields[4].isdigit() else None)
        return JournalHolder(False, None)

    def _release(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        self._dbs.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the fd drops the flock
            self._lock_fd = None

    async def close(self) -> None:
        if self._env is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify()
        for thread in (self._writer, self._waker):
            # The writer drains every pending batch, then stops the waker.
            if thread is not None:
                await trio.to_thread.run_sync(thread.join)
        # Let the finish callbacks the threads queued run before the env goes.
        while self._inflight:
            await trio.sleep(0)
        self._writer = self._waker = None
        _open_journals.discard(self)
        self._release()

    def describe(self) -> str:
        return f"LMDBJournal({str(self.path)!r})"

    def size_bytes(self) -> int | None:
        try:
            return (self.path / "data.mdb").stat().st_size
        except OSError:
            return None

    def _check_open(self) -> lmdb.Environment:
        if self._forked:
            raise JournalClosed(
                "this LMDB journal was opened before os.fork(); open a new LMDBJournal "
                "in the child process instead"
            )
        if self._env is None or self._closing:
            raise JournalClosed(
                f"{self.describe()} is not open; use it inside 'async with "
                "actors.open_system(...)' or 'async with journal:'"
            )
        return self._env

    # -- writing -----------------------------------------------------------
    #
    # Where the time goes, with many writers (see bench/journal.py): trio's
    # own cost of waking a task and parking it again (~3 us), the caller
    # building its Txn (~1.5 us), LMDB copying each leaf page a batch touches
    # (~2 us per instance, under the GIL) and writing it out at commit (no
    # GIL). So the trio thread and the writer thread take turns on the GIL,
    # and the disk work only overlaps the trio thread's if the writer never
    # waits for the GIL between applying a batch and committing it (see
    # `_write_loop`). The Python here is kept to one frame per caller, one
    # lock round per submission and one reschedule per caller.

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        if self.readonly:
            self._refuse_write()
        if not (durable or self.durability == "sync" or txn.requires):
            # "async" durability: queued is enough, within the window (see
            # ASYNC_WINDOW_TXNS); past it, wait for this commit like "sync".
            # Still a checkpoint, so a loop of such commits cannot starve
            # the other tasks.
            await trio.lowlevel.checkpoint_if_cancelled()
            if self._uncommitted < ASYNC_WINDOW_TXNS and (
                not self._unfinished
                or time.monotonic() - self._unfinished[0].born < ASYNC_WINDOW_SECONDS
            ):
                self.submit(txn)
                await trio.lowlevel.cancel_shielded_checkpoint()
                return []
        elif self._inflight == 0 and not self._inline_claimed:
            outcomes = await self._commit_inline(txn)
            if outcomes is not None:
                return _unwrap(outcomes[0])
        else:
            await trio.lowlevel.checkpoint_if_cancelled()  # cancelled: write nothing
        batch, index = self._enqueue(txn, trio.lowlevel.current_task())

        def abort(_: Any) -> trio.lowlevel.Abort:
            # The transaction still commits; only its caller stops waiting.
            batch.waiters[index] = None
            return trio.lowlevel.Abort.SUCCEEDED

        # Parked without a Ticket or an Event: `_finish` reschedules this task
        # with its own outcome, which saves an allocation and a frame per call.
        return await trio.lowlevel.wait_task_rescheduled(abort)  # type: ignore[no-any-return]

    async def _commit_inline(self, txn: Txn) -> list[Any] | None:
        """The fast path for an uncontended writer: commit in the trio thread.

        A round trip to the writer thread costs two thread wake-ups, a good
        part of an fsync. But committing here blocks the event loop for that
        fsync, so it is only worth it when nobody else is about to write or
        run. ``tasks_runnable`` alone cannot tell: tasks woken together (all
        the callers of one batch) run in one scheduler pass and each sees
        the run queue empty. So the first caller claims the fast path and
        yields once; whoever commits meanwhile goes to the writer thread, and
        then so does this caller. Returns None to send it there.
        """
        self._inline_claimed = True
        try:
            await trio.lowlevel.checkpoint()  # cancellable: nothing is written yet
        finally:
            self._inline_claimed = False
        if self._inflight or trio.lowlevel.current_statistics().tasks_runnable:
            return None
        return self._write_inline(self._check_open(), txn)

    def submit(self, txn: Txn) -> Ticket:
        if self.readonly:
            self._refuse_write()
        batch, index = self._enqueue(txn, None)
        return _Ticket(batch, index)

    def _refuse_write(self) -> None:
        self._check_open()
        raise JournalClosed(
            f"{self.describe()} is open read-only; open it without readonly=True to write "
            "(which needs the journal not to be held by a running system)"
        )

    def _enqueue(self, txn: Txn, waiter: trio.lowlevel.Task | None) -> tuple[_Batch, int]:
        if self._env is None or self._closing or self._forked:
            self._check_open()  # raises, saying why
        with self._lock:
            pending = self._pending
            if pending and len(pending[-1].txns) < self._split_at:
                batch = pending[-1]
            else:
                batch = _Batch()
                pending.append(batch)
                self._unfinished.append(batch)
                self._inflight += 1
                if self._inflight == 1 and self._hold is not None:
                    self._hold.acquire()
                if len(pending) == 1:
                    self._cond.notify()  # the writer may be idle
            batch.txns.append(txn)
            batch.waiters.append(waiter)
            self._uncommitted += 1
            return batch, len(batch.txns) - 1

    def _finish(self, batch: _Batch) -> None:
        # Runs in the trio thread (via the token), once per batch: one
        # wake-up of the trio loop serves every caller in the batch.
        self._inflight -= 1
        if self._inflight == 0 and self._hold is not None:
            self._hold.release()
        batch.finished = True
        self._uncommitted -= len(batch.txns)
        unfinished = self._unfinished
        while unfinished and unfinished[0].finished:
            unfinished.popleft()
        reschedule = trio.lowlevel.reschedule
        for task, result in zip(batch.waiters, batch.outcomes):
            if task is not None:
                failed = isinstance(result, BaseException)
                reschedule(task, Error(result) if failed else Value(result))
        if batch.event is not None:
            batch.event.set()

    def _write_loop(self) -> None:
        """The writer thread: apply and commit batches in submission order.

        While batch N+1 is being applied, batch N (committed) waits; it is
        handed to the waker thread just before N+1's commit. Handing a batch
        back to trio means a socket write, which releases the GIL; done here,
        the trio thread would grab the GIL to wake N's callers and this
        thread would sit out a whole switch interval (5 ms) before it could
        even call commit. From the waker, N's callers run in the trio thread
        while this thread's commit is on the disk, with the GIL released.
        """
        try:
            self._write_batches()
        finally:
            self._to_wake.put(None)  # the waker stops after what it has queued

    def _write_batches(self) -> None:
        committed: _Batch | None = None  # on disk, its callers not yet woken
        while True:
            with self._cond:
                while not self._pending and not self._closing and committed is None:
                    self._cond.wait()
                batch = self._pending.popleft() if self._pending else None
                if batch is not None:
                    self._split_at = self._next_split(batch, committed)
            if batch is None:
                if committed is None:  # closing, and everything is handed back
                    return
                # Nothing to overlap with: hand back from here, unless the
                # waker still has batches to hand back (they go first).
                if self._wakes_done == self._wakes_queued:
                    self._hand_back(committed)
                else:
                    self._queue_wake(committed)
                committed = None
                continue
            wtxn = self._apply_batch(batch)
            if committed is not None:
                self._queue_wake(committed)
            if wtxn is not None:
                self._commit_batch(wtxn, batch)
            committed = batch

    def _next_split(self, taken: _Batch, committed: _Batch | None) -> int:
        # Called by the writer (holding the lock) as it takes a batch; the
        # answer caps the size of the batches filled from now on.
        # With many callers, two batches of equal size overlap best: one is
        # on the disk while the trio thread wakes the other's callers and
        # collects their next transactions. Left alone, the split is set by
        # chance at start-up and stays (700/300 of 1024 callers, say, which
        # costs a third of the throughput); capping new batches at half of
        # what is in flight evens it out within two commits. With fewer than
        # 2 * _MIN_SPLIT callers, waking half of them costs less than the
        # fixed cost of a commit (its fsyncs, ~30 wake-ups' worth), and one
        # batch is best.
        in_flight = len(taken.txns) + sum(len(b.txns) for b in self._pending)
        if committed is not None:
            in_flight += len(committed.txns)
        return _NO_SPLIT if in_flight < 2 * _MIN_SPLIT else (in_flight + 1) // 2

    def _queue_wake(self, batch: _Batch) -> None:
        self._wakes_queued += 1
        self._to_wake.put(batch)  # C code: does not release the GIL

    def _wake_loop(self) -> None:
        """The waker thread: hands committed batches back to trio, in order."""
        while True:
            batch = self._to_wake.get()
            if batch is None:
                return
            self._hand_back(batch)
            self._wakes_done += 1

    def _hand_back(self, batch: _Batch) -> None:
        assert self._token is not None
        try:
            self._token.run_sync_soon(self._finish, batch)
        except trio.RunFinishedError:  # pragma: no cover - the loop is gone
            pass

    def _apply_batch(self, batch: _Batch) -> lmdb.Transaction | None:
        """Apply ``batch`` in a new LMDB transaction and return it, uncommitted.

        On any trouble (the map is full, a transaction LMDB refuses) it takes
        the careful path, which commits by itself, and returns None.
        """
        env = self._env
        assert env is not None
        try:
            wtxn = env.begin(write=True)
        except Exception:
            batch.outcomes = self._write(batch.txns)
            return None
        try:
            batch.outcomes = self._apply_all(wtxn, batch.txns, isolate=False)
        except lmdb.MapFullError:
            wtxn.abort()
            batch.outcomes = self._write(batch.txns)
            return None
        except Exception:  # one transaction is at fault (a key too long, say)
            wtxn.abort()
            batch.outcomes = self._write(batch.txns, isolate=True)
            return None
        return wtxn

    def _commit_batch(self, wtxn: lmdb.Transaction, batch: _Batch) -> None:
        try:
            wtxn.commit()
        except Exception:  # a failed commit aborts: nothing of it was written
            batch.outcomes = self._write(batch.txns)

    def _write_inline(self, env: lmdb.Environment, txn: Txn) -> list[Any] | None:
        """Commit one transaction in the calling thread; None if that failed
        (the map is full, say): the writer thread then retries it carefully."""
        try:
            return self._apply(env, [txn], isolate=False)
        except Exception:
            return None

    def _write(self, txns: list[Txn], *, isolate: bool = False) -> list[Any]:
        """The careful path: apply and commit ``txns``, growing the map as
        needed and isolating a transaction that fails; return the outcomes.

        Invariant: a transaction fails alone unless the commit itself fails
        (the map or the disk is full), and then each caller learns why.
        """
        env = self._env
        assert env is not None
        while True:
            try:
                outcomes = self._apply(env, txns, isolate=isolate)
            except lmdb.MapFullError as exc:
                if self._grow(env):
                    continue
                if isolate:  # no room even to commit what fits
                    outcomes = [self._commit_failed(exc) for _ in txns]
                    break
            except Exception as exc:
                if isolate:  # LMDB or the disk failed: every caller learns of it
                    return [self._commit_failed(exc) for _ in txns]
            else:
                break
            # Apply each transaction on its own, so the one that does not fit
            # (or is otherwise refused) fails alone.
            isolate = True
        # Deleting needs room too (LMDB copies the pages it changes), so on
        # a full map cleanup could never make room: a transaction that only
        # frees gets the reserve past max_map_size. It commits after the
        # rest of its batch, which no caller can tell from an order they
        # raced for.
        freeing = [
            i for i, (txn, outcome) in enumerate(zip(txns, outcomes))
            if type(outcome) is JournalFull and all(op[0] in _FREEING_OPS for op in txn.ops)
        ]  # fmt: skip
        if freeing and self._grow(env, into_reserve=True):
            again = self._write([txns[i] for i in freeing], isolate=True)
            for i, outcome in zip(freeing, again):
                outcomes[i] = outcome
            try:
                with self._read_lock:  # keep the reserve for next time (LMDB
                    env.set_mapsize(self.max_map_size)  # keeps what is in use)
            except lmdb.Error:
                pass  # then the map stays larger; nothing is lost
        return outcomes

    def _commit_failed(self, exc: Exception) -> ActorError:
        """The error for a caller whose transaction could not be written."""
        failure: ActorError
        if isinstance(exc, lmdb.MapFullError):
            failure = self._full()
        elif isinstance(exc, lmdb.DiskError) or any(
            os.strerror(code) in str(exc) for code in _DISK_ERRNOS
        ):
            failure = JournalDiskFull(
                f"{self.describe()} could not write to its filesystem ({exc}): the disk "
                f"under {self.path} is full or failing; free space there (df {self.path}) "
                "or move the journal to a larger disk, then retry. Nothing of this "
                "transaction was written.",
                path=str(self.path),
            )
        else:
            failure = JournalCorrupt(
                f"commit to {self.describe()} failed: {exc!r}; nothing of this transaction "
                "was written. If it keeps failing, close the system and open the journal "
                "again (LMDB refuses writes after a failed meta-page write)",
                database="",
                key=b"",
            )
        failure.__cause__ = exc
        return failure

    def _full(self) -> JournalFull:
        return JournalFull(
            f"{self.describe()} is full at max_map_size={self.max_map_size} bytes; "
            "open it with a larger LMDBJournal(max_map_size=...) or clean up finished "
            "instances (system.cleanup). Nothing of this transaction was written."
        )

    def _grow(self, env: lmdb.Environment, *, into_reserve: bool = False) -> bool:
        limit = self.max_map_size
        if into_reserve:
            limit += min(max(self.max_map_size // 32, 1 << 20), 1 << 30)
        current = env.info()["map_size"]
        if current >= limit:
            return False
        try:
            with self._read_lock:
                env.set_mapsize(min(current * 2, limit))
        except lmdb.Error:  # no address space, say: the map stays as it is
            return False
        return True

    def _apply(self, env: lmdb.Environment, txns: list[Txn], *, isolate: bool) -> list[Any]:
        """Apply ``txns`` in one LMDB transaction and commit it."""
        with env.begin(write=True) as wtxn:
            return self._apply_all(wtxn, txns, isolate=isolate)

    def _apply_all(self, wtxn: lmdb.Transaction, txns: list[Txn], *, isolate: bool) -> list[Any]:
        """Apply ``txns`` in order inside ``wtxn``; return their outcomes.

        Each gets its results, or `Conflict` when a precondition fails (its
        operations are skipped). With ``isolate``, each runs in a nested
        transaction, so that one that does not fit (`JournalFull`) or that
        LMDB refuses (`EncodeError`) fails alone and the others go on.
        """
        outcomes: list[Any] = []
        apply = _Applier(wtxn, self._handles)
        for txn in txns:
            if txn.requires:
                try:
                    j.check_requires(txn.requires, apply.status_of)
                except Conflict as exc:
                    outcomes.append(exc)
                    continue
            if not isolate:
                outcomes.append(apply.run(txn.ops))
                continue
            child = self._env.begin(write=True, parent=wtxn)  # type: ignore[union-attr]
            try:
                results = _Applier(child, self._handles).run(txn.ops)
                child.commit()
            except lmdb.MapFullError:
                child.abort()
                outcomes.append(self._full())
            except JournalCorrupt as exc:  # it met a damaged record: it alone fails
                child.abort()
                outcomes.append(exc)
            except Exception as exc:  # noqa: BLE001 - this transaction alone is refused
                child.abort()
                refused = EncodeError(
                    f"{self.describe()} cannot store this transaction ({exc!r}): a key or "
                    "value is over the journal's limits; nothing of it was written (the "
                    "rest of its batch was)"
                )
                refused.__cause__ = exc
                outcomes.append(refused)
            else:
                outcomes.append(results)
        return outcomes

    # -- reading -----------------------------------------------------------

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        env = self._check_open()
        with self._read_lock:
            try:
                txn = env.begin(buffers=False)
            except lmdb.MapResizedError:
                # Another process (the system writing the journal) grew the
                # map; adopt its size (no transaction is open here) and retry.
                env.set_mapsize(0)
                txn = env.begin(buffers=False)
            try:
                yield _LMDBReader(txn, self._dbs, self.check_shapes)
            finally:
                txn.abort()


class _Applier:
    """Applies Txn operations inside one LMDB write transaction."""

    __slots__ = ("txn", "instances", "status", "log", "mail", "timers", "timer_ids",
                 "stream", "cursors", "counters")  # fmt: skip

    def __init__(self, txn: lmdb.Transaction, dbs: tuple[Any, ...]) -> None:
        # ``dbs``: the handles in slot order (`LMDBJournal._handles`); one
        # unpacking rather than nine dict lookups, as the inline path makes
        # an applier per commit.
        self.txn = txn
        (self.instances, self.status, self.log, self.mail, self.timers, self.timer_ids,
         self.stream, self.cursors, self.counters) = dbs  # fmt: skip

    def status_of(self, iid: bytes) -> int | None:
        value = self.txn.get(iid, db=self.instances)
        if value is None:
            return None
        return value[0] if value else 0  # an emptied record: no status (its reads report it)

    def _next(self, iid: bytes, kind: bytes) -> int:
        key = iid + kind
        found = self.txn.get(key, db=self.counters)
        number = 0 if found is None else j.number(found, "counters", key)
        self.txn.put(key, _Q.pack(number + 1), db=self.counters)
        return number

    def _append(self, key: bytes, value: bytes, db: Any, database: str) -> None:
        """Write a new message or stream value; never over an existing one.

        Invariant: a message or stream value, once written, is only ever
        taken or deleted, never replaced: a damaged counter that hands out a
        number again fails this transaction (alone) instead of losing what
        the number held.
        """
        if not self.txn.put(key, value, db=db, overwrite=False):
            raise j.corrupt(
                database, key,
                "already exists where a new one was to be written (the instance's counter "
                "in database 'counters' was damaged or lost); nothing was overwritten",
            )  # fmt: skip

    def _delete_prefix(self, prefix: bytes, db: Any) -> None:
        with self.txn.cursor(db=db) as cur:
            if not cur.set_range(prefix):
                return
            while cur.key().startswith(prefix):
                if not cur.delete():
                    break

    def _set_index(self, iid: bytes, old: int | None, new: int, process: bytes) -> None:
        txn = self.txn
        if old is not None and old != new:
            txn.delete(bytes((old,)) + iid, db=self.status)
        txn.put(bytes((new,)) + iid, process, db=self.status)

    def run(self, ops: list[tuple[Any, ...]]) -> list[int]:
        txn = self.txn
        results: list[int] = []
        for op in ops:
            code = op[0]
            if code == PUT_LOG:
                _, iid, run, seq, entry = op
                txn.put(iid + _RUN_SEQ.pack(run, seq), entry, db=self.log)
            elif code == TAKE_MESSAGE:
                txn.delete(op[1] + _Q.pack(op[2]), db=self.mail)
            elif code == APPEND_MESSAGE:
                _, iid, message = op
                seq = self._next(iid, _MAIL_COUNTER) + 1
                self._append(iid + _Q.pack(seq), message, self.mail, "mail")
                results.append(seq)
            elif code == PUT_INSTANCE:
                _, iid, status, process, address, record = op
                old = self.status_of(iid)
                header = msgpack.packb([address, process])
                txn.put(
                    iid,
                    bytes((status,)) + _H.pack(len(header)) + header + record,
                    db=self.instances,
                )
                self._set_index(iid, old, status, process.encode())
            elif code == SET_STATUS:
                _, iid, status = op
                value = txn.get(iid, db=self.instances)
                if value is not None:
                    # The process comes from the index entry, not the record's
                    # header: marking a broken record corrupt must not need it
                    # to decode.
                    old = self.status_of(iid)
                    process = txn.get(bytes((old,)) + iid, db=self.status) or b""
                    txn.put(iid, bytes((status,)) + value[1:], db=self.instances)
                    self._set_index(iid, old, status, process)
            elif code == ADD_TIMER:
                _, iid, run, seq, due = op
                ident = iid + _RUN_SEQ.pack(run, seq)
                old_due = txn.get(ident, db=self.timer_ids)
                if old_due is not None:
                    txn.delete(old_due + ident, db=self.timers)
                txn.put(_Q.pack(due) + ident, b"", db=self.timers)
                txn.put(ident, _Q.pack(due), db=self.timer_ids)
            elif code == CANCEL_TIMER:
                ident = op[1] + _RUN_SEQ.pack(op[2], op[3])
                old_due = txn.get(ident, db=self.timer_ids)
                if old_due is not None:
                    txn.delete(old_due + ident, db=self.timers)
                    txn.delete(ident, db=self.timer_ids)
            elif code == DROP_LOG:
                self._delete_prefix(op[1] + struct.pack(">I", op[2]), self.log)
            elif code == APPEND_STREAM:
                _, iid, value = op
                index = self._next(iid, _STREAM_COUNTER)
                self._append(iid + _Q.pack(index), value, self.stream, "stream")
                results.append(index)
            elif code == SET_CURSOR:
                _, iid, consumer, position = op
                txn.put(iid + consumer.encode(), _Q.pack(position), db=self.cursors)
            elif code == DELETE_CURSOR:
                txn.delete(op[1] + op[2].encode(), db=self.cursors)
            elif code == DELETE_INSTANCE:
                self._delete_instance(op[1])
            else:  # pragma: no cover - a programming error in the runtime
                raise ValueError(f"unknown journal op {code}")
        return results

    def _delete_instance(self, iid: bytes) -> None:
        txn = self.txn
        old = self.status_of(iid)
        if old is not None:
            txn.delete(bytes((old,)) + iid, db=self.status)
            txn.delete(iid, db=self.instances)
        with txn.cursor(db=self.timer_ids) as cur:
            if cur.set_range(iid):
                while cur.key().startswith(iid):
                    txn.delete(cur.value() + cur.key(), db=self.timers)
                    if not cur.delete():
                        break
        for db in (self.log, self.mail, self.stream, self.cursors, self.counters):
            self._delete_prefix(iid, db)


def _header_address(value: bytes) -> str | None:
    """The address in an instance value's header (status(1) hlen(2)
    [address, process]), which may read when the record after it does not."""
    try:
        hlen = _H.unpack_from(value, 1)[0]
        address = msgpack.unpackb(value[3 : 3 + hlen])[0]
    except Exception:  # noqa: BLE001 - a best effort on a broken value
        return None
    return address if isinstance(address, str) else None


def _check_index(iid: bytes, expected: int, found: int, length: int) -> None:
    """Raise `JournalCorrupt` unless the stream index ``found`` of ``iid`` is
    the one expected next, below the stream's counter ``length``."""
    if found >= length:
        raise j.corrupt(
            "counters", iid + _STREAM_COUNTER,
            f"says {length} values were emitted, but the stream holds index {found}",
        )  # fmt: skip
    if found != expected:
        raise _missing_value(iid, expected, f"the stream goes on at index {found}")


def _missing_value(iid: bytes, index: int, why: str) -> JournalCorrupt:
    return j.corrupt(
        "stream", iid + _Q.pack(index), f"is missing ({why}), so value {index} was lost"
    )


class _LMDBReader(Reader):
    __slots__ = ("_txn", "_dbs", "_record", "_entry", "_message")

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any], shapes: bool) -> None:
        self._txn = txn
        self._dbs = dbs
        # The shape checks of `Journal.check_shapes`, or None.
        self._record = _shapes.record_problem if shapes else None
        self._entry = _shapes.entry_problem if shapes else None
        self._message = _shapes.message_problem if shapes else None

    def _scan(self, name: str, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        with self._txn.cursor(db=self._dbs[name]) as cur:
            if not cur.set_range(prefix):
                return
            for key, value in cur:
                if not key.startswith(prefix):
                    return
                yield key, value

    def _row(self, iid: bytes, value: bytes) -> InstanceRow:
        try:
            hlen = _H.unpack_from(value, 1)[0]
            address, process = msgpack.unpackb(value[3 : 3 + hlen])
            status = j.STATUS_NAME[value[0]]
            if not (isinstance(address, str) and isinstance(process, str)):
                raise TypeError(f"address and process are {address!r} and {process!r}")
        except Exception as exc:
            raise JournalCorrupt(
                f"record {iid.hex()} in database 'instances' has a broken header ({exc!r}); "
                "the instance it belongs to is marked corrupt and every other instance keeps "
                "working; restore the journal from a backup or clean the instance up",
                database="instances",
                key=iid,
            ) from exc
        record = j.decode_record(value[3 + hlen :], "instances", iid, self._record)
        if self._record is not None:
            problem = _shapes.params_problem(record, process)
            if problem is not None:
                raise j.corrupt("instances", iid, f"has the wrong shape: {problem}")
        return InstanceRow(iid, address, process, status, record)

    def instance(self, iid: bytes) -> InstanceRow | None:
        value = self._txn.get(iid, db=self._dbs["instances"])
        return None if value is None else self._row(iid, value)

    def instances(
        self,
        status: str | None = None,
        process: str | None = None,
        *,
        corrupt: list[CorruptRecord] | None = None,
    ) -> Iterator[InstanceRow]:
        prefix = b"" if status is None else bytes((j.STATUS_CODE[status],))
        wanted = None if process is None else process.encode()
        get = self._txn.get
        db = self._dbs["instances"]
        for key, proc in self._scan("status", prefix):
            if wanted is not None and proc != wanted:
                continue
            value = get(key[1:], db=db)
            if value is None:
                continue
            try:
                row = self._row(key[1:], value)
            except JournalCorrupt as exc:
                if corrupt is None:
                    raise
                corrupt.append(
                    CorruptRecord(
                        key[1:], _header_address(value), proc.decode(errors="replace"),
                        j.STATUS_NAME.get(key[0], "unknown"), exc,
                    )
                )  # fmt: skip
                continue
            yield row

    def count_by_status(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for key, _ in self._scan("status", b""):
            name = j.STATUS_NAME.get(key[0], "unknown")
            counts[name] = counts.get(name, 0) + 1
        return counts

    def log(self, iid: bytes, run: int) -> dict[int, Any]:
        prefix = iid + struct.pack(">I", run)
        return {
            _RUN_SEQ.unpack_from(j.key_size(key, 24, "log"), 16)[1]: j.decode_record(
                value, "log", key, self._entry
            )
            for key, value in self._scan("log", prefix)
        }

    def log_runs(self, iid: bytes) -> list[int]:
        runs: list[int] = []
        with self._txn.cursor(db=self._dbs["log"]) as cur:
            key_from = iid
            while cur.set_range(key_from):
                key = cur.key()
                if not key.startswith(iid):
                    break
                run = _RUN_SEQ.unpack_from(j.key_size(key, 24, "log"), 16)[0]
                runs.append(run)
                key_from = iid + struct.pack(">I", run + 1)
                if run == 0xFFFFFFFF:
                    break
        return runs

    def mailbox(self, iid: bytes) -> list[tuple[int, Any]]:
        box = [
            (_Q.unpack_from(j.key_size(key, 24, "mail"), 16)[0],
             j.decode_record(value, "mail", key, self._message))
            for key, value in self._scan("mail", iid)
        ]  # fmt: skip
        if box and box[-1][0] > self.last_message_seq(iid):
            raise j.corrupt(
                "counters", iid + _MAIL_COUNTER,
                f"says fewer messages were sent than the mailbox holds (up to {box[-1][0]})",
            )  # fmt: skip
        return box

    def last_message_seq(self, iid: bytes) -> int:
        key = iid + _MAIL_COUNTER
        found = self._txn.get(key, db=self._dbs["counters"])
        return 0 if found is None else j.number(found, "counters", key)

    def instances_with_mail(self) -> Iterator[bytes]:
        with self._txn.cursor(db=self._dbs["mail"]) as cur:
            key_from = b""
            while cur.set_range(key_from):
                iid = cur.key()[:16]
                yield iid
                end = _prefix_end(iid)
                if end is None:
                    return
                key_from = end

    def timers(self, iid: bytes) -> list[TimerRow]:
        rows = []
        for key, value in self._scan("timer_ids", iid):
            run, seq = _RUN_SEQ.unpack_from(j.key_size(key, 24, "timer_ids"), 16)
            due = j.number(value, "timer_ids", key)
            # Invariant: a timer is in both databases; one missing from the
            # due-time index would never fire.
            if self._txn.get(value + key, db=self._dbs["timers"]) is None:
                raise j.corrupt("timers", value + key, "is missing, so the timer would never fire")
            rows.append(TimerRow(due / 1e6, iid, run, seq))
        rows.sort(key=lambda t: (t.due, t.run, t.seq))
        return rows

    def due_timers(
        self, now: float, limit: int = 1000, after: float | None = None
    ) -> list[TimerRow]:
        bound = j.due_us(now)
        rows: list[TimerRow] = []
        with self._txn.cursor(db=self._dbs["timers"]) as cur:
            start = b"" if after is None else _Q.pack(j.due_us(after) + 1)
            if not cur.set_range(start):
                return rows
            for key in cur.iternext(values=False):
                if len(key) != _TIMER_KEY:
                    continue  # see _TIMER_KEY
                due = _Q.unpack_from(key)[0]
                if due > bound or len(rows) >= limit:
                    break
                run, seq = _RUN_SEQ.unpack_from(key, 24)
                rows.append(TimerRow(due / 1e6, key[8:24], run, seq))
        return rows

    def next_due(self, after: float | None = None) -> float | None:
        with self._txn.cursor(db=self._dbs["timers"]) as cur:
            start = b"" if after is None else _Q.pack(j.due_us(after) + 1)
            if not cur.set_range(start):
                return None
            for key in cur.iternext(values=False):
                if len(key) == _TIMER_KEY:  # see _TIMER_KEY
                    return _Q.unpack_from(key)[0] / 1e6
            return None

    def stream(self, iid: bytes, start: int = 0, limit: int = 1000) -> list[tuple[int, Any]]:
        # Invariant: indexes run without a gap from 0 to the counter; a value
        # that is missing is reported, never skipped.
        rows: list[tuple[int, Any]] = []
        start = max(0, start)
        length = self.stream_length(iid)
        with self._txn.cursor(db=self._dbs["stream"]) as cur:
            if cur.set_range(iid + _Q.pack(start)):
                for key, value in cur:
                    if not key.startswith(iid) or len(rows) >= limit:
                        break
                    index = _Q.unpack_from(j.key_size(key, 24, "stream"), 16)[0]
                    _check_index(iid, start + len(rows), index, length)
                    rows.append((index, j.decode_record(value, "stream", key)))
        if len(rows) < limit and start + len(rows) < length:
            raise _missing_value(iid, start + len(rows), f"the counter says {length} were emitted")
        return rows

    def stream_length(self, iid: bytes) -> int:
        key = iid + _STREAM_COUNTER
        found = self._txn.get(key, db=self._dbs["counters"])
        return 0 if found is None else j.number(found, "counters", key)

    def cursors(self, iid: bytes) -> dict[str, int]:
        found = {}
        for key, value in self._scan("cursors", iid):
            try:
                consumer = key[16:].decode()
            except UnicodeDecodeError as exc:
                raise j.corrupt("cursors", key, "names its consumer in broken UTF-8") from exc
            found[consumer] = j.number(value, "cursors", key)
        if found and max(found.values()) > self.stream_length(iid):
            consumer = max(found, key=found.__getitem__)
            raise j.corrupt(
                "cursors", iid + consumer.encode(),
                f"puts consumer {consumer!r} at {found[consumer]}, past the values emitted",
            )  # fmt: skip
        return found

    def has_records(self, iid: bytes) -> bool:
        if self._txn.get(iid, db=self._dbs["instances"]) is not None:
            return True
        return any(
            next(self._scan(name, iid), None) is not None
            for name in ("log", "mail", "timer_ids", "stream", "cursors", "counters")
        )
