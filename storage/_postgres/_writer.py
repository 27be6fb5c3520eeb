"""The committer: PostgreSQL's side of group commit.

The batching, the tickets, the committer thread and the hand-back of each
batch to the trio thread are the shared `storage._group_commit.GroupCommit`.
One committer thread owns one connection; a batch is one database
transaction and one COMMIT, sent in pipeline mode (its statements are
`_statements._Statements`), and then every caller in it is woken at once.
What ``durable`` asks of a batch (an "async" journal's commit that waits
for the WAL flush) holds for the whole batch it joins.

A lost connection, a deadlock or a serialization failure runs the batch
again on a new connection, up to `_ATTEMPTS` times (`storage._attempts`).
A connection lost after COMMIT was sent leaves the outcome in doubt: the
transaction's id, taken in the transaction, is looked up with
``pg_xact_status`` (`_Writer.committed`), the in-doubt policy of this
journal; if the server cannot say, every caller learns
`CommitOutcomeUnknown`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg
import psycopg.errors
import trio

from .. import _journal as j
from .._attempts import InDoubt, InDoubtPolicy, Refused, Retry, run_attempts
from .._batch import BatchTicket
from .._group_commit import Batch, Commit, GroupCommit
from .._journal import Ticket, Txn
from ..errors import CommitOutcomeUnknown, JournalClosed, JournalCorrupt, JournalUnavailable
from ._failures import _retryable, _session_lost, _txn_error
from ._schema import _SQL
from ._server import _rollback, _Server, _Threads
from ._statements import _Attempt, _Statements, _writes_states

__all__ = ["_ATTEMPTS", "_Attempt", "_Writer"]

_ATTEMPTS = 6  # tries of one batch on a lost connection, deadlock or serialization failure
_LOOKUP_FOR = 5.0  # seconds to learn the outcome of a COMMIT whose answer was lost


class _Writer(GroupCommit, _Statements):
    """The committer thread, its connection, and the batches it fills."""

    # PostgreSQL's whole write is its commit (round trips and the server's
    # fsync), so nothing overlaps an applied batch: each goes back as soon as
    # it is committed, and batches are not split; the handoff times each
    # commit (see `Handoff.committing`). A batch goes back through the trio
    # token, whose wake-up lets go of the GIL: the trio thread then runs its
    # callers, whose next writes join the batch the committer takes next
    # (through the doorbell, which keeps the GIL, the committer took that
    # batch first, and 1000 signalling tasks got 25% fewer signals through).
    even_batches = False
    overlaps = False
    timed_commits = True

    def __init__(self, server: _Server, sql: _SQL) -> None:
        self._server = server
        self._sql = sql
        self._init_group_commit()
        self._conn: psycopg.Connection | None = None  # the committer's; its thread's only
        self._token: trio.lowlevel.TrioToken | None = None  # hands batches back (see start)
        self.force_savepoints = False  # tests: take the per-transaction SAVEPOINT path
        # Tests: called as fault(moment, conn, txns) at "locked" (the first
        # statement, which takes the row locks, is in the pipeline, its Sync
        # not yet; on the savepoint path, every lock is taken), "commit sent" (COMMIT
        # is in the pipeline; the server may or may not have it yet) and
        # "commit answered" (the server committed; an error raised now
        # stands for an answer lost on the way).
        self.fault: Callable[[str, psycopg.Connection, list[Txn]], None] | None = None
        self.commits = 0  # database transactions committed (one per batch)

    @property
    def running(self) -> bool:
        return self._writer_thread is not None

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def inflight(self) -> int:
        """Batches submitted and not yet finished (trio thread)."""
        return self._inflight

    def start(self, conn: psycopg.Connection, threads: _Threads) -> None:
        """Start committing on ``conn`` (the thread owns it from now on)."""
        self._conn = conn
        self._token = threads.token
        name = f"journal-writer {self._server.schema}"
        self._start_writer(name, threads.handoff, doorbell=False)

    def _hand_back(self, batch: Batch) -> None:
        try:
            assert self._token is not None
            self._token.run_sync_soon(self._finish, batch)
        except trio.RunFinishedError:  # pragma: no cover - loop already gone
            self._closing = True  # (nobody is left to finish it)
            return
        assert self._handoff is not None
        self._handoff.handed_back()

    async def stop(self) -> None:
        """Commit every pending batch, wake its callers, then end the thread."""
        await self._stop_writer()

    def submit(self, txn: Txn, *, durable: bool = False) -> Ticket:
        """Put ``txn`` in the next batch (in the trio thread); ``durable``:
        that batch waits for the WAL flush even on an "async" journal."""
        self._check_writable()
        with self._lock:
            batch = self._append(txn, None)
            if durable:  # (under the lock: the committer may take the batch next)
                batch.durable = True
            return BatchTicket(batch, len(batch.txns) - 1)

    def _check_open(self) -> None:
        if self._closing:
            raise JournalClosed(f"{self._server.describe()} is closing; it takes no more writes")

    def _tell_lost(self) -> None:
        pass  # (no write here goes on from one nobody awaited: see Journal.lost_chains)

    def _writer_ended(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _apply_batch(self, batch: Batch) -> Commit:
        # A batch is a few round trips to the server, each ending by taking
        # the GIL back: the handoff (see storage._handoff) counts the whole
        # write as one commit, as LMDB's counts one on the disk.
        return partial(self.write, batch)

    def write(self, batch: Batch) -> None:
        """Commit ``batch`` and set its outcomes; never raises."""
        txns = batch.txns
        durable = batch.durable and self._server.durability == "async"
        fenced = self._server.node is not None and any(t.fences for t in txns)
        if not durable and not fenced and not any(t.ops or t.requires or t.expects for t in txns):
            batch.outcomes = [[] for _ in txns]  # a flush: every earlier batch is durable
            return
        policy = InDoubtPolicy(
            resolve=partial(self._resolve, txns), unknown=partial(self._unknown, txns)
        )
        batch.outcomes = run_attempts(
            partial(self._attempt, txns, durable), len(txns), attempts=_ATTEMPTS, in_doubt=policy
        )

    def _attempt(self, txns: list[Txn], durable: bool) -> list[Any]:
        """One try at committing ``txns``: their outcomes, or what
        `run_attempts` is to do (see `storage._attempts`)."""
        where = self._server.describe()
        try:
            conn = self._writer_connection()
        except JournalUnavailable as exc:
            raise Retry(exc) from None
        run = _Attempt()
        try:
            if not self.force_savepoints and not any(map(_writes_states, txns)):
                try:
                    self._run_batch(conn, txns, durable, run)
                except psycopg.Error as exc:
                    if _retryable(exc) or _session_lost(exc, conn):
                        raise
                    # A statement failed: find out which transaction's it was.
                    _rollback(conn)
                    run = _Attempt()
            if run.outcomes is None:
                self._run_with_savepoints(conn, txns, durable, run)
            self.commits += 1
            return run.outcomes  # type: ignore[return-value]
        except psycopg.Error as exc:
            if _retryable(exc) and not _session_lost(exc, conn):
                # A deadlock with another node, or a serialization failure:
                # nothing was committed; run the batch again.
                _rollback(conn)
                failure: Exception = JournalUnavailable(f"commit to {where} kept failing: {exc}")
                failure.__cause__ = exc
                raise Retry(failure) from None
            if not _session_lost(exc, conn):
                _rollback(conn)
                raise Refused(_txn_error(exc, where)) from None
            # The session is gone, or in a state nobody knows (psycopg's
            # "cannot exit pipeline mode while busy" leaves it unbroken):
            # end it, so a transaction still open on it rolls back.
            self._drop_connection()
            failure = self._server.unreachable(exc)
            failure.__cause__ = exc
            if run.committing:  # the COMMIT may have been written
                raise InDoubt(failure, exc, run.outcomes or [], run) from None
            raise Retry(failure) from None  # the server rolled it back
        except Exception as exc:  # a bug here: every caller learns of it
            _rollback(conn)
            failure = JournalCorrupt(f"commit to {where} failed: {exc!r}", database="", key=b"")
            failure.__cause__ = exc
            raise Refused(failure) from None

    def _resolve(self, txns: list[Txn], doubt: InDoubt) -> bool | None:
        # This journal's in-doubt policy: ask the server (see `committed`).
        committed = self.committed(doubt.attempt, txns)
        if committed:
            self.commits += 1
        return committed

    def _unknown(self, txns: list[Txn], doubt: InDoubt) -> BaseException:
        failure = CommitOutcomeUnknown(
            f"the connection to {self._server.describe()} was lost after COMMIT was sent "
            f"({str(doubt.cause).strip()}), and the server could not say whether "
            "these transactions were written; read back what they write "
            "before writing them again (a blind retry may write them twice)"
        )
        failure.__cause__ = doubt.cause
        return failure

    def committed(self, run: _Attempt, txns: list[Txn]) -> bool | None:
        """After the connection was lost during COMMIT: did it commit? None if
        that cannot be learned within `_LOOKUP_FOR` seconds. Asks on a new
        connection (the writer's next), by the transaction's id."""
        if run.xid is None:
            # No id is taken only for a batch without preconditions and without
            # appends (see _run_batch): it writes the same rows again, so
            # running it again is safe.
            appends = (j.APPEND_MESSAGE, j.APPEND_STREAM)
            return None if any(op[0] in appends for t in txns for op in t.ops) else False
        deadline = time.monotonic() + _LOOKUP_FOR
        delay = 0.01
        while True:
            try:
                conn = self._writer_connection()
                state = conn.execute("SELECT pg_xact_status(%s::text::xid8)", [run.xid]).fetchone()
            except (psycopg.Error, JournalUnavailable):
                state = None  # this connection was lost too: ask on another
                self._drop_connection()
            if state is not None and state[0] == "committed":
                return True
            if state is not None and state[0] == "aborted":
                return False
            # "in progress": the old backend is still ending.
            if time.monotonic() + delay > deadline:
                return None
            time.sleep(delay)
            delay = min(2 * delay, 0.2)

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _writer_connection(self) -> psycopg.Connection:
        conn = self._conn
        if conn is not None and not (conn.closed or conn.broken):
            return conn
        self._drop_connection()
        self._conn = self._server.connect()
        return self._conn
