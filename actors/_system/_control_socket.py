"""Where the control socket is, and who may be at either end of it (see
`_control`): bound owner-only under a private name, then renamed into
place; a peer checked by uid where the platform says it."""

from __future__ import annotations

import os
import socket
import struct
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import trio

from ..errors import ActorError

__all__ = [
    "SOCKET_NAME",
    "bind",
    "check_directory",
    "check_server",
    "peer_allowed",
    "remove_socket",
    "socket_path",
]

SOCKET_NAME = "control.sock"
_BACKLOG = 64
_UNIX_PATH_MAX = 100  # sun_path holds 108 bytes on Linux, 104 on macOS


@contextmanager
def socket_path(directory: Path, name: str = SOCKET_NAME) -> Any:
    """A path to bind or connect to for ``directory/name``: the path itself,
    or, past the length a unix socket address holds, the same file reached
    through an open descriptor of the directory (/proc/self/fd/N/name)."""
    full = os.fsencode(directory / name)
    if len(full) < _UNIX_PATH_MAX or not os.path.isdir("/proc/self/fd"):
        yield full
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield os.fsencode(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)


def _peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a unix socket (for a
    server, as it was when it listened); None where the platform does not say."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def check_directory(directory: Path) -> int | None:
    """The uid owning the journal's ``directory`` (the journal's owner),
    once it is known that no other user can put a socket there; None if
    the directory cannot be read (connecting then says why).

    Raises:
        ActorError: another user may write in the directory, so the socket
            in it may be theirs.
    """
    try:
        info = os.stat(directory)
    except OSError:
        return None
    if info.st_mode & 0o022:
        raise ActorError(
            f"refusing the control socket {directory / SOCKET_NAME}: the journal directory "
            f"{directory} is writable by other users (mode {info.st_mode & 0o7777:o}), so "
            "the socket may be another user's rather than the running system's; make the "
            f"directory its owner's only (chmod go-w {directory}), then try again"
        )
    return info.st_uid


def check_server(directory: Path, sock: Any, owner: int | None) -> None:
    """Refuse a server that is not the journal's owner (nor root).

    Raises:
        ActorError: another user's program listens on the control socket.
    """
    uid = _peer_uid(sock)
    if uid is None or owner is None or uid in (owner, 0):
        return
    raise ActorError(
        f"refusing the control socket {directory / SOCKET_NAME}: it is served by uid {uid}, "
        f"not by the journal's owner (uid {owner}, who owns {directory}), so it is not the "
        "running system's and nothing was sent to it; stop that program, remove the "
        f"socket, and make {directory} its owner's only (chmod 700 {directory})"
    )


def peer_allowed(sock: trio.socket.SocketType) -> bool:
    """Whether the peer runs as this process's user (or root); True where
    the platform does not say (the socket's mode still guards it)."""
    uid = _peer_uid(sock)
    return uid is None or uid in (os.getuid(), 0)


def bind(directory: Path) -> tuple[socket.socket, int]:
    # Invariant: the socket is reachable under SOCKET_NAME only once it is
    # owner-only and listening: it is bound under a private name first.
    temporary = f".{SOCKET_NAME}.{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with socket_path(directory, temporary) as path:
            with suppress(FileNotFoundError):
                os.unlink(path)
            sock.bind(path)
        try:
            os.chmod(directory / temporary, 0o600)
            sock.listen(_BACKLOG)
            # Replaces a socket a killed system left (we hold the owner lock).
            os.replace(directory / temporary, directory / SOCKET_NAME)
        except BaseException:
            os.unlink(directory / temporary)
            raise
        return sock, os.stat(directory / SOCKET_NAME).st_ino
    except BaseException:
        sock.close()
        raise


def remove_socket(directory: Path, inode: int) -> None:
    """Remove our socket file (not one another system has made since)."""
    path = directory / SOCKET_NAME
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass  # gone already, or the directory with it
