"""The control endpoint: a running system on an LMDB journal answers
requests from other processes (the ``actors`` command line) on a unix
socket in the journal's directory.

Why: a system keeps its live instances in memory and learns of mail only
through its own `ActorSystem.send`, so another process may not write to
the journal behind its back. Through the socket the system itself does
the work, with the same public methods an application calls.

The protocol, one request and one reply per connection, each a frame: a
4-byte big-endian length, then that many bytes of UTF-8 JSON. A request is
an object ``{"op": ..., ...}`` naming one of `OPS`; the reply is
``{"ok": result}`` or ``{"error": {"type": ..., "message": ..., "reason":
...}}`` (``reason`` only for `NotDelivered`). A request over `MAX_REQUEST`
bytes, one that does not decode, one that nests arrays and objects more
than `MAX_DEPTH` levels deep, or one naming an unknown operation gets an
error reply of type ``BadRequest``; a truncated one, or one that does
not arrive within `READ_TIMEOUT` seconds, a closed connection. None of them
reaches the system.

Who may connect: the socket is created mode 0600 (bound under a temporary
name, made owner-only, then renamed into place), and on Linux the peer's
uid is checked too (the owner's, or root).

Whom the client talks to: the journal's directory decides who may have put
the socket there. The client refuses a directory that other users may
write (they could have bound their own listener under the name), and, on
Linux, a server whose uid (SO_PEERCRED) is neither the directory's owner
nor root, before it sends a byte: a send's payload or a forced cancel
never reaches another user's program.

A socket file left by a system that was killed is replaced when the next
system opens the journal: only the holder of the owner lock serves, so
whatever is there before it binds is stale. A client that finds the file
but no listener (`ControlUnavailable`) knows no system serves.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import trio

from .._kernel._values import Signal
from ..errors import ActorError
from ._control_frames import MAX_DEPTH, MAX_REPLY, MAX_REQUEST, BadRequest, frame, read_frame
from ._control_socket import (
    SOCKET_NAME,
    bind,
    check_directory,
    check_server,
    peer_allowed,
    remove_socket,
    socket_path,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_REQUEST",
    "OPS",
    "READ_TIMEOUT",
    "SOCKET_NAME",
    "ControlUnavailable",
    "RemoteError",
    "request",
    "start",
]

log = logging.getLogger("actors.control")

READ_TIMEOUT = 10.0  # seconds a client has to send its whole request
_CONNECTIONS = 16  # requests served at once; more wait in the listen backlog


class ControlUnavailable(ActorError, ConnectionError):
    """No system serves the control socket in that directory (none runs, or
    it was opened with ``control=False``)."""


class RemoteError(ActorError):
    """The running system answered a request with an error: ``type`` names
    its class, ``reason`` is that of a `NotDelivered` (else None)."""

    def __init__(self, type: str, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.type, self.message, self.reason = type, message, reason


class Operations(Protocol):
    """What the endpoint asks of a system: its public methods of these names
    (`ActorSystem` is one; see `actors._tools._admin`)."""

    async def send(
        self, address: str, signal: Signal, payload: Any = None, *, key: str | None = None
    ) -> None: ...
    async def cancel(self, address: str, *, compensate: bool = False) -> bool: ...
    async def resume_compensation(self, address: str) -> bool: ...
    async def abandon_compensation(self, address: str) -> bool: ...
    async def cleanup(self, older_than: float, statuses: Iterable[str] = ...) -> int: ...
    async def retry(self, address: str, *, input: dict[str, Any] | None = ...) -> Any: ...
    async def fork(
        self,
        address: str,
        *,
        from_effect: int | None = ...,
        after_step: str | None = ...,
        to: str | None = ...,
        input: dict[str, Any] | None = ...,
    ) -> Any: ...
    async def drop_message(
        self, address: str, message_id: int, *, incarnation: int | None = ...
    ) -> Any: ...
    async def signal(
        self, signal: Signal, identity: Any, payload: Any = None, *, key: str | None = None
    ) -> int: ...


# -- the server ------------------------------------------------------------------------


def start(nursery: trio.Nursery, system: Operations, directory: Path) -> None:
    """Serve the control socket in ``directory`` from ``nursery`` until it is
    cancelled, then remove the socket.

    The socket is bound and listening when this returns (no checkpoint is
    taken). If it cannot be made (a read-only directory, ...), a warning is
    logged and nothing is served: the system runs on without it.
    """
    try:
        sock, inode = bind(directory)
    except OSError as exc:
        log.warning("no control endpoint in %s: %s", directory, exc)
        return
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    nursery.start_soon(_serve, system, listener, directory, inode, name="actors control")


async def _serve(
    system: Operations, listener: trio.SocketListener, directory: Path, inode: int
) -> None:
    try:
        slots = trio.Semaphore(_CONNECTIONS)
        async with trio.open_nursery() as nursery:
            while True:
                await slots.acquire()
                try:
                    stream = await listener.accept()
                except OSError as exc:  # out of descriptors, ...: try again soon
                    slots.release()
                    log.warning("control endpoint in %s: accept failed: %s", directory, exc)
                    await trio.sleep(0.1)
                    continue
                nursery.start_soon(_serve_one, system, stream, slots)
    finally:
        remove_socket(directory, inode)
        listener.socket.close()


async def _serve_one(system: Operations, stream: trio.SocketStream, slots: trio.Semaphore) -> None:
    try:
        async with stream:
            if not peer_allowed(stream.socket):
                return
            try:
                with trio.fail_after(READ_TIMEOUT):
                    request = await read_frame(stream, MAX_REQUEST)
            except BadRequest as exc:
                await _reply(stream, _error("BadRequest", str(exc)))
                await _drain(stream)
                return
            if request is None:
                return  # truncated: the client left
            await _reply(stream, await _answer(system, request))
    except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the client was slow or left; the system carries on
    except Exception:  # noqa: BLE001 - a bad request never takes the system down
        log.exception("control endpoint: a request could not be answered")
    finally:
        slots.release()


async def _reply(stream: trio.SocketStream, doc: dict[str, Any]) -> None:
    with trio.move_on_after(READ_TIMEOUT):
        await stream.send_all(frame(doc))


async def _drain(stream: trio.SocketStream) -> None:
    """Read (and drop) what the client still sends, for a moment: closing
    with unread input would reset the connection and lose the reply."""
    await stream.send_eof()
    with trio.move_on_after(1.0):
        left = MAX_REQUEST
        while left > 0 and (chunk := await stream.receive_some(1 << 16)):
            left -= len(chunk)


def _error(kind: str, message: str, reason: str | None = None) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, "reason": reason}}


async def _answer(system: Operations, request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    handler = OPS.get(op) if isinstance(op, str) else None
    if handler is None:
        return _error("BadRequest", f"unknown operation {op!r}; one of {', '.join(OPS)}")
    try:
        return {"ok": await handler(system, request)}
    except BadRequest as exc:
        return _error("BadRequest", str(exc))
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the client
        if not isinstance(exc, ActorError):
            log.warning("control request %r failed", op, exc_info=True)
        return _error(type(exc).__name__, str(exc), getattr(exc, "reason", None))


def _text(request: dict[str, Any], field: str) -> str:
    value = request.get(field)
    if not isinstance(value, str):
        raise BadRequest(f"{field!r} must be a string, not {value!r}")
    return value


async def _send(system: Operations, request: dict[str, Any]) -> None:
    address = _text(request, "address")
    key = _text(request, "key") if "key" in request else None
    await system.send(address, Signal(_text(request, "signal")), request.get("payload"), key=key)


async def _signal(system: Operations, request: dict[str, Any]) -> int:
    identity = request.get("identity")
    if not isinstance(identity, dict) or not identity:
        raise BadRequest(f"'identity' must be an object of fields, not {identity!r}")
    key = _text(request, "key") if "key" in request else None
    signal = Signal(_text(request, "signal"), identity=tuple(identity))
    return await system.signal(signal, identity, request.get("payload"), key=key)


async def _cancel(system: Operations, request: dict[str, Any]) -> bool:
    compensate = request.get("compensate", False)
    if not isinstance(compensate, bool):
        raise BadRequest(f"'compensate' must be true or false, not {compensate!r}")
    return await system.cancel(_text(request, "address"), compensate=compensate)


async def _resume(system: Operations, request: dict[str, Any]) -> bool:
    return await system.resume_compensation(_text(request, "address"))


async def _abandon(system: Operations, request: dict[str, Any]) -> bool:
    return await system.abandon_compensation(_text(request, "address"))


async def _cleanup(system: Operations, request: dict[str, Any]) -> int:
    older_than = request.get("older_than")
    statuses = request.get("statuses")
    if isinstance(older_than, bool) or not isinstance(older_than, (int, float)):
        raise BadRequest(f"'older_than' must be a number of seconds, not {older_than!r}")
    if not isinstance(statuses, list) or not all(isinstance(s, str) for s in statuses):
        raise BadRequest(f"'statuses' must be a list of strings, not {statuses!r}")
    return await system.cleanup(older_than, statuses)


async def _retry(system: Operations, request: dict[str, Any]) -> dict[str, Any]:
    input = request.get("input")
    if input is not None and not isinstance(input, dict):
        raise BadRequest(f"'input' must be an object of keyword input or null, not {input!r}")
    handle = await system.retry(_text(request, "address"), input=input)
    return {"incarnation": handle.incarnation, "status": handle.status}


async def _fork(system: Operations, request: dict[str, Any]) -> dict[str, Any]:
    input = request.get("input")
    if input is not None and not isinstance(input, dict):
        raise BadRequest(f"'input' must be an object of keyword input or null, not {input!r}")
    from_effect = request.get("from_effect")
    if from_effect is not None and (
        isinstance(from_effect, bool) or not isinstance(from_effect, int)
    ):
        raise BadRequest(f"'from_effect' must be a whole number or null, not {from_effect!r}")
    after_step = _text(request, "after_step") if request.get("after_step") is not None else None
    to = _text(request, "to") if request.get("to") is not None else None
    handle = await system.fork(
        _text(request, "address"),
        from_effect=from_effect,
        after_step=after_step,
        to=to,
        input=input,
    )
    return {"address": handle.id, "incarnation": handle.incarnation, "status": handle.status}


async def _drop_message(system: Operations, request: dict[str, Any]) -> dict[str, Any]:
    message_id = request.get("message_id")
    if isinstance(message_id, bool) or not isinstance(message_id, int):
        raise BadRequest(f"'message_id' must be a whole number, not {message_id!r}")
    incarnation = request.get("incarnation")
    if incarnation is not None and (
        isinstance(incarnation, bool) or not isinstance(incarnation, int)
    ):
        raise BadRequest(f"'incarnation' must be a whole number or absent, not {incarnation!r}")
    m = await system.drop_message(_text(request, "address"), message_id, incarnation=incarnation)
    return {"id": m.id, "signal": m.signal, "payload": m.payload, "sent": m.sent}


# The operations, each onto the `ActorSystem` method of the same name.
OPS: dict[str, Callable[[Operations, dict[str, Any]], Awaitable[Any]]] = {
    "send": _send,
    "signal": _signal,
    "cancel": _cancel,
    "resume_compensation": _resume,
    "abandon_compensation": _abandon,
    "cleanup": _cleanup,
    "retry": _retry,
    "fork": _fork,
    "drop_message": _drop_message,
}


# -- the client ------------------------------------------------------------------------


async def request(directory: Path, op: str, **fields: Any) -> Any:
    """Ask the system serving ``directory`` to do ``op``; returns its result.

    Raises:
        ControlUnavailable: no system serves there (no socket, or a stale one).
        RemoteError: the system answered with an error.
        ActorError: the connection broke before the reply came.
    """
    # Invariant: nothing is sent before the server is known to be the
    # journal owner's (a socket another user could have put there may be a
    # listener of theirs, collecting payloads and answering "ok").
    owner = check_directory(directory)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with socket_path(directory) as path:
            try:
                await sock.connect(path)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                raise ControlUnavailable(
                    f"no system serves {directory / SOCKET_NAME} ({exc.strerror})"
                ) from None
            except PermissionError:
                raise ActorError(
                    f"the control socket {directory / SOCKET_NAME} is its owner's only; run "
                    "this as the user that runs the system"
                ) from None
        check_server(directory, sock, owner)
    except BaseException:
        sock.close()
        raise
    async with trio.SocketStream(sock) as stream:
        try:
            await stream.send_all(frame({"op": op, **fields}))
            reply = await read_frame(stream, MAX_REPLY)
        except (trio.BrokenResourceError, BadRequest) as exc:
            reply, why = None, str(exc)
        else:
            why = "it closed the connection"
    if reply is None:
        raise ActorError(
            f"the running system did not answer the {op!r} request ({why}); it may be "
            "closing: check the instance ('actors show') before trying again"
        )
    if "error" in reply:
        error = reply["error"]
        raise RemoteError(str(error.get("type")), str(error.get("message")), error.get("reason"))
    return reply.get("ok")
