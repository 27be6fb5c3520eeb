"""`LMDBJournal`: the embedded, durable default journal, with group commit.

This module holds its lifecycle: the private directory and its permissions,
the owner lock (one system per journal across processes) and who holds it,
opening (the format check of `_layout`), read-only opening for inspection,
closing, and the read snapshots (`_reader`). Writing, group commit and map
growth are `_writer._LMDBWriter` (over the shared
`storage._group_commit.GroupCommit`), which `LMDBJournal` inherits.

The owner lock is kept by `_locks`: an opener that finds it taken by a
brief holder waits for it (up to `LOCK_WAIT` seconds), and refuses a
system at once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb
import trio

from .._handoff import Handoff
from .._journal import Durability, Journal, LostChains, Reader
from ..errors import JournalClosed, JournalCorrupt, JournalLocked
from ._applier import _Applier
from ._layout import _DBS, _FORMAT, _format_mismatch
from ._locks import FILE_MODE, JournalHolder, find_holder, take_lock
from ._reader import _LMDBReader
from ._writer import _LMDBWriter

__all__ = ["JournalHolder", "LMDBJournal"]

_DIR_MODE = 0o700  # see LMDBJournal._make_private_dir
_FILES = ("data.mdb", "lock.mdb", "owner.lock", "brief.lock")

#: Seconds `LMDBJournal.open` waits for a brief holder of the owner lock (a
#: command-line write while no system runs) to finish before it refuses.
LOCK_WAIT = 5.0
_LOCK_POLL = 0.02  # seconds between tries while a brief holder has the lock

_log = logging.getLogger("storage")

_open_journals: weakref.WeakSet[LMDBJournal] = weakref.WeakSet()


def _forget_after_fork() -> None:
    # An LMDB environment must not be used in a forked child: its locks and
    # the writer thread belong to the parent.
    for journal in list(_open_journals):
        journal._forked = True
        journal._taking = False  # (see GroupCommit._taking: it takes no writes here)


os.register_at_fork(after_in_child=_forget_after_fork)


class LMDBJournal(_LMDBWriter, Journal):
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
        brief: hold the journal only for a short write, as the CLI's
            commands do while no system runs: a journal opening meanwhile
            waits for it to close (up to `LOCK_WAIT` seconds) instead of
            being refused.

    Raises (from ``open``):
        JournalLocked: another system holds the directory (not with
            ``readonly``), or a brief holder has held it for `LOCK_WAIT`
            seconds.
        JournalCorrupt: there is no readable journal at ``path`` (with ``readonly``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 1 << 30,
        max_map_size: int = 1 << 40,
        durability: Durability = "sync",
        readonly: bool = False,
        brief: bool = False,
    ) -> None:
        if durability not in ("sync", "async"):
            raise ValueError(f"durability must be 'sync' or 'async', not {durability!r}")
        self.path: Path = Path(path)
        self.map_size = map_size
        self.max_map_size = max(max_map_size, map_size)
        self.durability = durability
        self.readonly = readonly
        self.brief = brief
        self._env: lmdb.Environment | None = None
        self._dbs: dict[str, Any] = {}
        self._handles: tuple[Any, ...] = ()  # the databases a `_Applier` writes, in its order
        self._lock_fd: int | None = None
        self._brief_fd: int | None = None  # our share of brief.lock, with ``brief``
        self._forked = False
        # Batches, their lock, the writer thread, the doorbell that hands
        # committed batches back and the "async" window (see GroupCommit).
        self._init_group_commit()
        # Readers hold this while a read transaction is open; the writer takes
        # it to resize the map (set_mapsize needs no transaction open).
        self._read_lock = threading.Lock()
        # Per thread: the read transaction open there, if any (``txn``), which
        # a reader nested in it shares (see `reader`).
        self._reading = threading.local()
        self.lost_chains = LostChains()  # chains a write nobody awaited lost (both threads)
        self._lost_news = self.lost_chains.news  # (what `_finish` looks at: see GroupCommit)
        # Lets the GIL go to the writer thread when a busy trio thread
        # starves it (real clocks only: see `storage._handoff`).
        self._gil_handoff = Handoff(lambda: self._inflight > 0)

    # -- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        if self._env is not None:
            raise JournalLocked(f"{self.describe()} is already open in this process")
        if self.readonly:
            self._open_readonly()
            return
        self._make_private_dir()
        self._lock_fd = await self._wait_for_lock()
        try:
            self._env = lmdb.open(
                str(self.path),
                mode=FILE_MODE,
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
            self._inline_applier = _Applier(None, self._handles)
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
        self._start_writer(f"journal-writer {self.path}", self._gil_handoff)
        if self._hold is None:  # under a MockClock its looks would move virtual time
            self._gil_handoff.start()
        _open_journals.add(self)

    def _make_private_dir(self) -> None:
        # Payloads, inputs and results are the application's data: like
        # PostgreSQL's data directory, a journal is for its owner alone.
        # Invariant: a directory created here is 0700 and the files LMDB and
        # take_lock create in it 0600; an existing one is left as it is
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
                self.path,
                ", ".join(exposed),
                fix,
            )

    def _open_readonly(self) -> None:
        # No owner lock and no writer: LMDB lets readers in other processes
        # share the environment with the one that writes (lock=True keeps
        # their snapshots consistent with its commits).
        self._warn_if_exposed()
        try:
            self._env = lmdb.open(
                str(self.path),
                readonly=True,
                lock=True,
                max_dbs=len(_DBS),
                map_size=0,
                max_readers=1024,
            )
            for name in _DBS:
                self._dbs[name] = self._env.open_db(name.encode(), create=False)
            with self._env.begin(db=self._dbs["meta"]) as txn:
                found = txn.get(b"format")
        except lmdb.Error as exc:
            self._release()
            raise JournalCorrupt(
                f"cannot open an LMDB journal at {self.path} for reading: {exc}",
                database="",
                key=b"",
            ) from exc
        if found != _FORMAT:
            self._release()
            raise _format_mismatch(self.path, found)
        _open_journals.add(self)

    async def _wait_for_lock(self) -> int:
        """The owner lock's descriptor, once taken; while a brief holder has
        it, tried again every `_LOCK_POLL` seconds for up to `LOCK_WAIT`.

        The pauses are real time, in a worker thread: the holder is another
        program, which a MockClock's virtual time does not move.
        """
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            fd, share, brief, holder = take_lock(self.path, self.brief)
            if fd is not None:
                self._brief_fd = share
                return fd
            pid = int(holder) if holder.isdigit() else None
            by = f" (pid {holder})" if holder else ""
            if not brief:
                raise JournalLocked(
                    f"the journal at {self.path} is owned by another open system{by}; "
                    "close that system first, or open a different path",
                    pid=pid,
                )
            if time.monotonic() >= deadline:
                raise JournalLocked(
                    f"the journal at {self.path} is held by a command-line write{by} that "
                    f"has not finished within {LOCK_WAIT:g} s; let that command end (or "
                    "stop it), then open the journal again",
                    pid=pid,
                )
            await trio.to_thread.run_sync(time.sleep, _LOCK_POLL, abandon_on_cancel=True)

    def holder(self) -> JournalHolder:
        """Whether a system (in any process) holds this journal, and its pid.

        Reads the owner lock without taking it (from /proc/locks on Linux),
        so it can be asked beside a running system, on an open or a closed
        `LMDBJournal`. A journal this very object holds counts as held.
        """
        return find_holder(self.path)

    def _release(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        self._dbs.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the fd drops the flock
            self._lock_fd = None
        if self._brief_fd is not None:  # after the owner lock: see take_lock
            os.close(self._brief_fd)
            self._brief_fd = None

    async def close(self) -> None:
        if self._env is None:
            return
        if self._forked:
            self._deferred = []  # (the writer thread is the parent's)
        # Drains every pending batch, deferred ones too, and finishes them
        # before the env goes.
        await self._stop_writer()
        self._gil_handoff.stop()
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

    # -- reading -----------------------------------------------------------

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        env = self._check_open()
        outer = getattr(self._reading, "txn", None)
        if outer is not None:
            # A read nested in a read on this thread (``system.get()`` inside
            # ``journal.read(fn)``): the read lock is taken already, and
            # taking it again would wait for itself. It reads the outer
            # snapshot, which the outer reader ends.
            yield _LMDBReader(outer, self._dbs, self.check_shapes)
            return
        with self._read_lock:
            try:
                txn = env.begin(buffers=False)
            except lmdb.MapResizedError:
                # Another process (the system writing the journal) grew the
                # map; adopt its size (no transaction is open here) and retry.
                env.set_mapsize(0)
                txn = env.begin(buffers=False)
            self._reading.txn = txn
            try:
                yield _LMDBReader(txn, self._dbs, self.check_shapes)
            finally:
                self._reading.txn = None
                txn.abort()
