"""The mail pump: notices from other nodes of mail for this node's instances.

A transaction that appends a message to an instance another node owns also
sends ``pg_notify`` to that node's channel (instance ids only, in hex, up
to 200 per notice; see `storage._postgres._plan._notices`), so the notice
leaves at COMMIT and only if it commits. Each node LISTENs on its channel
on a connection of its own, pumped by a system task in the trio loop
(``trio.lowlevel.wait_readable`` on its socket), and passes each id to the
`on_mail` callbacks in the trio thread. Notices sent while that connection
was down are lost, so after a reconnect every owned instance with mail is
reported.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
import trio

from ._schema import _SQL, _channel
from ._server import _Server, _Threads

log = logging.getLogger("storage.postgres")


class _MailPump:
    """This node's LISTEN connection, the task that reads it, and the callbacks it feeds."""

    def __init__(self, server: _Server, sql: _SQL) -> None:
        self._server = server
        self._sql = sql
        self.conn: psycopg.Connection | None = None  # the pump's
        self._notices: list[str] = []  # its notices, gathered while psycopg reads
        self._scope: trio.CancelScope | None = None
        self._done: trio.Event | None = None
        self._callbacks: list[Callable[[bytes], None]] = []
        self.backlog: dict[bytes, None] = {}  # noticed before any callback

    def on_mail(self, callback: Callable[[bytes], None]) -> None:
        self._callbacks.append(callback)
        if self.backlog:
            backlog = list(self.backlog)
            self.backlog.clear()
            self._deliver(backlog)

    def _deliver(self, iids: list[bytes]) -> None:
        """Hand noticed instance ids to the callbacks (in the trio thread)."""
        if not self._callbacks:
            self.backlog.update(dict.fromkeys(iids))
            return
        for iid in dict.fromkeys(iids):
            for callback in list(self._callbacks):
                try:
                    callback(iid)
                except Exception:  # noqa: BLE001 - one bad callback does not stop the pump
                    log.exception("on_mail callback failed for instance %s", iid.hex())

    def listen_sync(self) -> None:
        """LISTEN before the pump starts (in a worker thread, at open)."""
        self.conn, self._notices, _ = self._listen_sync(rescan=False)

    def _listen_sync(self, *, rescan: bool) -> tuple[psycopg.Connection, list[str], list[bytes]]:
        """A new LISTEN connection on this node's channel, the list its
        notices are gathered in while psycopg runs a query on it, and (with
        ``rescan``) every live instance this node owns that has mail."""
        node = self._server.node
        assert node is not None
        conn = self._server.node_connect("mail")
        notices: list[str] = []
        with self._server.setting_up(conn):
            conn.add_notify_handler(lambda n: notices.append(n.payload))
            conn.execute(f'LISTEN "{_channel(self._server.schema, node)}"')
            owned = []
            if rescan:  # after LISTEN: nothing falls between the two
                rows = conn.execute(self._sql.owned_with_mail, [node]).fetchall()
                owned = [bytes(iid) for (iid,) in rows]
        return conn, notices, owned

    def start(self, threads: _Threads) -> None:
        """Run the pump as a system task until `stop`."""
        self._scope = scope = trio.CancelScope()
        self._done = done = trio.Event()
        trio.lowlevel.spawn_system_task(
            self._pump, scope, done, threads, name=f"journal mail {self._server.node}"
        )

    async def _pump(self, scope: trio.CancelScope, done: trio.Event, threads: _Threads) -> None:
        """The LISTEN pump: a system task in the trio loop, until `stop`."""
        node = self._server.node
        delay = 0.05
        try:
            with scope:
                while True:
                    conn, notices = self.conn, self._notices
                    if conn is None:
                        try:
                            conn, notices, owned = await threads.run(
                                lambda: self._listen_sync(rescan=True)
                            )
                        except Exception as exc:  # noqa: BLE001 - retry until close
                            log.warning("node %r: mail connection: %s", node, exc)
                            await trio.sleep(delay)
                            delay = min(2 * delay, 1.0)
                            continue
                        delay = 0.05
                        self.conn, self._notices = conn, notices
                        self._deliver(owned)
                    assert conn is not None  # connected just above, or kept from before
                    try:
                        pgconn = conn.pgconn
                        while (n := pgconn.notifies()) is not None:  # already buffered
                            notices.append(n.extra.decode())
                        if not notices:
                            await trio.lowlevel.wait_readable(conn.fileno())
                            pgconn.consume_input()  # raises once the connection is gone
                            while (n := pgconn.notifies()) is not None:
                                notices.append(n.extra.decode())
                    except (psycopg.Error, OSError) as exc:
                        log.warning(
                            "node %r lost its mail connection (%s); reconnecting",
                            node,
                            str(exc).strip(),
                        )
                        self.conn = None
                        conn.close()
                        continue
                    iids = []
                    for payload in notices:
                        for word in payload.split():
                            try:  # noqa: SIM105 - per word; a try costs nothing unless it raises
                                iids.append(bytes.fromhex(word))
                            except ValueError:
                                pass  # not ours: someone else notified the channel
                    notices.clear()
                    self._deliver(iids)
        except Exception:  # pragma: no cover - a system task must not raise
            log.exception("node %r: mail pump failed; notices from other nodes stop", node)
        finally:
            conn, self.conn = self.conn, None
            if conn is not None:
                conn.close()
            done.set()

    async def stop(self) -> None:
        """End the pump and close its connection."""
        scope, self._scope = self._scope, None
        if scope is not None:
            scope.cancel()
            assert self._done is not None
            await self._done.wait()
        elif self.conn is not None:  # opened, but the pump never started
            conn, self.conn = self.conn, None
            conn.close()

    def forget(self) -> None:
        """Drop the callbacks and any backlog (at close, once the lease is gone)."""
        self._callbacks.clear()
        self.backlog.clear()
