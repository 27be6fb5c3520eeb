"""Across nodes, an operator's action and the runtime's promises: a cancel
answers within the takeover time, durable time is the database's, and a
send key is unique in the journal whatever node sent it.

Node programs (tests/multinode_node.py) share one schema, as in
tests/whole/test_multinode.py, whose harness these reuse. They talk to a real
server (see tests/pg.py) and run in real time, hence ``slow``; each is
bounded to well under a minute.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from storage import instance_id as iid
from tests.whole.test_multinode import (  # noqa: F401 - fixtures
    TAKEOVER,
    cluster,
    pg,
    wait_for,
)
from tests.whole.test_multinode_faults import stopped

# -- cancel on the last node standing -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["killed", "frozen"])
def test_a_cancel_on_the_last_node_answers_within_the_takeover_time(cluster, fault):
    # b is the only node left to take the kids over: its cancel must not
    # wait for a takeover that the cancel itself holds off. Its cancels are
    # asked while a is frozen (a, its owner, never reads them); "killed"
    # then kills a, "frozen" leaves it so until its lease lapses.
    a, b = cluster.start("a", "b")
    kids = [f"kid/k{i}" for i in range(3)]
    for address in kids:
        a.call("start", proc="kid", params=[address.split("/")[1]])
    wait_for(lambda: all(cluster.status(k) == "suspended" for k in kids), 5, "the kids")
    assert {"a"} == {cluster.owner(k) for k in kids}
    a.signal(signal.SIGSTOP)
    try:
        began = time.monotonic()
        asked = [b.post("cancel", address=address) for address in kids]
        if fault == "killed":
            wait_for(lambda: len(cluster.query("SELECT * FROM {s}.mail")) == 3, 5, "the asks")
            began = time.monotonic()
            a.signal(signal.SIGKILL)
        answers = [b.answer(ident, timeout=20) for ident in asked]
        took = time.monotonic() - began
    finally:
        a.signal(signal.SIGCONT)
    print(f"cancels on the last node, {fault}: answered {took:.3f} s after the fault")
    assert [True, True, True] == answers
    assert took < TAKEOVER
    assert {"cancelled"} == {cluster.status(k) for k in kids}
    assert {"b"} == {cluster.owner(k) for k in kids}


# -- one send per key, whatever node sends it -------------------------------------


@pytest.mark.slow
def test_keyed_sends_of_one_key_from_two_nodes_store_it_once(cluster):
    # Two clients send the same 1,000 keys, one through each node, at once:
    # each key's message is stored (and handled) once.
    a, b, c = cluster.start("a", "b", "c")
    c.call("start", proc="sink", params=["keys"])
    ids = list(range(1000))
    racing = [(n, n.post("keyed", address="sink/keys", ids=ids, tasks=4)) for n in (a, b)]
    for n, ident in racing:
        n.answer(ident, timeout=45)
    wait_for(lambda: len(cluster.handled()) == len(ids), 20, "every key's message handled")
    cluster.quiescent()
    handled = cluster.handled()
    doubled = sorted(int(i) for i, lines in handled.items() if len(lines) != 1)
    print(f"keys stored twice: {len(doubled)} of {len(ids)}")
    assert [] == doubled
    assert {str(i) for i in ids} == set(handled)
    rows = cluster.query("SELECT count(*) FROM {s}.cursors WHERE iid = %s", [iid("sink/keys")])
    assert [(len(ids),)] == rows  # one key each, kept for the incarnation's life


@pytest.mark.slow
def test_a_keyed_send_redone_after_its_node_froze_stores_nothing_the_retry_stored(cluster):
    # a freezes in the commit of a keyed send, holding the row lock; the
    # client retries through b, whose send goes through once a's lease
    # lapses and its session is ended; a wakes and runs its batch again on
    # a new session: the key is there by then, so it stores nothing.
    a, b, c = cluster.start("a", "b", "c")
    c.call("start", proc="sink", params=["r"])
    a.call("freeze_in_batch", address="sink/r")
    first = a.post("send", address="sink/r", payload={"id": 1}, key="request-1")
    wait_for(lambda: stopped(a), 5, "a to stop in its batch")
    try:
        b.call("send", address="sink/r", payload={"id": 1}, key="request-1", timeout=10)
        wait_for(lambda: "1" in cluster.handled(), 5, "the retry to be handled")
    finally:
        a.signal(signal.SIGCONT)
    assert a.answer(first, timeout=15) is None  # a's send returns normally
    cluster.quiescent()
    assert [("c", 1)] == [(node, attempt) for node, _, attempt in cluster.handled()["1"]]
    assert [(1,)] == cluster.query("SELECT count(*) FROM {s}.stream")  # emitted once


# -- durable time is the database's ------------------------------------------------

SLEEP = 6.0  # seconds the sleeper sleeps


@pytest.mark.slow
@pytest.mark.parametrize("skew", [30.0, -30.0], ids=["ahead", "behind"])
def test_a_timer_taken_over_by_a_node_with_a_skewed_clock_fires_on_time(cluster, skew):
    # a (whose clock is right) sets the timer and dies; b, whose wall clock
    # is ``skew`` seconds off, takes it over and fires it on the database's
    # clock: on time, not ``skew`` seconds early or late.
    (a,) = cluster.start("a", procs="sleeper")
    (b,) = cluster.start("b", procs="sleeper", env={"ACTORS_TEST_CLOCK_SKEW": str(skew)})
    before = time.time()
    a.call("start", proc="sleeper", params=["s"], input={"seconds": SLEEP})
    after = time.time()
    wait_for(lambda: cluster.status("sleeper/s") == "suspended", 5, "the sleeper to wait")
    a.signal(signal.SIGKILL)
    wait_for(lambda: cluster.owner("sleeper/s") == "b", TAKEOVER, "b to take the sleeper")
    wait_for(lambda: "s" in cluster.handled("T"), SLEEP + 3, "the timer to fire")
    (fired,) = [at for node, tag, _, _, _, at in cluster.side_timed() if tag == "T"]
    early, late = before + SLEEP - fired, fired - (after + SLEEP)
    print(f"timer on a node {skew:+.0f} s off: {early:+.3f} s early, {late:+.3f} s late")
    assert early < 0.1  # due on the database's clock (here, the host's), give or take its reading
    assert late < 1.0  # (its takeover and replay)
    (warned,) = re.findall(r"its wall clock is ([-+][0-9.]+) s off", b.log.read_text())
    assert abs(float(warned) - skew) < 0.1
