"""A TCP proxy in front of the test server, to take "the database" away.

The tests share one PostgreSQL server with others, so an outage is never
made by stopping or restarting it: nodes connect through a `Proxy` instead,
and ``proxy.stop()`` closes every connection it carries and refuses new
ones (the listening socket is closed, so a connect is refused at once, as
with a server that is down) until ``proxy.start()``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from urllib.parse import urlsplit, urlunsplit


class Proxy:
    """Forwards 127.0.0.1:<port> (an ephemeral port) to ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.started_at = 0.0  # time.monotonic() of the last start
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._pairs: list[tuple[socket.socket, socket.socket]] = []

    def dsn(self, dsn: str) -> str:
        """``dsn`` (a URL) with its host and port replaced by this proxy's."""
        parts = urlsplit(dsn)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user + '@' if user else ''}127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def start(self) -> None:
        """Accept connections (on the same port as before, if any)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        self.started_at = time.monotonic()
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        """Close every proxied connection and refuse new ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            pairs, self._pairs = self._pairs, []
        if listener is not None:
            listener.close()
        for pair in pairs:
            for sock in pair:
                _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                server = socket.create_connection(self.target)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # stopped meanwhile
                    _close(client)
                    _close(server)
                    return
                self._pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
