"""`actors.testing.wait_quiescent`: a test waits until the system has nothing
left to do, instead of sleeping or polling the runtime's private state."""

from __future__ import annotations

import time

import pytest
import trio

from actors import Context, Signal, process
from actors.testing import open_test_system, wait_quiescent
from storage import LMDBJournal, MemoryJournal, instance_id

go = Signal("go")
handled: list[object] = []


def slow_double(id: str, n: int) -> int:
    time.sleep(0.05)  # real time, in a worker thread: autojump is held meanwhile
    handled.append((id, 2 * n))  # a side effect: once per message, replayed never
    return 2 * n


@process("worker/:id")
async def worker(ctx: Context, id: str) -> None:
    while True:
        _, n = await ctx.receive(go)
        await ctx.step(slow_double, id, n)


@process("napper/:id")
async def napper(ctx: Context, id: str) -> str:
    await ctx.sleep(86400)
    return "rested"


def _journal_view(system, address: str) -> tuple[str, list[object]]:
    iid = instance_id(address)
    with system.journal.reader() as r:
        return r.instance(iid).status, [m[1] for _, m in r.mailbox(iid)]


@pytest.fixture(params=["lmdb", "memory"])
def journal(request, tmp_path):
    return LMDBJournal(tmp_path / "journal") if request.param == "lmdb" else MemoryJournal()


async def test_after_it_every_message_is_handled_once_and_durable(journal, autojump_clock):
    handled.clear()
    async with open_test_system([worker], journal=journal) as system:
        await system.start(worker, "w")
        for n in range(5):
            await system.send("worker/w", go, n)
        await wait_quiescent(system)
        # Taken, stepped (in threads, on real time) and recorded: all of it
        # is done, so a second handling would be here already.
        assert [("w", 2 * n) for n in range(5)] == handled
        assert "suspended" == system.get("worker/w").status
        # The suspended instance's last take was deferred: it is durable too.
        assert ("suspended", []) == _journal_view(system, "worker/w")
        await wait_quiescent(system)  # already quiescent: returns at once
        assert [("w", 2 * n) for n in range(5)] == handled


async def test_an_instance_waiting_on_a_timer_is_quiescent_and_time_stands_still(
    journal, autojump_clock
):
    async with open_test_system([napper], journal=journal) as system:
        t0 = trio.current_time()
        handle = await system.start(napper, "n")
        await wait_quiescent(system)
        assert "suspended" == handle.status
        assert trio.current_time() - t0 < 1  # the day-long timer did not fire
        assert "rested" == await handle.result()
        assert 86400 == trio.current_time() - t0


async def test_with_always_replay_it_waits_for_each_passivation(tmp_path, autojump_clock):
    handled.clear()
    journal = LMDBJournal(tmp_path / "journal")
    async with open_test_system([worker], journal=journal, always_replay=True) as system:
        await system.start(worker, "w")
        for n in (1, 2):
            await system.send("worker/w", go, n)
            await wait_quiescent(system)
            assert ("suspended", []) == _journal_view(system, "worker/w")
        assert [("w", 2), ("w", 4)] == handled


gate = trio.Event()


async def wait_for_the_gate() -> None:
    await gate.wait()


@process("stuck/:id")
async def stuck(ctx: Context, id: str) -> None:
    await ctx.step(wait_for_the_gate)


async def test_a_timeout_says_what_is_still_busy(autojump_clock):
    async with open_test_system([stuck]) as system:
        await system.start(stuck, "s")
        with pytest.raises(trio.TooSlowError, match="stuck/s is running a step"):
            await wait_quiescent(system, timeout=5)
        await system.cancel("stuck/s")
        await wait_quiescent(system)
        assert "cancelled" == system.get("stuck/s").status
