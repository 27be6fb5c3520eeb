"""Starts racing between node OS programs on one PostgreSQL schema.

tests/system/test_start_races.py races two systems in one process; here each node
is its own OS program (tests/nemesis_node.py), so a starter can be frozen
for real (SIGSTOP, past its one-second lease) between reading an address
and committing its start, while the other node starts, runs and completes
the same instances. Each round starts the same 200 addresses from both
nodes at once, freezes one of them for 2 s once it has acknowledged
about half of its starts, and then audits, from the nodes' record files
and the journal:

- every acknowledged message was handled, once (one idempotency key);
- every acknowledged start of an address in the round names the same
  incarnation, the one the journal holds (no second owner or incarnation);
- completed results are never overwritten.

The last test sends from one node to addresses that another node is still
starting, as soon as they exist: every acknowledged message must be read.

These talk to the shared server (see tests/pg.py) in a fresh schema and run
in real time, hence ``slow``; each is bounded to about 30 seconds.
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nemesis import NodeProgram
from tests.nemesis_audit import Records, Row, read_journal
from tests.pg import fresh_schema

if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
    pytest.importorskip("psycopg", reason="PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")

N = 200  # addresses per round
FREEZE = 2.0  # seconds a starter is stopped: past its lease (1 s), so the other takes over


class Pair:
    """Two node programs on one schema, and what they recorded."""

    def __init__(self, pg: tuple[str, str], workdir: Path) -> None:
        self.dsn, self.schema = pg
        self.records = Records(workdir)
        self.nodes = {n: NodeProgram(n, self.dsn, self.schema, workdir) for n in ("a", "b")}
        self.frozen_at = (0, 0)  # (ops the frozen node had done, its ops) in the last race

    def open(self) -> None:
        for node in self.nodes.values():
            node.launch()
        for node in self.nodes.values():
            assert node.wait_ready(30), f"node {node.name} did not open:\n{node.log_tail()}"

    def end(self) -> None:
        for node in self.nodes.values():
            node.kill()

    def batch(self, name: str, ops: list[dict[str, Any]], timeout: float = 25.0) -> None:
        node = self.nodes[name]
        reply = node.answer(node.post("batch", ops=ops), timeout)
        assert reply is not None, f"node {name} did not finish its batch:\n{node.log_tail()}"

    def race(
        self, ops_a: list[dict[str, Any]], ops_b: list[dict[str, Any]], *, freeze: str, tag: str
    ) -> float:
        """Post both batches at once; stop ``freeze`` for `FREEZE` seconds
        once it has recorded half of its ops; wait for both. Returns the
        seconds the round took."""
        began = time.monotonic()
        posted = {
            name: self.nodes[name].post("batch", ops=ops)
            for name, ops in (("a", ops_a), ("b", ops_b))
        }
        half = len(ops_a if freeze == "a" else ops_b) // 2
        deadline = time.monotonic() + 20
        while self.outcomes(freeze, tag) < half and time.monotonic() < deadline:
            time.sleep(0.005)
        victim = self.nodes[freeze]
        victim.signal(signal.SIGSTOP)
        self.frozen_at = (self.outcomes(freeze, tag), len(ops_a if freeze == "a" else ops_b))
        try:
            time.sleep(FREEZE)
        finally:
            victim.signal(signal.SIGCONT)
        for name, ident in posted.items():
            node = self.nodes[name]
            assert node.answer(ident, 25) is not None, (
                f"node {name} did not finish the round:\n{node.log_tail()}"
            )
        return time.monotonic() - began

    def outcomes(self, node: str, tag: str) -> int:
        """How many ops of round ``tag`` ``node`` has recorded an outcome of."""
        self.records.refresh()
        r = self.records
        return sum(1 for x in [*r.starts, *r.already, *r.errors] if (x.node, x.tag) == (node, tag))

    def journal(self) -> dict[str, Row]:
        return read_journal(self.dsn, self.schema)[0]

    def wait_completed(self, addresses: list[str], timeout: float = 20.0) -> dict[str, Any]:
        """Wait until every one of ``addresses`` completed; their results."""
        deadline = time.monotonic() + timeout
        while True:
            rows, mail = read_journal(self.dsn, self.schema)
            pending = [a for a in addresses if a not in rows or rows[a].status != "completed"]
            if not pending:
                return {a: rows[a].result for a in addresses}
            if time.monotonic() > deadline:
                shown = [(a, rows.get(a), mail.get(a)) for a in pending[:5]]
                raise AssertionError(f"{len(pending)} of {len(addresses)} not completed: {shown}")
            time.sleep(0.2)

    def audit(self, tag: str, addresses: list[str]) -> dict[str, Row]:
        """The round's invariants (module docstring); the journal's rows."""
        self.records.refresh()
        r = self.records
        errors = [e for e in r.errors if e.tag == tag]
        assert not errors, f"ops of round {tag} failed: {errors[:5]}"
        acked = [m.msg for m in r.acked.values() if m.tag == tag]
        began = time.monotonic()
        deadline = began + 15
        while True:
            r.refresh()
            handled = r.handled("W")
            missing = [m for m in acked if f"W:{m}" not in handled]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if missing:
            rows, mail = read_journal(self.dsn, self.schema)
            shown = [
                (r.acked[m], rows.get(r.acked[m].address), mail.get(r.acked[m].address))
                for m in missing[:5]
            ]
            raise AssertionError(f"{len(missing)} acknowledged, never handled: {shown}")
        took = time.monotonic() - began
        print(f"round {tag}: every acknowledged message handled {took:.2f} s after the round")
        for name in self.nodes:  # a second handling is recorded by then
            self.batch(name, [{"op": "quiescent", "tag": tag}])
        r.refresh()
        errors = [e for e in r.errors if e.tag == tag]
        assert not errors, f"a node was not quiescent after round {tag}: {errors[:5]}"
        handled = r.handled("W")
        twice = {m: handled[f"W:{m}"] for m in acked if len({s.key for s in handled[f"W:{m}"]}) > 1}
        assert not twice, f"handled under two keys: {list(twice.items())[:5]}"
        rows = self.journal()
        seen: dict[str, set[int]] = defaultdict(set)
        for s in r.starts:
            if s.tag == tag:
                seen[s.address].add(s.incarnation)
        split = {
            a: (sorted(i), rows.get(a))
            for a, i in seen.items()
            if len(i) > 1 or rows[a].incarnation != max(i)
        }
        assert not split, f"two incarnations of one address: {list(split.items())[:5]}"
        assert set(addresses) == set(rows) & set(addresses), "a start left no instance"
        return rows


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    made = Pair(fresh_schema(request), tmp_path)
    try:
        made.open()
        yield made
    finally:
        made.end()  # before the schema is dropped


def sws(ids: list[str], first_msg: int, tag: str) -> list[dict[str, Any]]:
    return [
        {"op": "sws", "proc": "pair", "id": i, "msg": first_msg + k, "tag": tag}
        for k, i in enumerate(ids)
    ]


def starts(ids: list[str], if_exists: str, tag: str, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"op": "start", "proc": "pair", "id": i, "if_exists": if_exists, "tag": tag, **extra}
        for i in ids
    ]


@pytest.mark.slow
def test_fresh_addresses_started_with_a_message_from_both_while_one_freezes(pair):
    ids = [f"f{i}" for i in range(N)]
    addresses = [f"pair/{i}" for i in ids]
    took = pair.race(sws(ids, 0, "r"), sws(ids, 10_000, "r"), freeze="a", tag="r")
    rows = pair.audit("r", addresses)
    assert {1} == {rows[a].incarnation for a in addresses}
    results = pair.wait_completed(addresses)
    # Both acknowledged messages reached the one instance.
    assert {f"pair/f{k}": [k, 10_000 + k] for k in range(N)} == results
    assert 2 * N == len(pair.records.acked)
    print(f"round of {N} x 2 signal_with_start, a frozen {FREEZE} s: {took:.1f} s")


@pytest.mark.slow
def test_fresh_addresses_started_with_if_exists_error_from_both_while_one_freezes(pair):
    ids = [f"e{i}" for i in range(N)]
    addresses = [f"pair/{i}" for i in ids]
    pair.race(starts(ids, "error", "r"), starts(ids, "error", "r"), freeze="b", tag="r")
    rows = pair.audit("r", addresses)
    made = defaultdict(list)
    for s in pair.records.starts:
        made[s.address].append(s.node)
    refused = defaultdict(list)
    for y in pair.records.already:
        refused[y.address].append(y.node)
    # Exactly one start of each address succeeded; the other was told it is taken.
    assert {a: 1 for a in addresses} == {a: len(made[a]) for a in addresses}
    assert {a: 1 for a in addresses} == {a: len(refused[a]) for a in addresses}
    assert {("suspended", 1)} == {(rows[a].status, rows[a].incarnation) for a in addresses}


@pytest.mark.slow
def test_completed_addresses_started_again_from_both_keep_their_results(pair):
    ids = [f"d{i}" for i in range(N)]
    addresses = [f"pair/{i}" for i in ids]
    pair.batch("a", [{**op, "input": {"count": 1}} for op in sws(ids, 0, "made")])
    before = pair.wait_completed(addresses)
    assert {f"pair/d{k}": [k] for k in range(N)} == before
    # Again from both, with and without if_exists="error", and with a message.
    ops_a = starts(ids, "error", "r")
    ops_b = starts(ids[: N // 2], "return", "r") + sws(ids[N // 2 :], 50_000, "r")
    pair.race(ops_a, ops_b, freeze="a", tag="r")
    rows = pair.audit("r", addresses)
    assert {("completed", 1)} == {(rows[a].status, rows[a].incarnation) for a in addresses}
    assert before == {a: rows[a].result for a in addresses}
    r = pair.records
    assert {(a, "completed") for a in addresses} == {(y.address, y.status) for y in r.already}
    again = {(s.address, s.incarnation, s.status) for s in r.starts if s.tag == "r"}
    assert {(f"pair/{i}", 1, "completed") for i in ids[: N // 2]} == again
    bounced = {(n.address, n.reason) for n in r.refused if n.tag == "r"}
    assert {(f"pair/{i}", "completed") for i in ids[N // 2 :]} == bounced


@pytest.mark.slow
def test_cancelled_addresses_restarted_from_both_while_one_freezes(pair):
    ids = [f"c{i}" for i in range(N)]
    addresses = [f"pair/{i}" for i in ids]
    pair.batch("a", starts(ids, "return", "made"))
    pair.batch("b", [{"op": "cancel", "address": a, "tag": "gone"} for a in addresses])
    pair.records.refresh()
    cancels = {(c.address, c.cancelled) for c in pair.records.cancels}
    assert {(a, True) for a in addresses} == cancels
    # The first half: a message from a, a start with if_exists="error" from
    # b; the second half: a message from each. One new incarnation each.
    half = N // 2
    ops_b = starts(ids[:half], "error", "r") + sws(ids[half:], 10_000 + half, "r")
    pair.race(sws(ids, 0, "r"), ops_b, freeze="b", tag="r")
    rows = pair.audit("r", addresses)
    assert {2} == {rows[a].incarnation for a in addresses}
    r = pair.records
    made_by_b = {s.address for s in r.starts if (s.node, s.how) == ("b", "start-error")}
    taken = {y.address: y.status for y in r.already if y.tag == "r"}
    assert set(addresses[:half]) == made_by_b | set(taken) and not made_by_b & set(taken)
    assert set(taken.values()) <= {"running", "suspended"}, taken
    results = pair.wait_completed(addresses[half:])
    assert {f"pair/c{k}": [k, 10_000 + k] for k in range(half, N)} == results
    # The first half holds a's message, read by the one incarnation.
    assert {(a, 2, "suspended") for a in addresses[:half]} == {
        (a, rows[a].incarnation, pair.journal()[a].status) for a in addresses[:half]
    }


@pytest.mark.slow
def test_sends_from_another_program_as_soon_as_the_instances_exist_are_read(pair):
    """Node a starts 200 addresses while node b sends to each as soon as it
    exists (a `NotDelivered` "unknown" is tried again): mail that lands
    while a is creating the instance must be read, not left in its mailbox
    while the instance waits."""
    ids = [f"x{i}" for i in range(N)]
    addresses = [f"pair/{i}" for i in ids]
    sends = [
        {"op": "until_sent", "address": a, "msg": k, "tag": "r", "deadline": 20}
        for k, a in enumerate(addresses)
    ]
    posted = pair.nodes["b"].post("batch", ops=sends)
    time.sleep(0.2)  # b is trying them all
    pair.batch("a", starts(ids, "return", "r", input={"count": 1}))
    assert pair.nodes["b"].answer(posted, 25) is not None, pair.nodes["b"].log_tail()
    pair.records.refresh()
    r = pair.records
    assert not r.errors and not r.refused, (r.errors[:5], r.refused[:5])
    assert set(range(N)) == set(r.acked)
    results = pair.wait_completed(addresses, timeout=15)
    assert {f"pair/x{k}": [k] for k in range(N)} == results
    pair.audit("r", addresses)
