"""What one batch writes: its ops as a few array statements, its appends
numbered, and the preconditions (status, fences) followed through it.

The committer (see `storage._postgres._writer`) writes a batch of many
transactions with one statement per kind of op, each parameter an array
with one item per op (`_params`, `_columns`). `_Plan` orders those
statements so that the result is what running the ops one by one would
give, and numbers mail and stream appends from the counters the batch
takes up front. `_track_status` and `_track_owner` replay each op's effect
on its instance's status and (owner, epoch), so later transactions of the
batch are checked against what the earlier ones leave behind.

Nodes: `_watched` names the instances a batch must lock to check fences
and to notify other owners of new mail, `_check_fences` refuses a write to
an instance this node no longer owns at the epoch it claimed, and
`_notices` gathers the ``pg_notify`` calls that tell other nodes about
mail this batch appends to their instances.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import _journal as j
from .._journal import Txn
from ..errors import Conflict
from ._schema import _MAIL, _SET_COUNTER, _STREAM, _channel

_NOTICE_IDS = 200  # instance ids per NOTIFY payload: 33 bytes each, under the 8000-byte limit

Owned = dict[bytes, tuple[str | None, int] | None]  # iid -> (owner, epoch), None if gone


def _params(op: tuple[Any, ...]) -> list[Any]:
    """One op's row of parameters; an append's number is filled in later."""
    if op[0] in (j.APPEND_MESSAGE, j.APPEND_STREAM):
        return [op[1], None, op[2]]
    return list(op[1:])


# The tables whose rows (of its instance) each op touches.
_ALL_TABLES = ("instances", "log", "mail", "timers", "stream", "cursors", "counters")
_TABLES: dict[int, tuple[str, ...]] = {
    j.PUT_INSTANCE: ("instances",),
    j.SET_STATUS: ("instances",),
    j.DELETE_INSTANCE: _ALL_TABLES,
    j.PUT_LOG: ("log",),
    j.DROP_LOG: ("log",),
    j.APPEND_MESSAGE: ("mail",),
    j.TAKE_MESSAGE: ("mail",),  # numbers are taken up front
    j.ADD_TIMER: ("timers",),
    j.CANCEL_TIMER: ("timers",),
    j.APPEND_STREAM: ("stream",),
    j.SET_CURSOR: ("cursors",),
    j.DELETE_CURSOR: ("cursors",),
    _SET_COUNTER: ("counters",),
}

# How many leading parameters make the key of an upsert's row: in one
# statement, a later op on a key replaces an earlier one.
_KEY_SIZE = {
    j.PUT_INSTANCE: 1,
    j.SET_STATUS: 1,
    j.PUT_LOG: 3,
    j.ADD_TIMER: 3,
    j.SET_CURSOR: 2,
    _SET_COUNTER: 2,
}


def _columns(code: int, rows: list[list[Any]]) -> list[list[Any]]:
    """The array parameters of op ``code``'s statement for ``rows``, in order."""
    size = _KEY_SIZE.get(code)
    if size is not None and len(rows) > 1:
        # Sorted by key, so nodes writing the same rows lock them in one order.
        rows = [row for _, row in sorted({tuple(r[:size]): r for r in rows}.items())]
    return [list(column) for column in zip(*rows, strict=False)]


def _number(kind: int, count: int) -> int:
    """The ``count``-th number (from 1) a counter hands out: mail from 1, stream from 0."""
    return count if kind == _MAIL else count - 1


def _track_owner(owned: Owned, op: tuple[Any, ...], node: str | None) -> None:
    """Apply ``op``'s effect on its instance's (owner, epoch), as the database will:
    a new row belongs to the node that writes it, at epoch 0."""
    if op[0] == j.DELETE_INSTANCE:
        owned[op[1]] = None
    elif op[0] == j.PUT_INSTANCE and owned.get(op[1]) is None:
        owned[op[1]] = (node, 0)


def _track_status(status: dict[bytes, int | None], op: tuple[Any, ...]) -> None:
    """Apply ``op``'s effect on its instance's status, as the database will."""
    code = op[0]
    if code == j.PUT_INSTANCE:
        status[op[1]] = op[2]
    elif code == j.SET_STATUS:
        if status[op[1]] is not None:
            status[op[1]] = op[2]
    elif code == j.DELETE_INSTANCE:
        status[op[1]] = None


def _watched(txns: list[Txn], node: str | None) -> set[bytes]:
    """Instances whose owner a batch must lock and read: those fenced,
    and those it appends mail to (to notify their owner)."""
    if node is None:
        return set()
    found = {iid for t in txns for iid, _ in t.fences}
    for t in txns:
        found.update(op[1] for op in t.ops if op[0] == j.APPEND_MESSAGE)
    return found


def _check_fences(txn: Txn, owned: Owned, node: str | None) -> None:
    """Raise `Conflict` (reason "epoch") unless ``node`` still owns every
    instance ``txn`` fences, at the epoch it names."""
    if node is None:
        return
    for iid, epoch in txn.fences:
        found = owned.get(iid)
        if found != (node, epoch):
            now = (
                "it is gone" if found is None else f"node {found[0]!r} owns it at epoch {found[1]}"
            )
            raise Conflict(
                f"node {node!r} no longer owns instance {iid.hex()} at epoch {epoch} "
                f"({now}); another node took it over, so this write is refused",
                reason="epoch",
            )


def _notices(
    txns: list[Txn], outcomes: list[Any], owned: Owned, node: str | None, schema: str
) -> list[list[str]] | None:
    """The (channels, payloads) of a batch's pg_notify calls: the mail it
    appends for instances that other nodes own."""
    if node is None:
        return None
    by_owner: dict[str, set[str]] = {}
    for txn, outcome in zip(txns, outcomes, strict=True):
        if outcome is not None:
            continue
        for op in txn.ops:
            if op[0] == j.APPEND_MESSAGE:
                found = owned.get(op[1])
                if found is not None and found[0] is not None and found[0] != node:
                    by_owner.setdefault(found[0], set()).add(op[1].hex())
        for iid, owner in txn.wakes:
            if owner != node:
                by_owner.setdefault(owner, set()).add(iid.hex())
    channels: list[str] = []
    payloads: list[str] = []
    for owner, ids in by_owner.items():
        ordered = sorted(ids)
        for k in range(0, len(ordered), _NOTICE_IDS):
            channels.append(_channel(schema, owner))
            payloads.append(" ".join(ordered[k : k + _NOTICE_IDS]))
    return [channels, payloads] if channels else None


class _Plan:
    """Turns a batch's ops into a few array statements and numbers its appends.

    An op touches only its own instance's rows, in the tables `_TABLES`
    names, so two ops commute unless they share an instance and a table.
    Each op gets a stage: for each of its tables, the stage of the
    instance's last op there, plus one if that op was of another kind. So
    within a stage an instance's rows in a table see ops of one kind only,
    and running stage by stage, one statement per kind of op (a later op on
    a key replacing an earlier one, see `_columns`), gives what running the
    ops one by one in submission order would.
    """

    __slots__ = ("_cells", "_fresh", "_last", "_resets", "_stages", "appends", "wanted")

    def __init__(self) -> None:
        self._last: dict[tuple[bytes, str], tuple[int, int]] = {}  # (iid, table) -> (stage, code)
        self._stages: list[dict[int, list[Any]]] = []
        # Appends numbered from the stored counter: (iid, kind) -> how many.
        self.wanted: dict[tuple[bytes, int], int] = {}
        # Per transaction added, the param lists of its appends (index 1: the number).
        self.appends: list[list[list[Any]]] = []
        self._cells: dict[tuple[bytes, int], list[list[Any]]] = {}
        # After a delete in this batch, counters restart: (iid, kind) -> count so far.
        self._fresh: dict[tuple[bytes, int], int] = {}
        self._resets: dict[tuple[bytes, int], list[Any]] = {}  # its _SET_COUNTER params

    def _put(self, code: int, iid: bytes, params: Any) -> None:
        tables = _TABLES[code]
        stage = 0
        for table in tables:
            last = self._last.get((iid, table))
            if last is not None:
                stage = max(stage, last[0] + (last[1] != code))
        for table in tables:
            self._last[(iid, table)] = (stage, code)
        while len(self._stages) <= stage:
            self._stages.append({})
        self._stages[stage].setdefault(code, []).append(params)

    def add(self, ops: list[tuple[Any, ...]]) -> None:
        """Plan one transaction's ops."""
        appends: list[list[Any]] = []
        self.appends.append(appends)
        for op in ops:
            code, iid = op[0], op[1]
            params = _params(op)
            if code in (j.APPEND_MESSAGE, j.APPEND_STREAM):
                key = (iid, _MAIL if code == j.APPEND_MESSAGE else _STREAM)
                if key in self._fresh:
                    self._fresh[key] += 1
                    params[1] = _number(key[1], self._fresh[key])
                    self._resets[key][2] = self._fresh[key]
                else:
                    self.wanted[key] = self.wanted.get(key, 0) + 1
                    self._cells.setdefault(key, []).append(params)
                appends.append(params)
            self._put(code, iid, params)
            if code == j.DELETE_INSTANCE:
                for kind in (_MAIL, _STREAM):
                    # Invariant: the counter row after this batch holds the
                    # count since the last delete; a zero count writes nothing.
                    self._fresh[(iid, kind)] = 0
                    self._resets[(iid, kind)] = reset = [iid, kind, 0]
                    self._put(_SET_COUNTER, iid, reset)

    def allocation(self, keys: list[tuple[bytes, int]] | None = None) -> list[list[Any]]:
        """Parameters of the statement that takes ``wanted`` numbers (for ``keys``)."""
        keys = sorted(self.wanted if keys is None else keys)
        return [[k[0] for k in keys], [k[1] for k in keys], [self.wanted[k] for k in keys]]

    def number(self, before: dict[tuple[bytes, int], int]) -> None:
        """Number the appends that follow each counter's value ``before`` the batch."""
        for (iid, kind), cells in self._cells.items():
            first = before[(iid, kind)] + 1
            for k, params in enumerate(cells):
                params[1] = _number(kind, first + k)

    def groups(self) -> Iterator[tuple[int, list[Any]]]:
        for stage in self._stages:
            for code, rows in stage.items():
                if code == _SET_COUNTER:
                    rows = [r for r in rows if r[2]]
                if rows:
                    yield code, rows
