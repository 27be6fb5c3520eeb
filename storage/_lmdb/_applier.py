"""`_Applier`: turns a `Txn`'s operations into puts and deletes.

One applier works inside one LMDB write transaction, the batch's or a
nested one (see `_writer._LMDBWriter._apply_all`): each operation code of
`storage._journal` maps to the keys of `_layout`, keeping the secondary
indexes (status, the timers' due-time index, the counters) in step with the
records they index.
"""

from __future__ import annotations

import struct
from typing import Any

import lmdb
import msgpack

from .. import _reading as rd
from .._journal import (
    ABSENT,
    ADD_TIMER,
    APPEND_MESSAGE,
    APPEND_STREAM,
    CANCEL_TIMER,
    DELETE_CURSOR,
    DELETE_INSTANCE,
    DROP_LOG,
    PUT_INSTANCE,
    PUT_LOG,
    SET_CURSOR,
    SET_STATUS,
    TAKE_MESSAGE,
    Txn,
    check_fresh_cursors,
    check_requires,
    stored_incarnation,
)
from .._states import DELETE_STATE, PUT_STATE, STATE_PREFIX, check_expects
from ..errors import JournalCorrupt
from ._layout import _DBS, _H, _MAIL_COUNTER, _Q, _RUN_SEQ, _STREAM_COUNTER


class _Applier:
    """Applies Txn operations inside one LMDB write transaction."""

    __slots__ = ("txn", *_DBS)  # a database handle each, by its name

    txn: lmdb.Transaction[bytes]

    def __init__(self, txn: lmdb.Transaction[bytes] | None, dbs: tuple[Any, ...]) -> None:
        # ``dbs``: the handles in slot order (`LMDBJournal._handles`); one
        # unpacking rather than nine dict lookups. ``txn`` None: the inline
        # path's applier, kept by the journal and given each commit's
        # transaction in turn.
        if txn is not None:
            self.txn = txn
        (
            self.instances,
            self.status,
            self.log,
            self.mail,
            self.timers,
            self.timer_ids,
            self.stream,
            self.cursors,
            self.counters,
            self.meta,
        ) = dbs

    def status_of(self, iid: bytes) -> int | None:
        value = self.txn.get(iid, db=self.instances)
        if value is None:
            return None
        return value[0] if value else 0  # an emptied record: no status (its reads report it)

    def incarnation_of(self, iid: bytes) -> int:
        """The incarnation of the existing instance ``iid``."""
        value = self.txn.get(iid, db=self.instances)
        assert value is not None  # its status was just read
        try:
            hlen = _H.unpack_from(value, 1)[0]
        except Exception as exc:
            raise rd.corrupt("instances", iid, f"has a broken header ({exc!r})") from exc
        return stored_incarnation(value[3 + hlen :], iid)

    def has_cursor(self, iid: bytes, consumer: str) -> bool:
        """Whether instance ``iid`` has a cursor named ``consumer``."""
        return self.txn.get(iid + consumer.encode(), db=self.cursors) is not None

    def state_version(self, key: str) -> int:
        """The version of state row ``key`` (0 if absent); see `storage._states`."""
        name = STATE_PREFIX + key.encode()
        value = self.txn.get(name, db=self.meta)
        return 0 if value is None else rd.number(value[:8], "meta", name)

    def _next(self, iid: bytes, kind: bytes) -> int:
        key = iid + kind
        found = self.txn.get(key, db=self.counters)
        number = 0 if found is None else rd.number(found, "counters", key)
        self.txn.put(key, _Q.pack(number + 1), db=self.counters)
        return number

    def _append(self, key: bytes, value: bytes, db: Any, database: str) -> None:
        """Write a new message or stream value; never over an existing one.

        Invariant: a message or stream value, once written, is only ever
        taken or deleted, never replaced: a damaged counter that hands out a
        number again fails this transaction (alone) instead of losing what
        the number held.
        """
        if not self.txn.put(key, value, db=db, overwrite=False):
            raise _overwriting(database, key)

    def _delete_prefix(self, prefix: bytes, db: Any) -> None:
        with self.txn.cursor(db=db) as cur:
            if not cur.set_range(prefix):
                return
            while cur.key().startswith(prefix):
                if not cur.delete():
                    break

    def apply(self, txn: Txn, *, checked: bool = False) -> list[int]:
        """Check ``txn``'s preconditions, then apply its operations; its
        results (the numbers of its appends). ``checked``: its
        preconditions were checked already (in the batch's transaction,
        around this nested one).

        Raises `Conflict` for the first precondition that does not hold,
        before anything of ``txn`` is written; anything else it raises (a
        damaged counter's `JournalCorrupt`, a key LMDB refuses, a full
        map) may come after some of its writes, so its caller drops the
        LMDB transaction it ran in (see `_writer._LMDBWriter._apply_all`).

        One call per transaction on the inline path (every commit of a
        lone writer): the common checks, the status index and the mailbox
        counter are written out here rather than called, and the careful
        functions of `storage._txn` and `storage._states` run only for a
        check that does not plainly hold, to say why (or find it does).
        """
        wtxn = self.txn
        get = wtxn.get
        instances = self.instances
        if not checked and (txn.requires or txn.expects):
            careful = False
            for iid, codes, incarnation in txn.requires:
                value = get(iid, db=instances)
                if value is None:  # (`status_of`, written out)
                    if codes is not None and ABSENT in codes:
                        continue
                    careful = True
                elif incarnation is not None or (
                    codes is not None and (value[0] if value else 0) not in codes
                ):
                    careful = True
            if careful:
                check_requires(txn.requires, self.status_of, self.incarnation_of)
            for key, version in txn.expects:
                value = get(STATE_PREFIX + key.encode(), db=self.meta)
                if value is None:  # (`state_version`, written out)
                    if version != 0:
                        check_expects(txn.expects, self.state_version)
                elif len(value) < 8 or int.from_bytes(value[:8], "big") != version:
                    check_expects(txn.expects, self.state_version)
            if txn.fresh_cursors:
                check_fresh_cursors(txn.fresh_cursors, self.has_cursor)
        status_db = self.status
        results: list[int] = []
        for op in txn.ops:
            code = op[0]
            if code == PUT_LOG:
                _, iid, run, seq, entry = op
                # Positional (dupdata, overwrite, append, db): py-lmdb takes
                # keywords in a dict made per call, and this is the put of
                # nearly every commit.
                wtxn.put(iid + _RUN_SEQ.pack(run, seq), entry, True, True, False, self.log)
            elif code == TAKE_MESSAGE:
                wtxn.delete(op[1] + _Q.pack(op[2]), db=self.mail)
            elif code == APPEND_MESSAGE:
                _, iid, message = op
                # `_next` and `_append`, written out (every send): keep in step.
                key = iid + _MAIL_COUNTER
                found = get(key, db=self.counters)
                if found is None:
                    seq = 1
                elif len(found) == 8:
                    seq = int.from_bytes(found, "big") + 1
                else:
                    seq = rd.number(found, "counters", key) + 1  # raises, saying why
                wtxn.put(key, _Q.pack(seq), db=self.counters)
                key = iid + _Q.pack(seq)
                if not wtxn.put(key, message, True, False, False, self.mail):  # no overwrite
                    raise _overwriting("mail", key)  # (the invariant of `_append`)
                results.append(seq)
            elif code == PUT_INSTANCE:
                _, iid, status, process, address, record = op
                value = get(iid, db=instances)
                header = msgpack.packb([address, process])
                wtxn.put(
                    iid, bytes((status,)) + _H.pack(len(header)) + header + record, db=instances
                )
                # The status index: the entry under the old status goes.
                if value is not None and (old := value[0] if value else 0) != status:
                    wtxn.delete(bytes((old,)) + iid, db=status_db)
                wtxn.put(bytes((status,)) + iid, process.encode(), db=status_db)
            elif code == SET_STATUS:
                _, iid, status = op
                value = get(iid, db=instances)
                if value is not None:
                    # The process comes from the index entry, not the record's
                    # header: marking a broken record corrupt must not need it
                    # to decode.
                    old = value[0] if value else 0  # (`status_of`, written out)
                    process = get(bytes((old,)) + iid, db=status_db) or b""
                    wtxn.put(iid, bytes((status,)) + value[1:], db=instances)
                    if old != status:
                        wtxn.delete(bytes((old,)) + iid, db=status_db)
                    wtxn.put(bytes((status,)) + iid, process, db=status_db)
            else:
                self._run_rare(op, results)
        return results

    def _run_rare(self, op: tuple[Any, ...], results: list[int]) -> None:
        """Apply one operation of a kind `apply` does not write out (timers,
        streams, cursors, state rows, removals), appending its result if it
        gives one."""
        txn = self.txn
        code = op[0]
        if code == ADD_TIMER:
            _, iid, run, seq, due = op
            ident = iid + _RUN_SEQ.pack(run, seq)
            old_due = txn.get(ident, db=self.timer_ids)
            if old_due is not None:
                txn.delete(old_due + ident, db=self.timers)
            txn.put(_Q.pack(due) + ident, b"", db=self.timers)
            txn.put(ident, _Q.pack(due), db=self.timer_ids)
        elif code == CANCEL_TIMER:
            ident = op[1] + _RUN_SEQ.pack(op[2], op[3])
            old_due = txn.get(ident, db=self.timer_ids)
            if old_due is not None:
                txn.delete(old_due + ident, db=self.timers)
                txn.delete(ident, db=self.timer_ids)
        elif code == DROP_LOG:
            self._delete_prefix(op[1] + struct.pack(">I", op[2]), self.log)
        elif code == APPEND_STREAM:
            _, iid, value = op
            index = self._next(iid, _STREAM_COUNTER)
            self._append(iid + _Q.pack(index), value, self.stream, "stream")
            results.append(index)
        elif code == SET_CURSOR:
            _, iid, consumer, position = op
            txn.put(iid + consumer.encode(), _Q.pack(position), db=self.cursors)
        elif code == DELETE_CURSOR:
            txn.delete(op[1] + op[2].encode(), db=self.cursors)
        elif code == DELETE_INSTANCE:
            self._delete_instance(op[1])
        elif code == PUT_STATE:
            version = self.state_version(op[1]) + 1
            txn.put(STATE_PREFIX + op[1].encode(), _Q.pack(version) + op[2], db=self.meta)
        elif code == DELETE_STATE:
            txn.delete(STATE_PREFIX + op[1].encode(), db=self.meta)
        else:  # pragma: no cover - a programming error in the runtime
            raise ValueError(f"unknown journal op {code}")

    def _delete_instance(self, iid: bytes) -> None:
        txn = self.txn
        old = self.status_of(iid)
        if old is not None:
            txn.delete(bytes((old,)) + iid, db=self.status)
            txn.delete(iid, db=self.instances)
        with txn.cursor(db=self.timer_ids) as cur:
            if cur.set_range(iid):
                while cur.key().startswith(iid):
                    txn.delete(cur.value() + cur.key(), db=self.timers)
                    if not cur.delete():
                        break
        for db in (self.log, self.mail, self.stream, self.cursors, self.counters):
            self._delete_prefix(iid, db)


def _overwriting(database: str, key: bytes) -> JournalCorrupt:
    """The error for a new message or stream value whose key is taken (see
    `_Applier._append`)."""
    return rd.corrupt(
        database,
        key,
        "already exists where a new one was to be written (the instance's counter "
        "in database 'counters' was damaged or lost); nothing was overwritten",
    )
