"""A cancel runs saga compensations only when asked: ``system.cancel(address,
compensate=True)``, ``handle.cancel(compensate=True)`` and the command line's
``cancel --compensate`` run the pending ones, newest first and durably, before
the instance ends cancelled; a plain cancel runs none and says so."""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Signal, current_step, process
from tests.cli_runner import run_in_process
from tests.runtime_helpers import Opener, wait_status

ROOT = Path(__file__).resolve().parents[2]

go = Signal("go")
ledger: list[str] = []
held: dict[str, trio.Event] = {}  # order -> what its refund waits for


@pytest.fixture(autouse=True)
def _fresh():
    ledger.clear()
    held.clear()


def charge(order: str, amount: int) -> str:
    ledger.append(f"charge {order} {amount}")
    return f"ch-{order}"


def reserve(order: str) -> str:
    ledger.append(f"reserve {order}")
    return f"res-{order}"


def release(order: str) -> None:
    ledger.append(f"release {order} {current_step().forward_result}")


async def refund(order: str, amount: int) -> None:
    ledger.append(f"refund started {order}")
    gate = held.get(order)
    if gate is not None:
        await gate.wait()
    ledger.append(f"refund {order} {amount} {current_step().forward_result}")


@process("orders/:id")
async def order(ctx: Context, id: str, *, amount: int) -> str:
    await ctx.step(charge, id, amount, compensate=refund)
    await ctx.step(reserve, id, compensate=release)
    await ctx.wait(go)
    return "shipped"


@process("undo/:id", compensate_on_cancel=True)
async def undoing(ctx: Context, id: str) -> None:
    await ctx.step(charge, id, 1, compensate=refund)
    await ctx.wait(go)


def undone(order: str, amount: int = 5) -> list[str]:
    """The ledger of an order charged, reserved, then compensated newest first."""
    return [
        f"charge {order} {amount}",
        f"reserve {order}",
        f"release {order} res-{order}",
        f"refund started {order}",
        f"refund {order} {amount} ch-{order}",
    ]


@pytest.mark.parametrize("passivate_after", [60.0, 0.0], ids=["in memory", "passivated"])
async def test_a_plain_cancel_runs_no_compensation(any_opener, autojump_clock, passivate_after):
    async with any_opener(order, passivate_after=passivate_after) as system:
        handle = await system.start(order, "o-1", amount=5)
        await wait_status(handle, "suspended")
        assert await handle.cancel()
        with pytest.raises(actors.ProcessCancelled, match=r"cancelled by system\.cancel"):
            await handle.result()
    assert ["charge o-1 5", "reserve o-1"] == ledger


@pytest.mark.parametrize("passivate_after", [60.0, 0.0], ids=["in memory", "passivated"])
async def test_cancel_with_compensate_runs_them_newest_first_then_ends_cancelled(
    any_opener, autojump_clock, passivate_after
):
    async with any_opener(order, passivate_after=passivate_after) as system:
        handle = await system.start(order, "o-1", amount=5)
        await wait_status(handle, "suspended")
        assert await system.cancel("orders/o-1", compensate=True)
        assert undone("o-1") == ledger  # done by the time cancel returns
        with pytest.raises(actors.ProcessCancelled, match=r"cancelled by system\.cancel"):
            await handle.result()
        other = await system.start(order, "o-2", amount=7)
        await wait_status(other, "suspended")
        assert await other.cancel(compensate=True)
        assert "cancelled" == other.status
    assert undone("o-1") + undone("o-2", 7) == ledger
    async with any_opener(order) as system:  # nothing is left to run again
        assert "cancelled" == system.get("orders/o-1").status
        await trio.sleep(1)
    assert undone("o-1") + undone("o-2", 7) == ledger


async def test_a_close_amid_the_compensations_finishes_them_after_the_reopen_each_once(
    any_opener, autojump_clock
):
    held["o-1"] = trio.Event()
    async with any_opener(order) as system:
        handle = await system.start(order, "o-1", amount=5)
        await wait_status(handle, "suspended")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(system.cancel, "orders/o-1", compensate=True))
            while "refund started o-1" not in ledger:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()  # the caller gives up; the cancel is recorded
        assert "running" == handle.status
    # Closed with the release done and the refund under way.
    assert undone("o-1")[:4] == ledger
    held["o-1"].set()
    async with any_opener(order) as system:
        with pytest.raises(actors.ProcessCancelled, match=r"cancelled by system\.cancel"):
            await system.get("orders/o-1").result()
    # The release ran once; the refund's interrupted attempt ran again, and
    # returned once.
    assert [*undone("o-1")[:4], "refund started o-1", "refund o-1 5 ch-o-1"] == ledger


async def test_a_process_that_compensates_on_cancel_does_so_also_when_passivated(
    any_opener, autojump_clock
):
    async with any_opener(undoing, passivate_after=0) as system:
        handle = await system.start(undoing, "u-1")
        await wait_status(handle, "suspended")
        assert await handle.cancel()
    assert ["charge u-1 1", "refund started u-1", "refund u-1 1 ch-u-1"] == ledger


async def test_compensations_that_cannot_run_here_refuse_the_cancel(opener, autojump_clock):
    async with opener(order) as system:
        await wait_status(await system.start(order, "o-1", amount=5), "suspended")
    async with opener() as system:  # `order` is not registered
        with pytest.raises(actors.UnknownProcess, match="pass it in open_system"):
            await system.cancel("orders/o-1", compensate=True)
        assert "suspended" == system.get("orders/o-1").status  # nothing written


# -- the command line -----------------------------------------------------------------------


async def cli(journal: Path, *args: str) -> tuple[int, str, str]:
    """Run ``python -m actors`` without blocking the trio loop (a system here
    may serve its control socket meanwhile)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TZ="UTC", COLUMNS="200")
    done = await trio.run_process(
        [sys.executable, "-m", "actors", "--journal", str(journal), *args],
        cwd=ROOT,
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def offline(journal: Path, *args: str) -> tuple[int, str, str]:
    """`cli` in this process, for when no system here holds the journal."""
    done = await trio.to_thread.run_sync(lambda: run_in_process(["--journal", str(journal), *args]))
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def short(tmp_path):
    """An opener on a short directory: a unix socket's address holds about 100 bytes."""
    with tempfile.TemporaryDirectory(prefix="cc") as d:
        yield Opener(Path(d))


async def test_cli_cancel_says_whether_compensations_run_and_compensate_runs_them(short):
    async with short(order) as system:
        for id in ("o-1", "o-2", "o-3"):
            await wait_status(await system.start(order, id, amount=5), "suspended")
        await system.send("orders/o-3", go)
        await system.get("orders/o-3").result()
    path = short.path
    ledger.clear()

    code, out, err = await offline(path, "show", "orders/o-1")
    assert (
        "Compensations: 2 — registered; run only if the instance fails (or is cancelled with "
        "--compensate)\n"
        "  registered charge -> tests.features.test_cancel_compensate:refund  attempts 0\n"
        "  registered reserve -> tests.features.test_cancel_compensate:release  attempts 0\n"
    ) in out
    code, out, err = await offline(path, "show", "orders/o-3")
    assert "Compensations: 2 — not run: the instance completed\n  not run    charge" in out

    # No system holds the journal: a plain cancel refuses to drop them.
    code, out, err = await offline(path, "cancel", "orders/o-1")
    assert 1 == code
    assert (
        "actors: not cancelled: saga compensations are pending in orders/o-1 (2), and a cancel "
        "does not run them by default; pass --compensate to run them before it ends cancelled "
        "(when a system that runs its process next opens this journal), or --force to cancel "
        "without compensating\n"
    ) == err
    code, out, err = await offline(path, "cancel", "orders/o-1", "--compensate")
    assert 0 == code, err
    assert (
        "cancelled orders/o-1 (suspended before): cancelled from the actors CLI\n"
        "its 2 compensations (reserve, charge) run first, newest first, when a system that "
        "runs 'orders/:id' next opens this journal; it is running until then, and ends "
        "cancelled after them\n"
    ) == out
    code, out, err = await offline(path, "show", "orders/o-1")
    assert "orders/o-1  ·  running" in out
    assert "Compensations: 2 — running after the cancel, newest first: 0 done, 2 to run" in out

    async with short(order) as system:
        # The cancel recorded above runs its compensations at the open.
        with pytest.raises(actors.ProcessCancelled, match="cancelled from the actors CLI"):
            await system.get("orders/o-1").result()
        assert undone("o-1")[2:] == ledger  # (charged and reserved before)
        ledger.clear()

        # A system holds the journal: the CLI asks it, and says what it did.
        code, out, err = await cli(path, "cancel", "orders/o-2")
        assert 0 == code, err
        assert out.startswith("cancelled orders/o-2 (suspended before) through the running system")
        assert out.endswith(
            ": cancelled by system.cancel\ncompensations not run (a cancel runs them only with "
            "--compensate): orders/o-2: reserve, orders/o-2: charge\n"
        )
        assert [] == ledger
        await wait_status(await system.start(order, "o-4", amount=5), "suspended")
        code, out, err = await cli(path, "cancel", "orders/o-4", "--compensate")
        assert 0 == code, err
        assert out.endswith(
            ": cancelled by system.cancel\nran 2 compensations first, newest first: "
            "orders/o-4: reserve, orders/o-4: charge\n"
        )
        assert undone("o-4") == ledger

    code, out, err = await offline(path, "show", "orders/o-1")
    assert "Compensations: 2 — all run, newest first, after the cancel\n  done       charge" in out
    code, out, err = await offline(path, "show", "orders/o-2")
    assert "Compensations: 2 — not run: the instance was cancelled (without --compensate)" in out
