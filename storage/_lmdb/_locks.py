"""The owner lock of an LMDB journal's directory: one system per journal,
across processes, and who holds it.

The owner lock is an exclusive ``flock`` on ``owner.lock``. A *brief* holder
(``LMDBJournal(path, brief=True)``: the command line writing while no
system runs) also holds a shared ``flock`` on ``brief.lock``, taken before
the owner lock and dropped after it. So an opener that finds the owner lock
taken can tell a brief holder, which it waits for, from a system, which it
refuses at once: it asks whether ``brief.lock`` is held, just before and
just after its try (`take_lock`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

import attrs

__all__ = ["FILE_MODE", "JournalHolder", "brief_held", "find_holder", "take_lock"]

FILE_MODE = 0o600  # of the journal's files (see LMDBJournal._make_private_dir)
_HELD = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)  # flock's "someone has it"


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


def take_lock(path: Path, brief: bool) -> tuple[int | None, int | None, bool, str]:
    """One try at the owner lock of the journal at ``path``: its
    descriptor, or None; with ``brief``, our share of brief.lock (held
    from before the owner lock until after it), else None; whether a
    brief holder has it; and the pid its file names."""
    before = brief_held(path)
    if brief:
        share = os.open(path / "brief.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(share, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(share)
            if exc.errno not in _HELD:
                raise
            return None, None, True, ""  # another opener is asking; try again
    else:
        share = None
    fd = os.open(path / "owner.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = ""
        with contextlib.suppress(OSError):
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        if share is not None:
            os.close(share)
        if exc.errno not in _HELD:
            raise
        # Invariant: a brief holder holds brief.lock from before it takes
        # the owner lock until after it drops it. So if brief.lock was
        # free both before and after our try, a system held the owner
        # lock (or a brief holder came and went within those two looks).
        return None, None, before or brief_held(path), holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd, share, False, ""


def brief_held(path: Path) -> bool:
    """Whether a brief holder (or another opener asking) holds the
    brief.lock of the journal at ``path``."""
    fd = os.open(path / "brief.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in _HELD:
            raise
        return True
    finally:
        os.close(fd)  # closing the fd drops the flock
    return False


def find_holder(path: Path) -> JournalHolder:
    """Whether a system (in any process) holds the journal at ``path``,
    and its pid, read from the owner lock without taking it (from
    /proc/locks on Linux)."""
    lock_path = path / "owner.lock"
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
