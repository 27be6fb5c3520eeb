"""A history file's bytes: its document (`_history_document`) written as
JSON (`dumps`) and read back, checked (`loads`); `_history` says what the
format holds, docs/histories.md field by field."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from storage import (
    NO_VALUE,
    InstanceRecord,
    LogEntry,
)

from .._system._kept import Kept
from ..errors import HistoryFormatError
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
from ._history_document import (
    FORMAT,
    VERSION,
    History,
    InstanceHistory,
    Message,
    Timer,
)
from ._history_values import bad, from_plain, to_plain

__all__ = ["dumps", "loads"]

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
