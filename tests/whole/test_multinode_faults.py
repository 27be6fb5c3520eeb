"""Several nodes under the faults of a real deployment: cascades across
nodes, a database outage, stale reads and a frozen committer.

Node programs (tests/multinode_node.py) share one schema, as in
tests/whole/test_multinode.py, whose harness these reuse. Each test injects its
fault on purpose and then audits what the nodes did: every acknowledged
send handled exactly once, never two owners of one instance at once, every
descendant of a cancelled instance cancelled, and every node still up.

These talk to a real server (see tests/pg.py) and run in real time, hence
``slow``; each is bounded to well under 30 seconds.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from urllib.parse import urlsplit

import pytest

from tests.pg_proxy import Proxy
from tests.whole.test_multinode import (  # noqa: F401 - fixtures
    Cluster,
    audit_exactly_once,
    cluster,
    pg,
    wait_for,
)

PASSIVE = {"ACTORS_TEST_PASSIVATE_AFTER": "0.2"}


def tree_addresses(root: str, depth: int, fanout: int) -> list[str]:
    """Every address of the tree process's instances under (and with) ``root``."""
    found = [root]
    if depth > 0:
        for i in range(fanout):
            found += tree_addresses(f"{root}/tree/{i}", depth - 1, fanout)
    return found


def statuses(cluster: Cluster, addresses: list[str]) -> dict[str, str | None]:
    return {address: cluster.status(address) for address in addresses}


def assert_up(*nodes) -> None:
    for n in nodes:
        assert n.proc.poll() is None, f"node {n.name} exited; its log:\n{n.log.read_text()}"
        assert "Traceback" not in n.log.read_text(), n.log.read_text()


@pytest.mark.slow
def test_cancelling_a_passivated_tree_from_another_node_reaches_every_descendant(cluster):
    a, b = cluster.start("a", "b", env=PASSIVE)
    a.call("start", proc="tree", params=["r"], input={"depth": 2, "fanout": 3})
    tree = tree_addresses("tree/r", 2, 3)  # 13 instances
    wait_for(lambda: set(statuses(cluster, tree).values()) == {"suspended"}, 10, "the tree")
    wait_for(lambda: a.call("loaded") == 0, 5, "the tree to passivate")
    assert {"a"} == {cluster.owner(address) for address in tree}
    assert b.call("cancel", address="tree/r") is True
    wait_for(lambda: set(statuses(cluster, tree).values()) == {"cancelled"}, 10, "the cascade")
    assert {address: "cancelled" for address in tree} == statuses(cluster, tree)
    assert_up(a, b)


@pytest.mark.slow
def test_cancelling_a_tree_taken_over_by_two_nodes_reaches_every_descendant(cluster):
    a, b, c = cluster.start("a", "b", "c", env=PASSIVE)
    a.call("start", proc="tree", params=["r"], input={"depth": 3, "fanout": 3})
    tree = tree_addresses("tree/r", 3, 3)  # 40 instances
    wait_for(lambda: set(statuses(cluster, tree).values()) == {"suspended"}, 15, "the tree")
    a.signal(signal.SIGKILL)
    wait_for(lambda: cluster.live_owned_by("a") == 0, 10, "the takeover")
    owners = {cluster.owner(address) for address in tree}
    assert owners <= {"b", "c"}
    wait_for(lambda: b.call("loaded") + c.call("loaded") == 0, 5, "the tree to passivate")
    assert c.call("cancel", address="tree/r") is True
    wait_for(lambda: set(statuses(cluster, tree).values()) == {"cancelled"}, 10, "the cascade")
    assert {address: "cancelled" for address in tree} == statuses(cluster, tree)
    assert_up(b, c)


def assert_emitted_once(cluster: Cluster, ids: set[str]) -> None:
    """Each of ``ids`` (handled messages) is on its sink's stream, once."""
    wait_for(lambda: ids <= set(cluster.emitted()), 5, "every handled message's emit")
    emitted = cluster.emitted()
    assert {} == {i: addresses for i, addresses in emitted.items() if len(addresses) != 1}


def assert_one_owner_at_a_time(cluster: Cluster) -> None:
    """No instance was handled by two nodes in overlapping spans of time: in
    time order, once another node handles an instance, the one before never
    handles it again."""
    by_address: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for node, _tag, _ident, key, _attempt, at in cluster.side_timed():
        by_address[key.rsplit("/", 4)[0]].append((at, node))
    for address, lines in by_address.items():
        prev = None
        runs = []
        for _, node in sorted(lines):
            if node != prev:
                runs.append(node)
                prev = node
        assert len(runs) == len(set(runs)), f"{address} went back and forth: {runs}"


@pytest.fixture
def proxied(cluster):
    """The cluster's nodes reach the server through a `Proxy` the test can stop."""
    parts = urlsplit(cluster.dsn)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    proxy.start()
    cluster.node_dsn = proxy.dsn(cluster.dsn)
    yield proxy
    proxy.stop()


@pytest.mark.slow
def test_a_database_outage_is_ridden_out_and_work_resumes_by_itself(cluster, proxied):
    a, b, c = cluster.start("a", "b", "c")
    sinks = [f"sink/{n.name}{i}" for n in (a, b, c) for i in range(2)]
    for address in sinks:
        {"a": a, "b": b, "c": c}[address[5]].call("start", proc="sink", params=[address[5:]])
    b.call("load", targets=sinks, first=0, count=80, tasks=2, pace=0.02)
    c.call("load", targets=sinks, first=100_000, count=80, tasks=2, pace=0.02)
    wait_for(lambda: len(cluster.handled()) >= 40, 10, "work before the outage")
    proxied.stop()
    down_at = time.monotonic()
    with pytest.raises(AssertionError, match=r"JournalUnavailable|CommitOutcomeUnknown"):
        a.call("send", address=sinks[0], payload={"id": "during"}, timeout=15)
    assert time.monotonic() - down_at < 10  # a caller learns of the outage, soon
    time.sleep(max(0.0, 3.0 - (time.monotonic() - down_at)))
    before = len(cluster.side())
    proxied.start()
    up_at = time.time()
    wait_for(lambda: len(cluster.side()) > before, 10, "the first message after the outage")
    first = min(at for *_, at in cluster.side_timed()[before:])
    print(f"first message handled {first - up_at:.3f} s after the database came back")
    wait_for(lambda: cluster.acks()[2] == {"b", "c"}, 25, "the senders to finish")
    acked, errors, _ = cluster.acks()
    assert all("JournalUnavailable" in e or "CommitOutcomeUnknown" in e for e in errors), errors
    wait_for(lambda: acked <= set(cluster.handled()), 10, "every acknowledged message handled")
    cluster.quiescent()  # a second handling is in the side file by now
    assert [] == audit_exactly_once(cluster, acked, cut_short=True)
    assert_emitted_once(cluster, acked)
    assert_one_owner_at_a_time(cluster)
    late = [i for i in acked if int(i) % 100_000 >= 70]  # sent after the outage
    assert late, "no send was acknowledged after the outage"
    for n in (a, b, c):  # every node is up and serves
        assert n.proc.poll() is None, n.log.read_text()
        n.call("send", address=sinks[0], payload={"id": f"after-{n.name}"})
    wait_for(lambda: {"after-a", "after-b", "after-c"} <= set(cluster.handled()), 5, "sends after")


@pytest.mark.slow
def test_a_node_resumed_after_a_freeze_reads_what_it_lost_from_the_journal(cluster):
    a, b, c = cluster.start("a", "b", "c")
    frozen = [f"sink/f{i}" for i in range(3)]
    for i, address in enumerate(frozen):
        a.call("start", proc="sink", params=[address[5:]])
        b.call("send", address=address, payload={"id": i})
    wait_for(lambda: len(cluster.handled()) == 3, 5, "a to handle the first messages")
    wait_for(lambda: ["suspended"] * 3 == [a.call("status", address=f) for f in frozen], 5, "idle")
    a.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: cluster.live_owned_by("a") == 0, 10, "a's instances to move")
        assert c.call("cancel", address=frozen[0]) is True
        b.call("send", address=frozen[1], payload={"id": 10})
        wait_for(lambda: "10" in cluster.handled(), 5, "the new owner to handle mail")
    finally:
        a.signal(signal.SIGCONT)
    # The first thing a answers after it wakes: not what it held in memory.
    assert "cancelled" == a.call("status", address=frozen[0])
    wait_for(
        lambda: (
            ["cancelled", "suspended", "suspended"] == [a.call("status", address=f) for f in frozen]
        ),
        5,
        "what a says of all three to be what the journal says",
    )
    wait_for(lambda: a.call("loaded") == 0, 5, "a to let go of what it lost")
    assert "cancelled" == a.call("status", address=frozen[0])
    a.call("send", address=frozen[2], payload={"id": 20})  # served by its owner
    wait_for(lambda: "20" in cluster.handled(), 5, "mail a sent after waking")
    cluster.quiescent()  # a second handling is in the side file by now
    handled = cluster.handled()
    assert {"0", "1", "2", "10", "20"} == set(handled)
    assert all(len(lines) == 1 for lines in handled.values()), handled
    assert {n for i in ("10", "20") for n, _, _ in handled[i]} <= {"b", "c"}
    assert_emitted_once(cluster, set(handled))
    assert_one_owner_at_a_time(cluster)
    assert_up(a, b, c)


def stopped(node) -> bool:
    """Whether the node's process is stopped (SIGSTOP)."""
    with open(f"/proc/{node.proc.pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.slow
def test_a_node_frozen_while_its_batch_holds_row_locks_stalls_nobody_past_its_lease(cluster):
    a, b, c = cluster.start("a", "b", "c")
    b.call("start", proc="sink", params=["x"])
    a.call("start", proc="sink", params=["a0"])
    c.call("send", address="sink/a0", payload={"id": 0})
    wait_for(lambda: "0" in cluster.handled(), 5, "a at work")
    a.call("freeze_in_batch", address="sink/x")
    pending = a.post("send", address="sink/x", payload={"id": 1})  # locks sink/x's row
    wait_for(lambda: stopped(a), 5, "a to stop in its batch")
    frozen_at = time.monotonic()
    try:
        c.call("send", address="sink/x", payload={"id": 2}, timeout=10)  # needs that row
        unblocked = time.monotonic() - frozen_at
        print(f"a send held up by a frozen node's row lock went through after {unblocked:.3f} s")
        assert 0.5 < unblocked < 3.0  # held up by the lock: for the lease (1 s), not the freeze
        wait_for(lambda: cluster.live_owned_by("a") == 0, 5, "a's instances to move")
        c.call("send", address="sink/a0", payload={"id": 3})
        wait_for(lambda: {"2", "3"} <= set(cluster.handled()), 5, "the others to carry on")
        time.sleep(max(0.0, 4.0 - (time.monotonic() - frozen_at)))  # a stays frozen a while
    finally:
        a.signal(signal.SIGCONT)
    assert a.answer(pending, timeout=15) is None  # a's send, redone on a new session
    wait_for(lambda: "1" in cluster.handled(), 5, "a's send to be handled")
    cluster.quiescent()  # a second handling is in the side file by now
    handled = cluster.handled()
    assert {"0", "1", "2", "3"} == set(handled)
    assert all(len(lines) == 1 for lines in handled.values()), handled
    assert [("b", "sink/x")] * 2 == [
        (handled[i][0][0], handled[i][0][1].rsplit("/", 4)[0]) for i in "12"
    ]
    assert_emitted_once(cluster, set(handled))
    assert_one_owner_at_a_time(cluster)
    assert_up(a, b, c)
