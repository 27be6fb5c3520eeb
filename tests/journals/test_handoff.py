"""The GIL handoff (storage/_handoff.py) leaves a commit that takes its
usual time alone, and still lets the GIL go to one that takes much longer.

A PostgreSQL batch is round trips and the server's fsync (8.6 ms at the
median under 100 workers): the look found no step after 5 ms in nearly
every batch and blocked the trio thread until it came back, which cost
the trio thread a fifth of its time. Real threads and real time: the
writer here sleeps with the GIL released, as psycopg waits on its socket.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import trio

from storage._handoff import Handoff

USUAL = 0.009  # s: longer than NUDGE_AFTER, as a PostgreSQL batch is


def _commits(handoff: Handoff, seconds: list[float]) -> Callable[[], None]:
    """The committer's side: timed commits of ``seconds`` each."""

    def commit() -> None:
        for each in seconds:
            handoff.committing(timed=True)
            time.sleep(each)  # the round trips, the GIL released
            handoff.step()
            handoff.handed_back()

    return commit


async def _run(handoff: Handoff, work: Callable[[], None]) -> None:
    """Run ``work`` in a thread while the handoff looks, until it is done."""
    done = threading.Event()

    def body() -> None:
        try:
            work()
        finally:
            done.set()

    handoff.start()
    try:
        thread = threading.Thread(target=body)
        thread.start()
        while not done.is_set():
            await trio.sleep(0.001)
        thread.join()
    finally:
        handoff.stop()


async def test_a_commit_of_its_usual_length_is_left_alone() -> None:
    handoff = Handoff(lambda: True)
    await _run(handoff, _commits(handoff, [USUAL] * 4))  # learns what a commit takes
    assert USUAL / 2 <= handoff.usual < 4 * USUAL
    learned = handoff.nudges
    await _run(handoff, _commits(handoff, [USUAL] * 20))
    # Each of these would have been let go for after 5 ms; a loaded
    # machine may stretch a few past twice the usual.
    assert handoff.nudges - learned <= 5


async def test_a_commit_far_longer_than_usual_is_let_go_for() -> None:
    handoff = Handoff(lambda: True)
    await _run(handoff, _commits(handoff, [USUAL] * 6))
    before = handoff.nudges
    await _run(handoff, _commits(handoff, [10 * USUAL]))  # stuck after its round trips, say
    assert handoff.nudges > before


async def test_untimed_steps_are_looked_at_as_before() -> None:
    # (LMDB's writer and the worker threads' reads: their steps are short,
    # and nothing is learned from them.)
    handoff = Handoff(lambda: True)

    def reads() -> None:
        for _ in range(5):
            handoff.committing()
            time.sleep(USUAL)
            handoff.handed_back()

    await _run(handoff, reads)
    assert handoff.usual == 0.0
    assert handoff.nudges >= 3
