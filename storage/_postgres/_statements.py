"""The committer's statements: one batch as one database transaction.

A batch costs at most two round trips, however many transactions it holds:

1. one statement locks the rows of the instances named by ``require``
   (sorted, so nodes take them in one order) and takes mail sequence numbers
   and stream indexes for the whole batch with one upsert on ``counters``
   (sorted too; the row locks it holds until COMMIT are what keep writers on
   any number of nodes from handing out one number twice). Then the
   preconditions of every transaction are checked in turn against the
   statuses the earlier ones leave behind; a transaction whose check fails
   is left out (its numbers are given back) and the rest go on. The same
   round trip locks the state keys the batch expects at a version
   (`Txn.expect_state`) and reads their versions, and draws the epochs of
   the rows it creates and claims (`Txn.claim_created`);
2. every operation is written with a few statements over arrays (see
   `_Plan`) that keep each instance's operations in order, then COMMIT.

A batch with no preconditions and no appends skips the first round trip;
one that writes state rows takes the savepoint path
(`_Statements._run_with_savepoints`), one SAVEPOINT per transaction, so
only the failing transaction fails; so does a batch whose fast path a
statement failed (say a number out of ``bigint`` range). Savepoints are
kept off the common path: each one that writes takes a subtransaction id,
and past 64 of them in one transaction every snapshot on the server gets
slower.

Fencing (`_check_fences`) is checked under the same row locks as the
preconditions: a write to an instance this node no longer owns fails alone
with `Conflict`. Notices of new mail to other nodes (``pg_notify``) are
queued in the transaction, so the server sends them at COMMIT, and only if
it commits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from .. import _journal as j
from .._journal import Txn
from .._states import DELETE_STATE, PUT_STATE, check_expects
from ..errors import Conflict
from ._failures import _retryable, _session_lost, _txn_error
from ._plan import (
    Owned,
    _check_fences,
    _columns,
    _notices,
    _number,
    _params,
    _Plan,
    _track_owner,
    _track_status,
    _watched,
)
from ._schema import _MAIL, _SET_COUNTER, _SQL, _STREAM
from ._server import _Server


class _Attempt:
    """One try at committing a batch: its outcomes once known, and whether the
    COMMIT was sent (so a lost connection leaves the outcome in doubt)."""

    __slots__ = ("committing", "outcomes", "xid")

    def __init__(self) -> None:
        self.outcomes: list[Any] | None = None
        self.committing = False
        self.xid: int | None = None  # the transaction's id, once the server has told it


class _Statements:
    """The SQL of a batch, for `_Writer` (which sets these up)."""

    _server: _Server
    _sql: _SQL
    # Tests: see _Writer.fault.
    fault: Callable[[str, psycopg.Connection, list[Txn]], None] | None

    def _run_batch(
        self, conn: psycopg.Connection, txns: list[Txn], durable: bool, run: _Attempt
    ) -> None:
        """The fast path: the whole batch in one pipelined transaction."""
        sql, node = self._sql, self._server.node
        outcomes: list[Any] = [None] * len(txns)
        plan = _Plan()
        for txn in txns:
            plan.add(txn.ops)  # as if no precondition fails; redone below if one does
        required = sorted({iid for t in txns for iid, _, _ in t.requires} | _watched(txns, node))
        starts, replaced = _starts(txns)
        # State rows it expects at a version (it writes none: see write).
        expected = sorted({key for t in txns for key, _ in t.expects})
        claims = [i for i, t in enumerate(txns) if t.claims is not None]
        records: dict[bytes, bytes] = {}
        versions: dict[str, int] = {}
        claimed: dict[int, int] = dict.fromkeys(claims, 0)  # txn -> its epoch
        fresh = sorted({c for t in txns for c in t.fresh_cursors})
        cursors: set[tuple[bytes, str]] = set()  # of ``fresh``, those that exist
        with conn.pipeline() as pipeline:
            conn.execute("BEGIN")
            if durable:
                conn.execute(sql.durable_commit)
            totals: dict[tuple[bytes, int], int] = {}
            if required or plan.wanted or expected:
                # 1. One round trip: lock the addresses of starts over nothing,
                # the instances named by preconditions, the state keys
                # expected, then take sequence numbers for every append (each
                # in key order, in that order on every path: see _lock_batch).
                if starts or replaced:  # every start locks its address (see lock_starts)
                    conn.execute(sql.lock_starts, [sorted({*starts, *replaced})])
                if expected:
                    first = conn.execute(
                        sql.lock_keys_and_allocate, [required, *plan.allocation(), expected]
                    )
                else:
                    first = conn.execute(sql.lock_and_allocate, [required, *plan.allocation()])
                found = conn.execute(sql.records, [replaced]) if replaced else None
                # The versions as of the locks (read by a statement of its own,
                # whose snapshot is taken once they are held).
                seen = conn.execute(sql.state_versions, [expected]) if expected else None
                # The cursors it requires absent, as of the locks (each names
                # an instance locked above: see Txn.require_no_cursor).
                named = (
                    conn.execute(sql.cursors_named, [[i for i, _ in fresh], [c for _, c in fresh]])
                    if fresh
                    else None
                )
                # Epochs for the claims of the rows it creates (see claim_created).
                drawn = conn.execute(sql.draw_epochs, [len(claims)]) if claims and node else None
                if self.fault is not None:
                    self.fault("locked", conn, txns)
                # A Sync, not just a flush: the server then counts the wait for
                # our next message as idle in transaction, so a node frozen
                # here loses these row locks after lease_timeout (see _connect).
                pipeline.sync()
                row = first.fetchone()
                assert row is not None
                if expected:
                    row = row[:3] + row[4:]  # (the count of keys locked)
                xid, locked, statuses, iids, kinds, counts, owners, epochs = row
                run.xid = int(xid)
                totals = dict(zip(zip(iids, kinds, strict=False), counts, strict=False))
                if found is not None:
                    records.update(found.fetchall())
                if seen is not None:
                    versions.update(seen.fetchall())
                if named is not None:
                    cursors.update((bytes(i), c) for i, c in named.fetchall())
                if drawn is not None:
                    claimed.update(
                        zip(claims, (epoch for (epoch,) in drawn.fetchall()), strict=False)
                    )
            elif any(plan.appends):
                # Appends after a delete in this batch take no numbers up front,
                # but a batch that appends must not run twice: learn its id, so
                # that a COMMIT whose answer is lost can be looked up.
                first = conn.execute(sql.take_xid)
                pipeline.sync()
                run.xid = int(first.fetchone()[0])  # type: ignore[index]
            elif durable:
                conn.execute(sql.take_xid)  # so that even an empty commit waits for the WAL
            # 2. Preconditions, in submission order, against the statuses the
            # earlier transactions of the batch leave behind.
            owned: Owned = {}
            if required or expected:
                status: dict[bytes, int | None] = dict.fromkeys(required)
                status.update(zip(locked, statuses, strict=False))
                owned = dict.fromkeys(required)
                owned.update(zip(locked, zip(owners, epochs, strict=False), strict=False))
                incarnation = _incarnation_of(records)
                for i, txn in enumerate(txns):
                    try:
                        j.check_requires(txn.requires, status.get, incarnation)
                        if txn.expects:  # (no transaction here changes a version)
                            check_expects(txn.expects, lambda key: versions.get(key, 0))
                        if txn.fresh_cursors:
                            j.check_fresh_cursors(txn.fresh_cursors, _has(cursors))
                        _check_fences(txn, owned, node)
                    except Conflict as exc:  # (it takes down nothing else: see Chain)
                        outcomes[i] = exc
                        continue
                    for op in txn.ops:
                        if op[1] in status:
                            _track_owner(owned, op, node)
                            _track_status(status, op)
                            _track_record(records, op)
                            if fresh:
                                _track_cursor(cursors, op)
            # Before the batch, each counter stood at its total less what we took.
            before = {key: n - plan.wanted[key] for key, n in totals.items()}
            if any(outcomes):
                # Some transactions are out: number the others' appends without
                # gaps and put each counter back to what they used. Nobody else
                # saw the over-allocation: we hold the counter rows' locks.
                taken = plan.wanted
                plan = _Plan()
                for i, txn in enumerate(txns):
                    if outcomes[i] is None:
                        plan.add(txn.ops)
                fixes = [
                    [iid, kind, n + plan.wanted.get((iid, kind), 0)]
                    for (iid, kind), n in before.items()
                    if plan.wanted.get((iid, kind), 0) != taken[(iid, kind)]
                ]
                if fixes:
                    conn.execute(sql.write[_SET_COUNTER], _columns(_SET_COUNTER, fixes))
                missing = [key for key in plan.wanted if key not in before]
                if missing:  # appends that followed a delete that is out
                    more = conn.execute(sql.allocate, plan.allocation(missing))
                    pipeline.sync()  # as above
                    for iid, kind, n in more.fetchall():
                        before[(iid, kind)] = n - plan.wanted[(iid, kind)]
            plan.number(before)
            # 3. Every write, in order per instance, then one COMMIT.
            for code, rows in plan.groups():
                conn.execute(sql.write[code], _columns(code, rows))
            made = [i for i in claims if outcomes[i] is None]
            if made and node is not None:
                conn.execute(
                    sql.set_epochs, [[txns[i].claims for i in made], [claimed[i] for i in made]]
                )
            notices = _notices(txns, outcomes, owned, node, self._server.schema)
            if notices:  # sent by the server at COMMIT, and only if it commits
                conn.execute(sql.notify, notices)
            appends = iter(plan.appends)
            run.outcomes = [
                o if o is not None else _results(next(appends), claimed.get(i))
                for i, o in enumerate(outcomes)
            ]
            run.committing = True
            conn.execute("COMMIT")  # sent, with everything before it, as the pipeline ends
            if self.fault is not None:
                self.fault("commit sent", conn, txns)
        if self.fault is not None:
            self.fault("commit answered", conn, txns)

    def _claim_created(self, cur: psycopg.Cursor[Any], iid: bytes) -> int:
        """Claim ``iid``, which the current transaction created (the slow
        path's `Txn.claim_created`): its new epoch."""
        if self._server.node is None:
            return 0  # a single owner (see PostgresJournal.claim)
        (epoch,) = cur.execute(self._sql.draw_epochs, [1]).fetchone()  # type: ignore[misc]
        cur.execute(self._sql.set_epochs, [[iid], [epoch]])
        return int(epoch)

    def _run_with_savepoints(
        self, conn: psycopg.Connection, txns: list[Txn], durable: bool, run: _Attempt
    ) -> None:
        """The slow path: one SAVEPOINT per transaction, so a failing one fails alone."""
        sql, node = self._sql, self._server.node
        outcomes: list[Any] = []
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            if durable:
                cur.execute(sql.durable_commit)
            run.xid = int(cur.execute(sql.take_xid).fetchone()[0])  # type: ignore[index]
            _lock_batch(cur, sql, txns, node)
            if self.fault is not None:
                self.fault("locked", conn, txns)
            chain = j.Chain()
            for txn in txns:
                broken = chain.refused(txn)  # it builds on one that failed
                if broken is not None:
                    outcomes.append(broken)
                    continue
                cur.execute("SAVEPOINT txn")
                try:
                    watched = _watched([txn], node)
                    owned: Owned = dict.fromkeys(watched)
                    if txn.requires or watched:
                        # Held already (_lock_batch): this reads what the
                        # earlier transactions of the batch left.
                        cur.execute(
                            sql.lock_instances,
                            [sorted({iid for iid, _, _ in txn.requires} | watched)],
                        )
                        rows = cur.fetchall()
                        found = {row[0]: row[1] for row in rows}
                        _, replaced = _starts([txn])
                        records: dict[bytes, bytes] = {}
                        if replaced:
                            records.update(cur.execute(sql.records, [replaced]).fetchall())
                        j.check_requires(txn.requires, found.get, _incarnation_of(records))
                        if txn.fresh_cursors:
                            named = cur.execute(
                                sql.cursors_named,
                                [
                                    [i for i, _ in txn.fresh_cursors],
                                    [c for _, c in txn.fresh_cursors],
                                ],
                            ).fetchall()
                            there = {(bytes(i), c) for i, c in named}
                            j.check_fresh_cursors(txn.fresh_cursors, _has(there))
                        owned.update((row[0], (row[2], row[3])) for row in rows if row[0] in owned)
                        _check_fences(txn, owned, node)
                    if _has_states(txn):
                        _check_states(cur, sql, txn)
                    results: list[int] = []
                    for op in txn.ops:
                        params = _params(op)
                        if op[0] in (j.APPEND_MESSAGE, j.APPEND_STREAM):
                            kind = _MAIL if op[0] == j.APPEND_MESSAGE else _STREAM
                            cur.execute(sql.allocate, [[op[1]], [kind], [1]])
                            params[1] = _number(kind, cur.fetchone()[2])  # type: ignore[index]
                            results.append(params[1])
                        cur.execute(sql.write[op[0]], _columns(op[0], [params]))
                        if op[1] in owned:
                            _track_owner(owned, op, node)
                    if txn.claims is not None:
                        results.append(self._claim_created(cur, txn.claims))
                    notices = _notices([txn], [None], owned, node, self._server.schema)
                    if notices:
                        cur.execute(sql.notify, notices)
                    cur.execute("RELEASE SAVEPOINT txn")
                    outcomes.append(results)
                except Conflict as exc:
                    cur.execute("ROLLBACK TO SAVEPOINT txn")
                    outcomes.append(exc)
                except psycopg.Error as exc:
                    if _retryable(exc) or _session_lost(exc, conn):
                        raise
                    cur.execute("ROLLBACK TO SAVEPOINT txn")
                    outcomes.append(_txn_error(exc, self._server.describe()))
                chain.note(txn, outcomes[-1])
            run.outcomes = outcomes
            run.committing = True
            cur.execute("COMMIT")
        if self.fault is not None:
            self.fault("commit answered", conn, txns)


def _results(appends: list[list[Any]], epoch: int | None) -> list[int]:
    """A transaction's results: its appends' numbers, then the epoch of its claim, if any."""
    results = [params[1] for params in appends]
    if epoch is not None:
        results.append(epoch)
    return results


def _starts(txns: list[Txn]) -> tuple[list[bytes], list[bytes]]:
    """The instances ``txns`` start over nothing (`Txn.require_absent`) and
    those they start over an ended incarnation, each sorted."""
    absent: set[bytes] = set()
    replaced: set[bytes] = set()
    for txn in txns:
        for iid, codes, incarnation in txn.requires:
            if codes is not None and j.ABSENT in codes:
                absent.add(iid)
            if incarnation is not None:
                replaced.add(iid)
    return sorted(absent), sorted(replaced)


def _incarnation_of(records: dict[bytes, bytes]) -> Callable[[bytes], int]:
    return lambda iid: j.stored_incarnation(records[iid], iid)


def _has(cursors: set[tuple[bytes, str]]) -> Callable[[bytes, str], bool]:
    """`check_fresh_cursors`'s question, asked of ``cursors``."""
    return lambda iid, consumer: (iid, consumer) in cursors


def _track_cursor(cursors: set[tuple[bytes, str]], op: tuple[Any, ...]) -> None:
    """Apply ``op``'s effect on the cursors the batch requires absent."""
    if op[0] == j.SET_CURSOR:
        cursors.add((op[1], op[2]))
    elif op[0] == j.DELETE_CURSOR:
        cursors.discard((op[1], op[2]))
    elif op[0] == j.DELETE_INSTANCE:
        cursors.difference_update([c for c in cursors if c[0] == op[1]])


def _track_record(records: dict[bytes, bytes], op: tuple[Any, ...]) -> None:
    """Apply ``op``'s effect on a record the batch reads (see `_starts`)."""
    if op[0] == j.PUT_INSTANCE and op[1] in records:
        records[op[1]] = op[5]


def _lock_batch(cur: psycopg.Cursor[Any], sql: _SQL, txns: list[Txn], node: str | None) -> None:
    """Take every lock the savepoint path's transactions will want, up front
    and in one global order: the addresses of starts (over nothing, or over
    an ended incarnation, and of cleanups: see `_SQL.lock_starts`), then the
    instances' rows, then state keys, then counter rows, each in key order.

    Invariant: every batch, on either path and on every node, takes its
    locks in this order (the fast path takes the first two, the keys it
    expects and the counters), so no two committers wait on each other: no
    deadlocks.
    """
    starts, replaced = _starts(txns)
    if starts or replaced:
        cur.execute(sql.lock_starts, [sorted({*starts, *replaced})])
    required = sorted({iid for t in txns for iid, _, _ in t.requires} | _watched(txns, node))
    if required:
        cur.execute(sql.lock_instances, [required])
        cur.fetchall()
    keys = sorted(
        {key for t in txns for key, _ in t.expects}
        | {op[1] for t in txns for op in t.ops if op[0] in (PUT_STATE, DELETE_STATE)}
    )
    if keys:
        cur.execute(sql.lock_states, [keys])
        cur.fetchall()
    counters = sorted(
        {
            (op[1], _MAIL if op[0] == j.APPEND_MESSAGE else _STREAM)
            for t in txns
            for op in t.ops
            if op[0] in (j.APPEND_MESSAGE, j.APPEND_STREAM)
        }
    )
    if counters:
        cur.execute(sql.lock_counters, [[k[0] for k in counters], [k[1] for k in counters]])


def _writes_states(txn: Txn) -> bool:
    """Whether ``txn`` writes state rows: such a batch takes the savepoint
    path (one that only expects versions does not: see `_run_batch`)."""
    return any(op[0] in (PUT_STATE, DELETE_STATE) for op in txn.ops)


def _has_states(txn: Txn) -> bool:
    """Whether ``txn`` expects or writes state rows: such a batch takes the
    savepoint path, where each transaction locks its keys before it checks."""
    return bool(txn.expects) or any(op[0] in (PUT_STATE, DELETE_STATE) for op in txn.ops)


def _check_states(cur: psycopg.Cursor[Any], sql: _SQL, txn: Txn) -> None:
    """Lock the state keys ``txn`` touches (advisory, until the commit), then
    raise `Conflict` unless each expected version holds."""
    keys = sorted(
        {key for key, _ in txn.expects}
        | {op[1] for op in txn.ops if op[0] in (PUT_STATE, DELETE_STATE)}
    )
    cur.execute(sql.lock_states, [keys])
    cur.fetchall()
    if txn.expects:
        cur.execute(sql.state_versions, [[key for key, _ in txn.expects]])
        versions = dict(cur.fetchall())
        check_expects(txn.expects, lambda key: versions.get(key, 0))
