"""What the nodes of a fault run recorded, read back, and the audit of it.

tests/nemesis_node.py appends one line per outcome to a record file
(``acks``) and one per run of a step to a side file (``side``); its
docstring gives the format. `Records` reads both as they grow, into one
attrs record per line; `read_journal` reads what the journal holds at the
end; `Audit` checks the promises (tests/nemesis.py's docstring lists them)
and keeps the evidence of each one broken.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs

# -- what the nodes recorded ----------------------------------------------------------
# One class per kind of line of the record file (tests/nemesis_node.py says
# what each means); `Records` reads them as the file grows.


@attrs.frozen
class Message:
    """``S``: an acknowledged message."""

    msg: int
    address: str
    how: str  # send, ksend, ask, sws, until
    node: str
    tag: str


@attrs.frozen
class Start:
    """``T``: an acknowledged start (or signal_with_start)."""

    address: str
    incarnation: int
    status: str
    how: str
    node: str
    tag: str


@attrs.frozen
class Already:
    """``Y``: a start with ``if_exists="error"`` told the address is taken."""

    address: str
    status: str
    how: str
    node: str
    tag: str


@attrs.frozen
class Refused:
    """``N``: a message refused with `NotDelivered`."""

    msg: int
    address: str
    reason: str
    how: str
    node: str
    tag: str


@attrs.frozen
class Cancel:
    """``C``: a cancel's answer."""

    address: str
    cancelled: bool
    node: str
    tag: str


@attrs.frozen
class Reply:
    """``A``: the reply an ask got."""

    msg: int
    address: str
    reply: str
    node: str
    tag: str


@attrs.frozen
class Failure:
    """``E``: any other outcome of an op (an error)."""

    how: str
    address: str
    msg: str
    node: str
    tag: str
    error: str


@attrs.frozen
class Step:
    """A line of the side file: one run of a step."""

    node: str
    tag: str  # W (a message), J and R (a job), Q (a queued job), Z (a timer)
    ident: str
    key: str
    attempt: int
    at: float
    value: str


@attrs.frozen
class Row:
    """An instance as the journal holds it (for the evidence: which node
    owns it, at which epoch, and when its record was last written)."""

    status: str
    incarnation: int
    result: Any
    owner: str | None = None
    epoch: int | None = None
    updated: float | None = None


def _parse(line: str) -> tuple[str, object] | None:
    f = line.split(" ")
    kind = f[0]
    if kind == "S":
        return kind, Message(int(f[1]), *f[2:6])
    if kind == "T":
        return kind, Start(f[1], int(f[2]), *f[3:7])
    if kind == "Y":
        return kind, Already(*f[1:6])
    if kind == "N":
        return kind, Refused(int(f[1]), *f[2:7])
    if kind == "C":
        return kind, Cancel(f[1], f[2] == "True", *f[3:5])
    if kind == "A":
        return kind, Reply(int(f[1]), *f[2:6])
    if kind == "E":
        return kind, Failure(f[1], f[2], f[3], f[4], f[5], " ".join(f[6:]))
    return None  # I: an intent, for the eye


class Records:
    """The record and side files of a run, read as they grow."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._offsets = {"acks": 0, "side": 0}
        self._partial = {"acks": "", "side": ""}
        self._lock = threading.Lock()  # the workload and the main thread both read
        self.acked: dict[int, Message] = {}
        self.starts: list[Start] = []
        self.already: list[Already] = []
        self.refused: list[Refused] = []
        self.cancels: list[Cancel] = []
        self.replies: list[Reply] = []
        self.errors: list[Failure] = []
        self.side: list[Step] = []

    def _new_lines(self, name: str) -> list[str]:
        path = self.workdir / name
        if not path.exists():
            return []
        with open(path, "rb") as file:
            file.seek(self._offsets[name])
            data = file.read()
        self._offsets[name] += len(data)
        text = self._partial[name] + data.decode(errors="replace")
        *lines, self._partial[name] = text.split("\n")
        return lines

    def refresh(self) -> None:
        """Read what was appended since the last call."""
        with self._lock:
            lists: dict[str, list[Any]] = {
                "T": self.starts,
                "Y": self.already,
                "N": self.refused,
                "C": self.cancels,
                "A": self.replies,
                "E": self.errors,
            }
            for line in self._new_lines("acks"):
                parsed = _parse(line)
                if parsed is None:
                    continue
                kind, record = parsed
                if isinstance(record, Message):
                    self.acked[record.msg] = record
                else:
                    lists[kind].append(record)
            for line in self._new_lines("side"):
                node, tag, ident, key, attempt, at, value = line.split(" ")
                self.side.append(Step(node, tag, ident, key, int(attempt), float(at), value))

    def handled(self, *tags: str) -> dict[str, list[Step]]:
        """``"<tag>:<ident>"`` -> the runs of those tags' steps, in file order."""
        found: dict[str, list[Step]] = defaultdict(list)
        for step in self.side:
            if step.tag in tags:
                found[f"{step.tag}:{step.ident}"].append(step)
        return found

    def finished(self) -> set[str]:
        """Addresses of jobs, queued jobs and sleepers whose last step ran."""
        last = {"R": "{}", "Q": "qjob/{}", "Z": "sleeper/{}"}
        return {last[s.tag].format(s.ident) for s in self.side if s.tag in last}


def read_journal(dsn: str, schema: str) -> tuple[dict[str, Row], dict[str, list[Any]]]:
    """``({address: Row}, {address: unread mail})`` as the journal holds
    them now, read through a read-only journal."""
    # Imported here, not above: `python -m tests.nemesis --tree DIR` puts
    # DIR first on sys.path after this module is loaded, and reads with its storage.
    import psycopg
    import trio

    from storage import PostgresJournal

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        owners = {
            address: (owner, epoch)
            for address, owner, epoch in conn.execute(
                f'SELECT address, owner, epoch FROM "{schema}".instances'
            )
        }

    def read_rows(r: Any) -> tuple[dict[str, Row], dict[str, list[Any]]]:
        rows: dict[str, Row] = {}
        addresses: dict[bytes, str] = {}
        corrupt: list[Any] = []
        for row in r.instances(corrupt=corrupt):
            owner, epoch = owners.get(row.address, (None, None))
            rows[row.address] = Row(
                row.status,
                row.record.incarnation,
                row.record.result,
                owner,
                epoch,
                row.record.updated,
            )
            addresses[row.iid] = row.address
        for bad in corrupt:
            rows[str(bad.address)] = Row("corrupt", 0, None)
        with_mail = [iid for iid in r.instances_with_mail() if iid in addresses]
        boxes = r.mailboxes(with_mail).items()
        return rows, {addresses[iid]: [m for _, m in box] for iid, box in boxes if box}

    async def read() -> tuple[dict[str, Row], dict[str, list[Any]]]:
        async with PostgresJournal(dsn, schema=schema, readonly=True, pool_size=1) as journal:
            return await journal.read(read_rows)

    return trio.run(read)


# -- the audit --------------------------------------------------------------------------

ENDING = ("job", "qjob", "sleeper")  # processes that complete on their own


class Audit:
    """What broke, each with its evidence."""

    KINDS = ("lost", "duplicated", "overwritten", "misreplied", "failed", "refused")

    def __init__(self, records: Records, rows: dict[str, Row], mail: dict[str, list[Any]]) -> None:
        self.records, self.rows, self.mail = records, rows, mail
        self._read_at = time.time()  # about when the rows were read
        self.lost: list[str] = []
        self.duplicated: list[str] = []
        self.overwritten: list[str] = []
        self.misreplied: list[str] = []
        self.failed: list[str] = []
        self.refused: list[str] = []
        self._messages()
        self._starts()
        self._results()
        self._rest()

    def _now(self, address: str) -> str:
        """How the journal holds ``address`` at the end of the run."""
        row = self.rows.get(address)
        if row is None:
            return "no instance"
        age = "" if row.updated is None else f", written {self._read_at - row.updated:.1f} s before"
        return (
            f"{row.status}, incarnation {row.incarnation}, owner {row.owner} at epoch "
            f"{row.epoch}{age}"
        )

    def _where(self, message: Message) -> str:
        box = self.mail.get(message.address, [])
        unread = any(f"'msg': {message.msg}}}" in repr(m) for m in box)
        held = "its mailbox holds it unread" if unread else "it is not in its mailbox"
        return f"{self._now(message.address)}; {held}"

    def _messages(self) -> None:
        handled = self.records.handled("W")
        for m in sorted(self.records.acked.values(), key=lambda m: m.msg):
            if f"W:{m.msg}" not in handled:
                self.lost.append(
                    f"message {m.msg} ({m.how} by {m.node} to {m.address}, {m.tag}): never "
                    f"handled; the instance is {self._where(m)}"
                )
        # One key per message, job, queued job, timer: a second key is a second take.
        for ident, steps in sorted(self.records.handled("W", "J", "Q", "Z").items()):
            keys = {s.key for s in steps}
            if len(keys) > 1:
                shown = [(s.node, s.key, s.attempt) for s in steps]
                self.duplicated.append(f"{ident} handled under {len(keys)} keys: {shown}")

    def _starts(self) -> None:
        finished = self.records.finished()
        incarnations: dict[tuple[str, str], set[int]] = defaultdict(set)
        for s in self.records.starts:
            ending = s.address.split("/")[0] in ENDING
            if ending and s.address not in finished:
                self.lost.append(
                    f"start of {s.address} (incarnation {s.incarnation}, {s.how} by {s.node}, "
                    f"{s.tag}): never finished; now {self._now(s.address)}"
                )
            # One incarnation per job (never cancelled), and per pair in one round (a race).
            incarnations[(s.address, "all" if ending else s.tag)].add(s.incarnation)
        for (address, round_), seen in sorted(incarnations.items()):
            final = self.rows.get(address)
            if len(seen) > 1 or (final is not None and final.incarnation < max(seen)):
                self.overwritten.append(
                    f"{address} ({round_}): starts acknowledged incarnations {sorted(seen)}; "
                    f"the journal has {final}"
                )

    def _results(self) -> None:
        results: dict[str, set[str]] = defaultdict(set)
        for step in self.records.side:
            if step.tag == "R":
                results[step.ident].add(step.value)
        for address, values in sorted(results.items()):
            final = self.rows.get(address)
            if (
                len(values) > 1
                or final is None
                or (final.status, final.result) != ("completed", next(iter(values)))
            ):
                self.overwritten.append(
                    f"{address} completed with {sorted(values)}; the journal has {final}"
                )
        for a in self.records.already:
            final = self.rows.get(a.address)
            if a.status == "completed" and (final is None or final.status != "completed"):
                self.overwritten.append(
                    f"{a.address} was completed ({a.how} by {a.node}); now {final}"
                )

    def _rest(self) -> None:
        for r in self.records.replies:
            if r.reply != str(r.msg):
                self.misreplied.append(f"ask {r.msg} to {r.address} from {r.node} got {r.reply!r}")
        for address, row in sorted(self.rows.items()):
            if row.status in ("failed", "corrupt", "compensation_stuck"):
                self.failed.append(f"{address} is {row.status}")
        for n in self.records.refused:
            if n.address.startswith("sink/"):  # sinks never end
                self.refused.append(
                    f"{n.how} {n.msg} by {n.node} to {n.address}: NotDelivered {n.reason}"
                )

    @property
    def broken(self) -> bool:
        return any(getattr(self, kind) for kind in self.KINDS)

    def evidence(self, limit: int = 8) -> list[str]:
        out = []
        for kind in self.KINDS:
            items = getattr(self, kind)
            out += [f"  {kind}: {item}" for item in items[:limit]]
            if len(items) > limit:
                out.append(f"  {kind}: ... {len(items) - limit} more")
        return out
