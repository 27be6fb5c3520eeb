"""LMDB's side of group commit: how a batch is applied, grown into and refused.

The batching, the tickets, the writer thread and the "async" window are
`storage._group_commit.GroupCommit`, which this class (and so
`LMDBJournal`) inherits; here is what LMDB adds. Each batch is one LMDB
transaction, committed with LMDB's own synced commit (data fsync, then the
meta page), after the batch before it was handed back (see
`GroupCommit._write_loop`). A lone caller skips the writer thread and
commits in the trio thread (`_write_inline`).

When a batch does not fit or one of its transactions is refused, the
careful path (`_LMDBWriter._write`) grows the map, then applies each
transaction in a nested transaction so that the one at fault fails alone.
A failed LMDB commit aborts: nothing of it is written, so a commit here is
never in doubt (see `storage._attempts`).

`_LMDBWriter` is the writing half of `LMDBJournal`, which owns the state
declared on it (set up in `LMDBJournal.__init__` and ``open``).
"""

from __future__ import annotations

import errno
import os
import threading
from functools import partial
from typing import TYPE_CHECKING, Any

import lmdb

from .. import _journal as j
from .._group_commit import Batch, Commit, GroupCommit
from .._journal import (
    CANCEL_TIMER,
    DELETE_INSTANCE,
    DROP_LOG,
    TAKE_MESSAGE,
    Txn,
)
from .._states import DELETE_STATE, PUT_STATE, check_expects
from ..errors import (
    ActorError,
    Conflict,
    EncodeError,
    JournalClosed,
    JournalCorrupt,
    JournalDiskFull,
    JournalFull,
)
from ._applier import _Applier

# Operations that only remove records (see _LMDBWriter._write's reserve).
_FREEING_OPS = frozenset({DELETE_INSTANCE, DROP_LOG, TAKE_MESSAGE, CANCEL_TIMER})
# What a transaction marked `Txn.frees` (a cleanup) may do beside freeing.
_FREES_BESIDE = frozenset({PUT_STATE, DELETE_STATE})
# A commit failing with one of these means the filesystem is full (on some,
# tmpfs among them, a short write shows as EIO) or failing.
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


class _LMDBWriter(GroupCommit):
    """The writing methods of `LMDBJournal` (see the module docstring)."""

    # Set up by LMDBJournal (see its __init__ for what each guards).
    path: Any
    readonly: bool
    max_map_size: int
    _env: lmdb.Environment | None
    _handles: tuple[Any, ...]
    _forked: bool
    _read_lock: threading.Lock
    lost_chains: j.LostChains
    _inline_applier: _Applier  # (see `_write_inline`; made as the journal opens)

    if TYPE_CHECKING:  # defined by LMDBJournal

        def describe(self) -> str: ...

        def _check_open(self) -> lmdb.Environment: ...

    def _refuse_write(self) -> None:
        self._check_open()
        raise JournalClosed(
            f"{self.describe()} is open read-only; open it without readonly=True to write "
            "(which needs the journal not to be held by a running system)"
        )

    def _check_writable(self) -> None:
        if self._env is None or self._closing or self._forked:
            self._check_open()  # raises, saying why

    def _applied(self, batch: Batch) -> None:
        # Before the next batch is applied: it must see what this one lost.
        self.lost_chains.note(batch.txns, batch.outcomes)

    def _apply_batch(self, batch: Batch) -> Commit | None:
        """Apply ``batch`` in a new LMDB transaction; return what commits it.

        On any trouble (the map is full, a transaction LMDB refuses) it takes
        the careful path, which commits by itself, and returns None.
        """
        env = self._env
        assert env is not None
        try:
            wtxn = env.begin(write=True)
        except Exception:
            batch.outcomes = self._write(batch.txns)
            return None
        try:
            batch.outcomes = self._apply_all(wtxn, batch.txns, isolate=False)
        except lmdb.MapFullError:
            wtxn.abort()
            batch.outcomes = self._write(batch.txns)
            return None
        except Exception:  # one transaction is at fault (a key too long, say)
            wtxn.abort()
            batch.outcomes = self._write(batch.txns, isolate=True)
            return None
        return partial(self._commit_batch, wtxn, batch)

    def _commit_batch(self, wtxn: lmdb.Transaction[bytes], batch: Batch) -> None:
        try:
            wtxn.commit()
        except Exception:  # a failed commit aborts: nothing of it was written
            batch.outcomes = self._write(batch.txns)

    def _write_inline(self, txns: list[Txn]) -> list[Any] | None:
        """Commit ``txns`` in the calling (trio) thread; their outcomes, or
        None if that failed (the map is full, say): the writer thread then
        retries them carefully.

        `_apply_all` without isolation, written for this path: the commit is
        this call and the applier's `apply` per transaction. It makes no
        `Chain`: without isolation a failure other than `Conflict` (which
        takes down nothing else) fails the whole commit, so a chain here
        can only have been lost in an earlier batch (`LostChains`).
        """
        env = self._env
        assert env is not None  # (`GroupCommit.commit` checked it is open)
        failed = self.lost_chains.failed
        # Invariant: only the trio thread uses this applier, and only here,
        # while no batch is in flight (`GroupCommit.commit` writes inline
        # only then), so the writer thread is not applying meanwhile.
        apply = self._inline_applier
        outcomes: list[Any] = []
        try:
            with env.begin(write=True) as wtxn:
                apply.txn = wtxn
                for txn in txns:
                    if failed and txn.chain is not None and txn.chain in failed:
                        outcomes.append(failed[txn.chain])  # it builds on one that failed
                        continue
                    try:
                        outcomes.append(apply.apply(txn))
                    except Conflict as exc:  # (raised before it wrote anything)
                        outcomes.append(exc)
        except Exception:
            return None
        return outcomes

    def _write(self, txns: list[Txn], *, isolate: bool = False) -> list[Any]:
        """The careful path: apply and commit ``txns``, growing the map as
        needed and isolating a transaction that fails; return the outcomes.

        Invariant: a transaction fails alone unless the commit itself fails
        (the map or the disk is full), and then each caller learns why.
        """
        env = self._env
        assert env is not None
        while True:
            try:
                outcomes = self._apply(env, txns, isolate=isolate)
            except lmdb.MapFullError as exc:
                if self._grow(env):
                    continue
                if isolate:  # no room even to commit what fits
                    outcomes = [self._commit_failed(exc) for _ in txns]
                    break
            except Exception as exc:
                if isolate:  # LMDB or the disk failed: every caller learns of it
                    return [self._commit_failed(exc) for _ in txns]
            else:
                break
            # Apply each transaction on its own, so the one that does not fit
            # (or is otherwise refused) fails alone.
            isolate = True
        # Deleting needs room too (LMDB copies the pages it changes), so on
        # a full map cleanup could never make room: a transaction that only
        # frees gets the reserve past max_map_size. It commits after the
        # rest of its batch, which no caller can tell from an order they
        # raced for.
        freeing = [
            i
            for i, (txn, outcome) in enumerate(zip(txns, outcomes, strict=True))
            if type(outcome) is JournalFull
            and all(
                op[0] in _FREEING_OPS or (txn.frees and op[0] in _FREES_BESIDE) for op in txn.ops
            )
        ]
        if freeing and self._grow(env, into_reserve=True):
            again = self._write([txns[i] for i in freeing], isolate=True)
            for i, outcome in zip(freeing, again, strict=True):
                outcomes[i] = outcome
            try:
                with self._read_lock:  # keep the reserve for next time (LMDB
                    env.set_mapsize(self.max_map_size)  # keeps what is in use)
            except lmdb.Error:
                pass  # then the map stays larger; nothing is lost
        return outcomes

    def _commit_failed(self, exc: Exception) -> ActorError:
        """The error for a caller whose transaction could not be written."""
        failure: ActorError
        if isinstance(exc, lmdb.MapFullError):
            failure = self._full()
        elif isinstance(exc, lmdb.DiskError) or any(
            os.strerror(code) in str(exc) for code in _DISK_ERRNOS
        ):
            failure = JournalDiskFull(
                f"{self.describe()} could not write to its filesystem ({exc}): the disk "
                f"under {self.path} is full or failing; free space there (df {self.path}) "
                "or move the journal to a larger disk, then retry. Nothing of this "
                "transaction was written.",
                path=str(self.path),
            )
        else:
            failure = JournalCorrupt(
                f"commit to {self.describe()} failed: {exc!r}; nothing of this transaction "
                "was written. If it keeps failing, close the system and open the journal "
                "again (LMDB refuses writes after a failed meta-page write)",
                database="",
                key=b"",
            )
        failure.__cause__ = exc
        return failure

    def _full(self) -> JournalFull:
        return JournalFull(
            f"{self.describe()} is full at max_map_size={self.max_map_size} bytes; "
            "open it with a larger LMDBJournal(max_map_size=...) or clean up finished "
            "instances (system.cleanup). Nothing of this transaction was written."
        )

    def _grow(self, env: lmdb.Environment, *, into_reserve: bool = False) -> bool:
        limit = self.max_map_size
        if into_reserve:
            limit += min(max(self.max_map_size // 32, 1 << 20), 1 << 30)
        current = env.info()["map_size"]
        if current >= limit:
            return False
        try:
            with self._read_lock:
                env.set_mapsize(min(current * 2, limit))
        except lmdb.Error:  # no address space, say: the map stays as it is
            return False
        return True

    def _apply(self, env: lmdb.Environment, txns: list[Txn], *, isolate: bool) -> list[Any]:
        """Apply ``txns`` in one LMDB transaction and commit it."""
        with env.begin(write=True) as wtxn:
            return self._apply_all(wtxn, txns, isolate=isolate)

    def _apply_all(
        self, wtxn: lmdb.Transaction[bytes], txns: list[Txn], *, isolate: bool
    ) -> list[Any]:
        """Apply ``txns`` in order inside ``wtxn``; return their outcomes.

        Each gets its results, or `Conflict` when a precondition fails (its
        operations are skipped). With ``isolate``, each runs in a nested
        transaction, so that one that does not fit (`JournalFull`) or that
        LMDB refuses (`EncodeError`) fails alone and the others go on.
        """
        outcomes: list[Any] = []
        apply = _Applier(wtxn, self._handles)
        chain = j.Chain(self.lost_chains)
        for txn in txns:
            if txn.chain is not None and (broken := chain.refused(txn)) is not None:
                outcomes.append(broken)  # it builds on one that failed
                continue
            if not isolate:
                try:
                    outcomes.append(apply.apply(txn))
                except Conflict as exc:  # (raised before it wrote; nothing else fails: see Chain)
                    outcomes.append(exc)
                continue
            if txn.requires or txn.expects:  # checked here, around its nested transaction
                try:
                    j.check_requires(txn.requires, apply.status_of, apply.incarnation_of)
                    if txn.expects:
                        check_expects(txn.expects, apply.state_version)
                    if txn.fresh_cursors:
                        j.check_fresh_cursors(txn.fresh_cursors, apply.has_cursor)
                except Conflict as exc:  # (it takes down nothing else: see Chain)
                    outcomes.append(exc)
                    continue
            child = self._env.begin(write=True, parent=wtxn)  # type: ignore[union-attr]
            try:
                results = _Applier(child, self._handles).apply(txn, checked=True)
                child.commit()
            except lmdb.MapFullError:
                child.abort()
                outcomes.append(self._full())
            except JournalCorrupt as exc:  # it met a damaged record: it alone fails
                child.abort()
                outcomes.append(exc)
            except Exception as exc:  # noqa: BLE001 - this transaction alone is refused
                child.abort()
                refused = EncodeError(
                    f"{self.describe()} cannot store this transaction ({exc!r}): a key or "
                    "value is over the journal's limits; nothing of it was written (the "
                    "rest of its batch was)"
                )
                refused.__cause__ = exc
                outcomes.append(refused)
            else:
                outcomes.append(results)
            chain.note(txn, outcomes[-1])
        return outcomes
