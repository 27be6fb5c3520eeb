"""A dropped message is never taken, on any node (#45): a drop made on a
node that does not own the instance is refused (the owner holds its mail
in memory and would take the message), while the same drop on the owner
goes through and the owner never takes it.

Two node programs (tests/multinode_node.py) on one PostgreSQL schema, as
in tests/whole/test_multinode.py, whose harness this reuses; real time, hence
``slow``."""

from __future__ import annotations

import pytest

from tests.whole.test_multinode import (  # noqa: F401 - fixtures
    Cluster,
    cluster,
    pg,
    wait_for,
)

ROUNDS = 4


@pytest.mark.slow
def test_a_drop_is_honoured_on_the_owner_and_refused_elsewhere(cluster: Cluster) -> None:
    a, b = cluster.start("a", "b", procs="gate")
    addresses = [f"gate/g{i}" for i in range(ROUNDS)]
    for i, address in enumerate(addresses):
        a.call("start", proc="gate", params=[f"g{i}"])
        wait_for(lambda address=address: cluster.status(address) == "suspended", 10, address)
        for n in (1, 2):
            a.call("send", address=address, payload={"id": f"{i}-{n}"})
        assert "a" == cluster.owner(address)
        first, second = b.call("mail", address=address)
        # On b, which does not own it: refused, nothing written.
        got = b.call("drop", address=address, message_id=first[0])
        assert isinstance(got, dict) and "another node runs it" in got["refused"], got
        assert [] == b.call("dropped", address=address)
        # On a, which runs it (in memory): dropped, though it is not idle long.
        assert [second[0], {"id": f"{i}-2"}] == a.call(
            "drop", address=address, message_id=second[0]
        )
        assert [{"id": f"{i}-2"}] == b.call("dropped", address=address)
        b.call("send", address=address, signal="open")
    cluster.quiescent()
    wait_for(lambda: len(cluster.handled("G")) >= ROUNDS, 10, "the gates to handle their work")
    cluster.quiescent()
    # The message b could not drop is handled, once; the one a dropped never is.
    handled = cluster.handled("G")
    assert {f"{i}-1" for i in range(ROUNDS)} == set(handled), handled
    assert all(1 == len(lines) for lines in handled.values()), handled
    for address in addresses:
        assert [] == a.call("mail", address=address)
