"""Between a journal and a history file: reading an instance and its
descendants out (`read_history`), and importing a history in one
transaction, all or nothing (`import_history`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import attrs

from storage import (
    InstanceRow,
    Journal,
    Reader,
    Txn,
    instance_id,
)

from .._kernel._log import children_named
from .._kernel._mailbox import StoredMessage
from .._kernel._message_txns import key_cursor, key_of
from .._kernel._transactions import history_key
from .._system._kept import KEPT_INCARNATIONS, read_kept
from ..errors import AlreadyStarted, InvalidArguments, NotDelivered
from ._history_document import History, InstanceHistory, Message, Timer

__all__ = [
    "ImportPlan",
    "import_history",
    "import_txn",
    "read_for_import",
    "read_from",
    "read_history",
]

_STREAM_PAGE = 1000


# -- reading from a journal ------------------------------------------------------------


def _read_one(r: Reader, row: InstanceRow) -> InstanceHistory:
    iid = row.iid
    runs = {run: r.entries(iid, run) for run in r.log_runs(iid)}
    mail = []
    for seq, stored in r.mailbox(iid):
        message = StoredMessage.from_stored(stored)
        mail.append(Message(seq, message.signal, message.payload, message.sent_at, message.trace))
    stream: list[Any] = []
    while len(stream) < r.stream_length(iid):
        page = r.stream(iid, len(stream), _STREAM_PAGE)
        if not page:
            break
        stream += [value for _, value in page]
    consumers, keys = {}, []
    for name, position in sorted(r.cursors(iid).items()):
        key = key_of(name)
        if key is None:
            consumers[name] = position
        else:
            keys.append(key)
    return InstanceHistory(
        address=row.address,
        process=row.process,
        status=row.status,
        record=row.record,
        runs=runs,
        mail=mail,
        timers=[Timer(t.run, t.seq, t.due) for t in r.timers(iid)],
        stream=stream,
        consumers=consumers,
        send_keys=keys,
        incarnations=read_kept(r, iid)[1],
    )


def _descendants(r: Reader, one: InstanceHistory, seen: set[str]) -> Iterator[InstanceHistory]:
    named: dict[str, int] = {}
    for run in sorted(one.runs):
        named.update(children_named(one.runs[run]))
    for address in named:
        if address in seen:
            continue
        seen.add(address)
        row = r.instance(instance_id(address))
        if row is None or row.record.parent != one.address:
            continue  # cleaned up, or another instance's now
        child = _read_one(r, row)
        yield child
        yield from _descendants(r, child, seen)


def read_from(r: Reader, address: str, *, source: str, now: float) -> History:
    """The history of ``address`` (and its descendants) as reader ``r`` sees them.

    Raises:
        NotDelivered: no instance at ``address`` (reason ``"unknown"``).
        JournalCorrupt: a record of it does not decode.
    """
    row = r.instance(instance_id(address))
    if row is None or row.address != address:
        raise NotDelivered(
            f"no instance at {address!r} to export; check the address ('actors list' shows "
            "the addresses)",
            address=address,
            reason="unknown",
        )
    root = _read_one(r, row)
    return History(
        address=address,
        exported=now,
        source=source,
        instances=[root, *_descendants(r, root, {address})],
    )


async def read_history(journal: Journal, address: str) -> History:
    """`read_from` on an open journal, in one consistent read."""
    now = time.time()
    source = journal.describe()
    return await journal.read(lambda r: read_from(r, address, source=source, now=now))


# -- writing into a journal ------------------------------------------------------------


@attrs.frozen
class ImportPlan:
    """What an import read of the journal it writes to: the instance at
    each of the history's addresses (if any), the version of each one's
    history row (0: none), and which parents outside the history are there."""

    present: dict[str, InstanceRow]
    versions: dict[str, int]
    parents: frozenset[str]


def read_for_import(r: Reader, history: History) -> ImportPlan:
    """The `ImportPlan` of ``history`` as reader ``r`` sees the journal."""
    present, versions = {}, {}
    addresses = {one.address for one in history.instances}
    parents = set()
    for one in history.instances:
        iid = instance_id(one.address)
        row = r.instance(iid)
        if row is not None:
            present[one.address] = row
        versions[one.address] = read_kept(r, iid)[0]
        parent = one.record.parent
        if (
            parent is not None
            and parent not in addresses
            and r.instance(instance_id(parent)) is not None
        ):
            parents.add(parent)
    return ImportPlan(present, versions, frozenset(parents))


def import_txn(history: History, plan: ImportPlan, *, replace: bool) -> Txn:
    """The transaction that imports ``history``: every instance as it was
    exported, over no instance at its address (or, with ``replace``, over
    exactly the one the plan read), its incarnations kept over the history
    rows at the versions read.

    Invariant: it commits only over what ``plan`` read, else it fails with
    `Conflict` and writes nothing.

    Raises:
        AlreadyStarted: an instance is at one of the addresses, without ``replace``.
        InvalidArguments: a child comes without its parent (neither in the
            history nor in the journal): the runtime would cancel it.
        EncodeError: a value cannot be stored (an `Opaque` one: import its class).
    """
    txn = Txn()
    addresses = {one.address for one in history.instances}
    for one in history.instances:
        iid = instance_id(one.address)
        parent = one.record.parent
        if parent is not None and parent not in addresses and parent not in plan.parents:
            raise InvalidArguments(
                f"cannot import {one.address!r} without its parent {parent!r}, which is neither "
                "in the history nor in this journal (a child without its parent is cancelled "
                f"when it is found); export {parent!r} (or the top of its tree) instead: an "
                "export brings the instance's descendants along",
            )
        there = plan.present.get(one.address)
        if there is not None and not replace:
            raise AlreadyStarted(
                f"cannot import {one.address!r}: an instance is there already ({there.status}, "
                f"incarnation {there.record.incarnation}); pass --replace (replace=True) to "
                "put the history's in its place, or import into another journal",
                address=one.address,
                status=there.status,
            )
        if there is not None:
            txn.require(iid, frozenset({there.status}), incarnation=there.record.incarnation)
            txn.delete_instance(iid)
        else:
            txn.require_absent(iid)
        status = "running" if one.status == "queued" else one.status  # (no queue here)
        txn.put_instance(
            iid, address=one.address, process=one.process, status=status, record=one.record
        )
        for run, log in one.runs.items():
            for seq, entry in log.items():
                txn.put_log(iid, run, seq, entry.to_stored())
        for m in one.mail:
            txn.append_message(
                iid, StoredMessage.stored(m.signal, m.payload, m.sent, m.trace, None)
            )
        for t in one.timers:
            txn.add_timer(iid, t.run, t.effect, t.due)
        for value in one.stream:
            txn.append_stream(iid, value)
        for name, position in one.consumers.items():
            txn.set_cursor(iid, name, position)
        for key in one.send_keys:
            txn.set_cursor(iid, key_cursor(key), 0)
        key = history_key(iid)
        txn.expect_state(key, plan.versions.get(one.address, 0))
        if one.incarnations:
            txn.put_state(key, [k.to_stored() for k in one.incarnations[-KEPT_INCARNATIONS:]])
        elif plan.versions.get(one.address, 0):
            txn.delete_state(key)
    return txn


async def import_history(journal: Journal, history: History, *, replace: bool = False) -> None:
    """Write ``history`` into ``journal`` (open, held by no running system):
    all its instances in one transaction, or none.

    Raises:
        AlreadyStarted: an instance is at one of its addresses (without ``replace``).
        InvalidArguments: a child comes without its parent (see `import_txn`).
        Conflict: the journal changed between the read and the write; nothing was written.
    """
    plan = await journal.read(lambda r: read_for_import(r, history))
    await journal.commit(import_txn(history, plan, replace=replace), durable=True)
