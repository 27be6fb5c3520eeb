"""Histories you can take home: an instance's records in a portable file.

``python -m actors export ADDRESS`` writes one; `actors.testing.replay_history`
replays it against local code, and ``python -m actors import FILE`` puts it
into another journal, where a system resumes the instance. docs/histories.md
documents the format field by field; this module is its only reader and
writer.

The file is one JSON document (UTF-8): ``{"format": "actors-history",
"version": 1, "exported": ..., "address": ..., "instances": [...]}``, the
exported instance first, then its descendants (the children its runs name
that are still in the journal, depth first). Each instance carries its
record, every run's log the journal holds, unread mail, timers, stream,
consumer cursors, send keys, and the records of earlier incarnations a
retry kept. Nothing in it is the journal's own encoding: records and log
entries have their fields' full names, values are JSON, and a value JSON
cannot carry (a tuple, bytes, a datetime, a ``@serializable`` class, ...)
is an object with one ``"$tag"`` key (see `_history_values`). A reader refuses a
``version`` it does not know, with `HistoryFormatError`, rather than
misreading it, and a file that fails the checks `start` makes of the same
things (`_history_checks`: addresses, names, statuses, times, depth).

Importing writes every instance of the file in one transaction, on
condition that none exists at its address (or, with ``replace``, that each
one there is still what was read): all or nothing. Unread messages get new
ids in the new journal, in their order (the log never refers to an unread
one); an asked message is imported as sent (its asker is in the other
journal).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from storage import (
    NO_VALUE,
    InstanceRecord,
    InstanceRow,
    Journal,
    LogEntry,
    Reader,
    Txn,
    instance_id,
)

from .._kernel._log import children_named
from .._kernel._messages import StoredMessage
from .._kernel._protocol import history_key, key_cursor, key_of
from .._system._kept import KEPT_INCARNATIONS, Kept, read_kept
from ..errors import AlreadyStarted, HistoryFormatError, InvalidArguments, NotDelivered
from ._history_checks import (
    ENTRY_TYPES,
    MAX_DEPTH,
    RECORD_TYPES,
    as_tuple,
    check_document,
    check_types,
    deep_at,
    show,
    too_deep,
)
from ._history_values import bad, from_plain, to_plain

__all__ = [
    "FORMAT",
    "VERSION",
    "History",
    "ImportPlan",
    "InstanceHistory",
    "Message",
    "Timer",
    "dumps",
    "import_history",
    "import_txn",
    "loads",
    "read_for_import",
    "read_from",
    "read_history",
]

#: The ``format`` field of every history file.
FORMAT = "actors-history"
#: The version of the format this module writes, and the only one it reads.
VERSION = 1

_STREAM_PAGE = 1000


# -- the document --------------------------------------------------------------------


@attrs.frozen
class Message:
    """An unread message: its id in the journal it came from, signal name,
    payload, when it was sent, and the sender's traceparent (or None)."""

    id: int
    signal: str
    payload: Any
    sent: float | None
    trace: str | None = None


@attrs.frozen
class Timer:
    """A durable timer: effect ``effect`` of run ``run``, due at epoch ``due``."""

    run: int
    effect: int
    due: float


@attrs.frozen
class InstanceHistory:
    """Everything a history holds of one instance."""

    address: str
    process: str
    status: str
    record: InstanceRecord
    runs: dict[int, dict[int, LogEntry]]  # run -> effect -> entry
    mail: list[Message]
    timers: list[Timer]
    stream: list[Any]
    consumers: dict[str, int]
    send_keys: list[str]
    incarnations: list[Kept]  # earlier incarnations a retry kept, oldest first

    @property
    def log(self) -> dict[int, LogEntry]:
        """The current run's log."""
        return self.runs.get(self.record.run, {})


@attrs.frozen
class History:
    """A history file: the exported instance (``address``) first, then its descendants."""

    address: str
    exported: float
    source: str
    instances: list[InstanceHistory]
    version: int = VERSION


_RECORD_FIELDS = [f.name for f in attrs.fields(InstanceRecord) if f.name != "extra"]
_ENTRY_FIELDS = [f.name for f in attrs.fields(LogEntry) if f.name != "extra"]


def _record_doc(record: InstanceRecord) -> dict[str, Any]:
    doc = {name: to_plain(_stored_form(getattr(record, name))) for name in _RECORD_FIELDS}
    if record.extra:
        doc["extra"] = to_plain(dict(record.extra))
    return doc


def _stored_form(value: Any) -> Any:
    """A record field as the journal stores it: its read-only containers as a list or map."""
    if isinstance(value, Mapping):
        return dict(value)
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else value


def _entry_doc(seq: int, entry: LogEntry) -> dict[str, Any]:
    doc: dict[str, Any] = {"effect": seq}
    for name in _ENTRY_FIELDS:
        value = getattr(entry, name)
        if name == "hash":
            doc["hash"] = value.hex()
        elif name == "value":
            # Invariant: an outcome's value is written whatever it is, None
            # too (``"value": null``): only a started record has none, and
            # a reader tells the two apart by the key alone.
            if value is not NO_VALUE:
                doc["value"] = to_plain(value)
        elif value is not None:
            doc[name] = to_plain(value)
    if entry.extra:
        doc["extra"] = to_plain(entry.extra)
    return doc


def _instance_doc(one: InstanceHistory) -> dict[str, Any]:
    return {
        "address": one.address,
        "process": one.process,
        "status": one.status,
        "record": _record_doc(one.record),
        "runs": [
            {"run": run, "log": [_entry_doc(seq, e) for seq, e in sorted(log.items())]}
            for run, log in sorted(one.runs.items())
        ],
        "mail": [
            {
                "id": m.id,
                "signal": m.signal,
                "payload": to_plain(m.payload),
                "sent": m.sent,
                **({"trace": m.trace} if m.trace is not None else {}),
            }
            for m in one.mail
        ],
        "timers": [{"run": t.run, "effect": t.effect, "due": t.due} for t in one.timers],
        "stream": [to_plain(v) for v in one.stream],
        "consumers": dict(one.consumers),
        "send_keys": list(one.send_keys),
        "incarnations": [
            {
                "incarnation": k.incarnation,
                "process": k.process,
                "status": k.status,
                "replaced": k.replaced,
                "record": _record_doc(k.record),
            }
            for k in one.incarnations
        ],
    }


def dumps(history: History, *, ascii_only: bool = False) -> bytes:
    """The history as the bytes of its file (JSON, UTF-8, one line per instance field;
    with ``ascii_only``, every character past ASCII written as a JSON escape,
    for a terminal that would act on control or bidi characters).

    Raises:
        HistoryFormatError: a value nests deeper than a history may
            (`_history_checks.MAX_DEPTH`), which `loads` would refuse.
    """
    instances = []
    for one in history.instances:
        try:
            instances.append(_instance_doc(one))
        except RecursionError:
            raise _too_deep_to_export(one.address, "a value") from None
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "exported": history.exported,
        "source": history.source,
        "address": history.address,
        "instances": instances,
    }
    deep = too_deep(doc)
    if deep is not None:
        raise _too_deep_to_export(history.instances[0].address, deep)
    return (json.dumps(doc, indent=1, ensure_ascii=ascii_only, allow_nan=False) + "\n").encode()


def _too_deep_to_export(address: str, where: str) -> HistoryFormatError:
    return HistoryFormatError(
        f"cannot export the history of {address!r}: {where} nests more than {MAX_DEPTH} "
        "levels deep, more than a history file may hold; replay it where it is "
        "(actors.testing.replay_check), or fork the instance before that value"
    )


def loads(data: bytes) -> History:
    """The history a file's bytes hold.

    Raises:
        HistoryFormatError: the bytes are not a history (not JSON, another
            format, a field of the wrong shape), or one of a ``version``
            this code does not read (``error.version`` says which).
    """
    try:
        text = data.decode("utf-8")
        doc = json.loads(text)
    except ValueError as exc:  # (not UTF-8, not JSON, an int past Python's digit limit)
        raise HistoryFormatError(
            f"not a history file: it is not JSON ({exc}); a history is what "
            "'python -m actors export ADDRESS' writes"
        ) from None
    except RecursionError:  # (json recurses per level: found again without recursing)
        line, column = deep_at(text) or (0, 0)
        raise bad(
            f"line {line} column {column}",
            f"nests more than {MAX_DEPTH} levels deep, more than a history may",
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        raise HistoryFormatError(
            f"not a history file: its 'format' is {show(found)}, not {FORMAT!r}; a history is "
            "what 'python -m actors export ADDRESS' writes"
        )
    version = doc.get("version")
    if type(version) is not int or version != VERSION:
        newer = type(version) is int and version > VERSION
        hint = (
            "upgrade trio-actors to read it, or export it again with this version"
            if newer
            else "export it again with this version of trio-actors"
        )
        raise HistoryFormatError(
            f"the history is format version {show(version)}, and this version of trio-actors "
            f"reads version {VERSION} only; {hint}",
            version=version if type(version) is int else None,
        )
    deep = too_deep(doc)
    if deep is not None:
        raise bad(deep, f"nests more than {MAX_DEPTH} levels deep, more than a history may")
    history = _Doc(doc).history()
    check_document(doc)  # (on what `_Doc` found of the right shapes)
    return history


class _Doc:
    """Reading a parsed document, field by field, naming where a shape is wrong."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def history(self) -> History:
        doc = self.doc
        instances = self.field(doc, "instances", list, "history")
        if not instances:
            raise bad("history['instances']", "is empty")
        return History(
            address=self.field(doc, "address", str, "history"),
            exported=float(self.field(doc, "exported", (int, float), "history")),
            source=str(doc.get("source", "")),
            instances=[self.instance(one, f"instances[{i}]") for i, one in enumerate(instances)],
        )

    def field(self, doc: Any, name: str, types: Any, where: str, default: Any = NO_VALUE) -> Any:
        if not isinstance(doc, dict):
            raise bad(where, "is not an object")
        if name not in doc:
            if default is not NO_VALUE:
                return default
            raise bad(where, f"has no {name!r}")
        value = doc[name]
        if not isinstance(value, types) or (
            isinstance(value, bool) and bool not in as_tuple(types)
        ):
            raise bad(f"{where}[{name!r}]", f"is {show(value)}")
        return value

    def instance(self, doc: Any, at: str) -> InstanceHistory:
        f = self.field
        runs: dict[int, dict[int, LogEntry]] = {}
        for i, run in enumerate(f(doc, "runs", list, at)):
            where = f"{at}['runs'][{i}]"
            log = {}
            for j, entry in enumerate(f(run, "log", list, where)):
                seq, value = self.entry(entry, f"{where}['log'][{j}]")
                log[seq] = value
            runs[f(run, "run", int, where)] = log
        mail = [
            Message(
                f(m, "id", int, w),
                f(m, "signal", str, w),
                from_plain(m.get("payload"), f"{w}['payload']"),
                f(m, "sent", (int, float, type(None)), w, None),
                f(m, "trace", (str, type(None)), w, None),
            )
            for i, m in enumerate(f(doc, "mail", list, at))
            if (w := f"{at}['mail'][{i}]")
        ]
        timers = [
            Timer(f(t, "run", int, w), f(t, "effect", int, w), float(f(t, "due", (int, float), w)))
            for i, t in enumerate(f(doc, "timers", list, at))
            if (w := f"{at}['timers'][{i}]")
        ]
        consumers = f(doc, "consumers", dict, at, {})
        for name, position in consumers.items():
            if type(position) is not int or position < 0:
                raise bad(
                    f"{at}['consumers'][{show(name)}]", f"is {show(position)}, not a position"
                )
        keys = f(doc, "send_keys", list, at, [])
        if not all(isinstance(k, str) for k in keys):
            raise bad(f"{at}['send_keys']", "holds a key that is no str")
        kept = [
            Kept(
                f(k, "incarnation", int, w),
                f(k, "process", str, w),
                f(k, "status", str, w),
                self.record(f(k, "record", dict, w), f"{w}['record']"),
                float(f(k, "replaced", (int, float), w)),
            )
            for i, k in enumerate(f(doc, "incarnations", list, at, []))
            if (w := f"{at}['incarnations'][{i}]")
        ]
        return InstanceHistory(
            address=f(doc, "address", str, at),
            process=f(doc, "process", str, at),
            status=f(doc, "status", str, at),
            record=self.record(f(doc, "record", dict, at), f"{at}['record']"),
            runs=runs,
            mail=mail,
            timers=timers,
            stream=[
                from_plain(v, f"{at}['stream'][{i}]")
                for i, v in enumerate(f(doc, "stream", list, at, []))
            ],
            consumers=dict(consumers),
            send_keys=list(keys),
            incarnations=kept,
        )

    def record(self, doc: dict[str, Any], at: str) -> InstanceRecord:
        unknown = set(doc) - {*_RECORD_FIELDS, "extra"}
        if unknown:
            raise bad(at, f"has fields no record has: {sorted(unknown)}")
        fields = {name: from_plain(value, f"{at}[{name!r}]") for name, value in doc.items()}
        check_types(fields, RECORD_TYPES, at)
        try:
            record = InstanceRecord.new(**fields)
            # The journal's own check of every field's type, on the stored form.
            return InstanceRecord.from_stored(record.to_stored())
        except (TypeError, ValueError) as exc:
            raise bad(at, f"is not an instance record ({exc})") from None

    def entry(self, doc: Any, at: str) -> tuple[int, LogEntry]:
        seq = self.field(doc, "effect", int, at)
        unknown = set(doc) - {*_ENTRY_FIELDS, "effect", "extra"}
        if unknown:
            raise bad(at, f"has fields no log entry has: {sorted(unknown)}")
        fields = {
            name: from_plain(value, f"{at}[{name!r}]")
            for name, value in doc.items()
            if name not in ("effect", "hash")
        }
        check_types(fields, ENTRY_TYPES, at)
        try:
            fields["hash"] = bytes.fromhex(self.field(doc, "hash", str, at, ""))
            entry = LogEntry(**fields)
            return seq, LogEntry.from_stored(entry.to_stored())
        except (TypeError, ValueError) as exc:
            raise bad(at, f"is not a log entry ({exc})") from None


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
        if (parent := one.record.parent) is None or parent in addresses:
            continue
        if r.instance(instance_id(parent)) is not None:
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
