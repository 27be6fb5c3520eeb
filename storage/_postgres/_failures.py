"""What a failed statement or commit on the PostgreSQL server means: the
error each caller learns (`_txn_error`, the journal's error mapping), and
whether the batch may run again (`_retryable`) or the session is gone
(`_session_lost`, which after COMMIT leaves the batch in doubt: see
`storage._attempts`).
"""

from __future__ import annotations

import psycopg
import psycopg.errors

from ..errors import EncodeError, JournalCorrupt, JournalFull


def _txn_error(exc: psycopg.Error, where: str) -> Exception:
    """What a transaction the database refused fails with."""
    state = exc.sqlstate or ""
    if state.startswith(("53", "54")):  # insufficient resources, program limit exceeded
        error: Exception = JournalFull(
            f"{where} has no room for this transaction ({exc}); free space on the "
            "database server, raise its limits, or clean up old instances (system.cleanup)"
        )
    elif state.startswith("22"):  # data exception: a value the columns cannot hold
        error = EncodeError(f"{where} cannot store a value of this transaction: {exc}")
    elif state == "23505" and exc.diag.table_name in ("mail", "stream"):
        # A counter handed out a number again: what the number holds stays.
        table = exc.diag.table_name
        error = JournalCorrupt(
            f"a {'message' if table == 'mail' else 'stream value'} in table {table!r} of "
            f"{where} already exists where a new one was to be written (the instance's "
            "counter in table 'counters' was damaged or lost); nothing was overwritten",
            database=table,
            key=b"",
        )
    else:
        error = JournalCorrupt(f"commit to {where} failed: {exc}", database="", key=b"")
    error.__cause__ = exc
    return error


# SQLSTATEs of a transaction the server rolled back for its own reasons,
# which runs again as it is: serialization_failure, deadlock_detected. By
# code, not class: psycopg files DeadlockDetected under OperationalError.
_RETRYABLE = frozenset({"40001", "40P01"})


def _retryable(exc: psycopg.Error) -> bool:
    """Whether ``exc`` is a deadlock or serialization failure (see `_RETRYABLE`)."""
    return exc.sqlstate in _RETRYABLE or isinstance(exc, psycopg.errors.TransactionRollback)


def _session_lost(exc: psycopg.Error, conn: psycopg.Connection) -> bool:
    """Whether ``exc`` leaves the session gone or in an unknown state, rather
    than being the server's refusal of a statement on a live session."""
    if conn.broken or conn.closed:
        return True
    if isinstance(exc, psycopg.errors.PipelineAborted):
        return False  # skipped after a statement failed: that failure decides
    if exc.sqlstate is None:  # raised by the client: "cannot exit pipeline mode while busy"
        return isinstance(exc, psycopg.OperationalError)
    return exc.sqlstate.startswith("08") or exc.diag.severity in ("FATAL", "PANIC")
