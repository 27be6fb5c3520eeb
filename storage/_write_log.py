"""`WriteLog`: every write a simulated journal committed, hashed into one
digest (a seed's run is the same run when its digest is), with a readable
trace of the last ones for a failure's report.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from . import _journal as j
from ._journal import Txn
from ._states import DELETE_STATE, PUT_STATE

__all__ = ["WriteLog"]


_OP_NAMES = {
    PUT_STATE: "state",
    DELETE_STATE: "state-",
    j.PUT_INSTANCE: "put",
    j.DELETE_INSTANCE: "delete",
    j.PUT_LOG: "log",
    j.DROP_LOG: "drop-log",
    j.APPEND_MESSAGE: "mail+",
    j.TAKE_MESSAGE: "mail-",
    j.ADD_TIMER: "timer+",
    j.CANCEL_TIMER: "timer-",
    j.APPEND_STREAM: "emit",
    j.SET_CURSOR: "cursor",
    j.SET_STATUS: "status",
    j.DELETE_CURSOR: "cursor-",
}


class WriteLog:
    """Every write a simulated journal committed, in order, as one digest,
    with the last ``keep`` lines kept readable for a failure's trace.

    Each committed batch adds its number, the time, and per transaction
    its outcome (the results, or the error's type) and its operations as
    stored (``repr`` of each: codes, ids, numbers and encoded bytes), so
    the digest changes with any byte written. Faults and crashes are lines
    of their own.
    """

    def __init__(self, keep: int = 40) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.commits = 0  # batches committed (or failed) so far, over every life
        self.writes = 0  # transactions written
        self.recent: deque[str] = deque(maxlen=keep)
        self._addresses: dict[bytes, str] = {}  # iid -> address, for the trace
        #: Told of each transaction written, in order (a checker's view of
        #: the journal's history; what a crash lost was never written).
        self.watchers: list[Callable[[Txn], None]] = []

    def hexdigest(self) -> str:
        """The digest of everything logged so far."""
        return self._hash.hexdigest()

    def event(self, text: str) -> None:
        """Log a fault, a crash or a recovery."""
        self._hash.update(f"! {text}\n".encode())
        self.recent.append(f"{_now():.6f} {text}")

    def note(self, text: str) -> None:
        """Add a line to the trace only (not to the digest)."""
        self.recent.append(f"{_now():.6f} ({text})")

    def batch(
        self, txns: list[Txn], outcomes: list[Any], applied: frozenset[int] = frozenset()
    ) -> None:
        """Log a batch of transactions and their outcomes (``applied``: the
        ``id`` of each whose outcome is an error but which was written, as
        a commit of unknown outcome may be)."""
        self.commits += 1
        update = self._hash.update
        update(f"batch {self.commits} {_now()!r} {len(txns)}\n".encode())
        parts = []
        for txn, outcome in zip(txns, outcomes, strict=False):
            failed = isinstance(outcome, BaseException)
            what = type(outcome).__name__ if failed else f"ok {outcome!r}"
            if not failed or id(txn) in applied:
                self.writes += 1
                for watcher in self.watchers:
                    watcher(txn)
            update(f"txn {what}\n".encode())
            for op in txn.ops:
                update(repr(op).encode())
                update(b"\n")
            parts.append(self._describe(txn, what))
        self.recent.append(f"{_now():.6f} commit {self.commits}: " + " | ".join(parts))

    def _describe(self, txn: Txn, outcome: str) -> str:
        ops = []
        for op in txn.ops:
            if op[0] == j.PUT_INSTANCE:
                self._addresses[op[1]] = op[4]
            name = _OP_NAMES.get(op[0], str(op[0]))
            subject = op[1] if len(op) > 1 else ""
            if isinstance(subject, bytes):  # an instance id
                address = self._addresses.get(subject) or subject.hex()[:8]
            else:  # a state row's key
                address = str(subject)
            extra = ""
            if op[0] in (j.PUT_INSTANCE, j.SET_STATUS):
                extra = " " + j.STATUS_NAME.get(op[2], str(op[2]))
            elif op[0] in (j.PUT_LOG, j.ADD_TIMER, j.CANCEL_TIMER):
                extra = f" {op[2]}.{op[3]}"
            elif op[0] == j.TAKE_MESSAGE:
                extra = f" #{op[2]}"
            ops.append(f"{name} {address}{extra}")
        tag = "ok" if outcome.startswith("ok") else outcome
        return f"[{tag}] " + ", ".join(ops)


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # outside a run (a trace printed afterwards)
        return 0.0
