"""SIGKILL while processes join their children and mail waits for queued
instances: after each reopen every acknowledged join gives its child's
result and every queued instance reads the message sent to it, once."""

from __future__ import annotations

import pytest
import trio

import actors
from storage import LMDBJournal, instance_id
from tests import crash_child_join_mail as child
from tests.crash_kit import acked_ids, kill_after_acks

ROUNDS = 5


@pytest.mark.slow  # real child processes killed with SIGKILL: ~10 s
async def test_joins_and_queued_mail_survive_sigkills(tmp_path):
    path, acks = tmp_path / "journal", tmp_path / "acks"
    for round in range(ROUNDS):
        first = max(acked_ids(acks), default=-1) + 1
        kill_after_acks(
            [child.__file__, str(path), str(acks), str(first)],
            stderr_path=tmp_path / f"stderr{round}",
            acked=lambda: len(acked_ids(acks)),
            min_acks=first + 20,
            start_timeout=60,
            delay=0.05 * (round + 1),
            label=f"round {round}",
        )
    acked = acked_ids(acks)
    assert len(acked) >= 20 * ROUNDS
    async with actors.open_system(
        LMDBJournal(path), processes=child.PROCESSES, queues=[child.QUEUE]
    ) as system:
        # A bound for a hang, not a timing claim: on a loaded machine the
        # queue of one slot admits the boxes one by one, with synced commits.
        with trio.fail_after(600):
            for i in sorted(acked):
                assert 2 * i == await system.get(f"mom/{i}").result()
                assert {"n": i} == await system.get(f"box/{i}").result()
        with system.journal.reader() as r:  # each box took its one message
            for i in acked:
                assert [] == r.mailbox(instance_id(f"box/{i}"))
