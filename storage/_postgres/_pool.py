"""The connections reads run on: idle ones are reused, none is waited for.

A read takes an idle connection, or opens a new one when none is idle; a
connection that comes back broken or closed is dropped, the others wait
idle for the next read (at most ``size`` of them). Nothing here waits for a
connection to come free: the journal's thread limiter already bounds the
reads in flight to the pool's size. So during a database outage a read
fails at once with `JournalUnavailable` (the connection is refused) rather
than waiting out a pool's reconnection backoff, and the first read after
the server is back connects again: recovery costs one connect, not the
seconds to minutes a backing-off pool would take.
"""

from __future__ import annotations

import threading

import psycopg

from ._server import _Server


def _configure_reader(conn: psycopg.Connection) -> None:
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True


class _ReadPool:
    """Idle reader connections of one journal, and how to make more."""

    def __init__(self, server: _Server, size: int) -> None:
        self._server = server
        self.max_size = size
        self._idle: list[psycopg.Connection] = []  # guarded by _lock
        self._lock = threading.Lock()
        self._closed = False  # guarded by _lock

    def getconn(self) -> psycopg.Connection:
        """An idle connection, or a new one. Raises `JournalUnavailable` if
        the server cannot be reached."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        conn = self._server.watched_connect(autocommit=False)
        try:
            _configure_reader(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def putconn(self, conn: psycopg.Connection) -> None:
        """Take back a connection whose transaction has ended."""
        if not (conn.closed or conn.broken):
            with self._lock:
                if not self._closed and len(self._idle) < self.max_size:
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
