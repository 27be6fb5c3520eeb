"""The fault run of tests/nemesis.py: one short seed with a real server
restart, on a private PostgreSQL server (tests/pg_cluster.py); and its
audit (tests/nemesis_audit.py) on made-up records, so that a run that
finds nothing is known to be able to find something.

The last test keeps what the nemesis found (seeds 4 and 5): work in flight
when a node took its lease back was given up and never finished (a step's
lease check let go of an instance nobody else had taken); now the node
claims it again and finishes it.

They need root (or the ``postgres`` OS user) and the PostgreSQL 15
binaries, to make and restart a server of their own: the shared test
server is never restarted. They run in real time, hence ``slow``: the
seed about 20 s, each pinned case about 13 s.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.nemesis import NodeProgram, Options, plan_faults, run_seed
from tests.nemesis_audit import Audit, Records, Row, read_journal
from tests.pg_cluster import PgCluster, available, node_sessions

SEED = 1  # its 14-second plan: a terminate, one server restart, a SIGSTOP


def skip_without_a_private_server() -> None:
    if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
        pytest.skip("PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")
    why = available()
    if why is not None:
        pytest.skip(f"no private PostgreSQL server here: {why}")


@pytest.mark.slow
def test_a_short_seed_with_a_server_restart_keeps_every_promise():
    skip_without_a_private_server()
    plan = plan_faults(SEED, 14.0, restart_server=True)
    assert 1 == sum(f.kind.endswith("server") for f in plan), plan
    with PgCluster() as server:
        figures = run_seed(SEED, server, Options(duration=14.0, restart_server=True, settle=30.0))
    print(figures.summary())
    evidence = "\n".join(figures.evidence) + f"\nrecords and node logs: {figures.workdir}"
    assert 1 == figures.server_restarts
    assert figures.messages > 100 and figures.starts > 100, figures
    assert (0, 0, 0, 0) == (
        figures.lost,
        figures.duplicated,
        figures.overwritten,
        figures.node_deaths,
    ), evidence
    assert (0, 0, 0) == (figures.misreplied, figures.failed, figures.refused), evidence
    assert not figures.broken, evidence


def write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def test_the_audit_finds_each_kind_of_broken_promise(tmp_path):
    write(
        tmp_path / "acks",
        [
            "S 1 sink/s0 send a -",
            "S 2 sink/s0 ksend b -",
            "S 3 sink/s1 ask c -",
            "A 3 sink/s1 4 c -",  # the reply to another ask
            "T job/j1 1 running start-return a r1",
            "T job/j1 2 running start-return b r1",
            "T job/j2 1 running start-return a r2",  # never finished
            "T pair/p1 1 running sws a pr",
            "T pair/p1 1 running sws b pr",  # one incarnation
            "N 9 sink/s2 failed send a -",  # a sink never ends
        ],
    )
    write(
        tmp_path / "side",
        [
            "a W 1 sink/s0/1/0/W/1 1 1.0 -",
            "b W 1 sink/s0/1/0/W/1 2 2.0 -",  # the same key again: at least once, fine
            "a W 2 sink/s0/1/0/W/2 1 3.0 -",
            "c W 2 sink/s0/1/1/W/1 1 4.0 -",  # a second key: taken twice
            "a J j1 job/j1/1/0/J/1 1 5.0 -",
            "a R job/j1 job/j1/1/0/R/1 1 6.0 v1",
        ],
    )
    records = Records(tmp_path)
    records.refresh()
    rows = {
        "job/j1": Row("completed", 2, "v2"),
        "job/j2": Row("suspended", 1, None),
        "sink/s0": Row("suspended", 1, None),
        "sink/s1": Row("suspended", 1, None),
        "sink/s2": Row("failed", 1, None),
        "pair/p1": Row("suspended", 1, None),
    }
    audit = Audit(records, rows, {"sink/s1": [["work", {"msg": 3}, 0.0]]})
    assert ["message 3", "start of job/j2"] == [x.split(" (")[0] for x in audit.lost]
    assert ["W:2"] == [x.split(" ")[0] for x in audit.duplicated]
    assert ["job/j1", "job/j1"] == [x.split(" ")[0] for x in audit.overwritten]
    assert 1 == len(audit.misreplied) and 1 == len(audit.failed) and 1 == len(audit.refused)
    assert "its mailbox holds it unread" in audit.lost[0]
    assert audit.broken


def end_lease_session(server: PgCluster, node: NodeProgram) -> None:
    """``pg_terminate_backend`` of the node's lease session (as a proxy or a
    firewall cutting that one connection would)."""
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        for pid, app in node_sessions(server.dsn(), node.pid or 0, server.port):
            if app.startswith("actors lease"):
                conn.execute("SELECT pg_terminate_backend(%s)", [pid])


def wait_completed(server: PgCluster, addresses: list[str], timeout: float) -> list[str]:
    """Wait for every one of ``addresses`` to complete; those that did not."""
    deadline = time.monotonic() + timeout
    while True:
        rows = read_journal(server.dsn(), "stranded")[0]
        pending = [a for a in addresses if rows[a].status != "completed"]
        if not pending or time.monotonic() > deadline:
            return [f"{a}: {rows[a]}" for a in pending]
        time.sleep(0.25)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["freeze", "lease", "lease-during-starts"])
def test_work_in_flight_when_a_node_takes_its_lease_back_finishes(tmp_path, fault):
    """One node loses its lease and takes it back before any other node could
    take its instances over: frozen past it (SIGSTOP), or its lease session
    ended. What it was running is still its own and must finish: a queued
    job in its 3-second step (it also holds its queue's slot), or 100 jobs
    whose starts were acknowledged while it happened."""
    skip_without_a_private_server()
    with PgCluster() as server:
        node = NodeProgram("a", server.dsn(), "stranded", tmp_path, {"NEMESIS_LEASE": "1.0"})
        try:
            node.launch()
            assert node.wait_ready(30), node.log_tail()
            if fault == "lease-during-starts":
                records = Records(tmp_path)
                ops = [{"op": "start", "proc": "job", "id": f"j{i}"} for i in range(100)]
                posted = node.post("batch", ops=ops)
                while len(records.starts) < 30 and node.alive():
                    time.sleep(0.002)
                    records.refresh()
                end_lease_session(server, node)
                assert node.answer(posted, 30) is not None, node.log_tail()
                records.refresh()
                assert not records.errors, records.errors[:3]
                addresses = sorted({s.address for s in records.starts})
                assert 100 == len(addresses)
            else:
                ops = [{"op": "start", "proc": "qjob", "id": "slow", "input": {"seconds": 3.0}}]
                assert node.answer(node.post("batch", ops=ops), 20) is not None, node.log_tail()
                time.sleep(0.5)  # in its step
                addresses = ["qjob/slow"]
                assert "running" == read_journal(server.dsn(), "stranded")[0][addresses[0]].status
                if fault == "freeze":
                    node.signal(signal.SIGSTOP)
                    time.sleep(2.0)  # twice its lease
                    node.signal(signal.SIGCONT)
                else:
                    end_lease_session(server, node)
            stranded = wait_completed(server, addresses, timeout=10)  # each needs 3 s at most
            assert not stranded, (
                f"{len(stranded)} never finished: {stranded[:3]}\n{node.log_tail()}"
            )
        finally:
            node.kill()
