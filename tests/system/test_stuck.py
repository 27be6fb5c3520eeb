"""Stuck instances say so: one whose process the system does not register,
and one whose replay meets non-determinism, each log a WARNING naming the
address, the reason and the fix, are counted in the open's INFO line, read
as stuck on their handle (``handle.stuck``; ``result()`` keeps waiting, as a
redeploy resumes them) and show as "stuck: ..." in ``list`` and ``show``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from actors import Context, Signal, process
from actors.testing import wait_quiescent
from tests.runtime_helpers import wait_status

ROOT = Path(__file__).resolve().parents[2]

go = Signal("go")


def events(caplog, level: int) -> list[tuple[str | None, str]]:
    """(actors_address, message) of each record under ``actors`` at ``level``."""
    return [
        (getattr(r, "actors_address", "MISSING"), r.getMessage())
        for r in caplog.records
        if r.name.startswith("actors") and r.levelno == level
    ]


def opened_line(caplog) -> str:
    (line,) = [m for _, m in events(caplog, logging.INFO) if m.startswith("system opened")]
    return line


def cli(journal: Path, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TZ="UTC", COLUMNS="200")
    done = subprocess.run(
        [sys.executable, "-m", "actors", "--journal", str(journal), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout


@pytest.fixture(autouse=True)
def _capture(caplog):
    caplog.set_level(logging.INFO, logger="actors")


def pack(item: str) -> str:
    return f"packed {item}"


def weigh(item: str) -> int:
    return len(item)


@process("shipment/:id")
async def shipment(ctx: Context, id: str) -> str:
    await ctx.step(pack, id)
    payload = await ctx.wait(go)
    return f"shipped {id} by {payload['by']}"


@process("billing/:id")
async def billing(ctx: Context, id: str) -> str:
    await ctx.wait(go)
    return "billed"


# Two versions of one process: v2 asks for another step where v1 made ``pack``.
@process("flow/:id")
async def flow_v1(ctx: Context, id: str) -> str:
    await ctx.step(pack, id)
    await ctx.wait(go)
    return "flowed"


@process("flow/:id")
async def flow_v2(ctx: Context, id: str) -> str:
    await ctx.step(weigh, id)
    await ctx.wait(go)
    return "flowed"


UNREGISTERED = (
    "instance 'shipment/s-1' belongs to process 'shipment/:id', which this system does not "
    "register: pass it in open_system(processes=[...]); until then it stays as it is on disk "
    "and result() waits"
)


async def test_an_unregistered_process_is_warned_counted_shown_and_runs_once_registered(
    opener, autojump_clock, caplog
):
    async with opener(shipment, billing) as system:
        await wait_status(await system.start(shipment, "s-1"), "suspended")
        await wait_status(await system.start(billing, "b-1"), "suspended")
    caplog.clear()

    # The deploy forgot `shipment` in processes=.
    async with opener(billing) as system:
        assert [("shipment/s-1", UNREGISTERED)] == events(caplog, logging.WARNING)
        assert opened_line(caplog).endswith(
            ": resumed 0, stuck 1 (1 unregistered process), 0 orphaned child(ren) to cancel, "
            "0 corrupt"
        )
        handle = system.get("shipment/s-1")
        assert "process 'shipment/:id' not registered" == handle.stuck
        assert ("suspended", UNREGISTERED) == (handle.status, handle.last_error)
        assert system.get("billing/b-1").stuck is None
        with trio.move_on_after(3600) as waited:
            await handle.result()  # a redeploy resumes it: result() waits
        assert waited.cancelled_caught
        await system.send("shipment/s-1", go, {"by": "ann"})  # stored for later
        await trio.sleep(1)
        assert 1 == len(events(caplog, logging.WARNING))  # said once
    caplog.clear()

    listed = cli(opener.path, "list")
    (row,) = [line for line in listed.splitlines() if line.startswith("shipment/s-1")]
    assert row.endswith("stuck: process 'shipment/:id' not registered")
    shown = cli(opener.path, "show", "shipment/s-1")
    assert (
        "  stuck         process 'shipment/:id' not registered (it runs again once fixed; "
        "last error says how)\n"
        f"  last error    {UNREGISTERED}\n"
    ) in shown

    # Registered again: it runs, and nothing holds it any more.
    async with opener(shipment, billing) as system:
        assert [] == events(caplog, logging.WARNING)
        assert opened_line(caplog).endswith(
            ": resumed 1, stuck 0, 0 orphaned child(ren) to cancel, 0 corrupt"
        )
        handle = system.get("shipment/s-1")
        assert "shipped s-1 by ann" == await handle.result()
        assert (None, None) == (handle.stuck, handle.last_error)
    assert "stuck" not in cli(opener.path, "show", "shipment/s-1")


async def test_non_determinism_is_warned_once_counted_at_open_and_shown(
    opener, autojump_clock, caplog
):
    async with opener(flow_v1) as system:
        await wait_status(await system.start(flow_v1, "f-1"), "suspended")
    caplog.clear()

    async with opener(flow_v2) as system:
        assert [] == events(caplog, logging.WARNING)  # suspended: not replayed until needed
        await system.send("flow/f-1", go)  # its replay meets the changed code
        handle = system.get("flow/f-1")
        while handle.stuck is None:
            await trio.sleep(0.01)
        assert ("suspended", "non-determinism at effect 1") == (handle.status, handle.stuck)
        await system.send("flow/f-1", go)  # replayed again: said once all the same
        await trio.sleep(1)
        ((address, warning),) = events(caplog, logging.WARNING)
        assert "flow/f-1" == address
        assert warning.startswith(
            "instance 'flow/f-1' is stuck (non-determinism at effect 1): NonDeterminismError: "
            "instance 'flow/f-1' replayed a different effect at position 1: the log holds "
        )
        assert "deploy code that makes the same effects in the same order" in warning
        assert warning.endswith("It stays suspended until then.")
        with trio.move_on_after(3600) as waited:
            await handle.result()
        assert waited.cancelled_caught
    caplog.clear()

    # Reopened on the same code: counted, replayed, and said again.
    async with opener(flow_v2) as system:
        assert opened_line(caplog).endswith(
            ": resumed 0, stuck 1 (1 non-determinism), 0 orphaned child(ren) to cancel, 0 corrupt"
        )
        while not events(caplog, logging.WARNING):
            await trio.sleep(0.01)
        assert 1 == len(events(caplog, logging.WARNING))
    caplog.clear()

    listed = cli(opener.path, "list")
    (row,) = [line for line in listed.splitlines() if line.startswith("flow/f-1")]
    assert row.endswith("stuck: non-determinism at effect 1")
    shown = cli(opener.path, "show", "flow/f-1")
    assert (
        "  stuck         non-determinism at effect 1 (it runs again once fixed; last error "
        "says how)\n  last error    NonDeterminismError: instance 'flow/f-1' replayed a "
        "different effect at position 1"
    ) in shown

    # The code that fits is back: it resumes, takes its mail and completes.
    async with opener(flow_v1) as system:
        assert opened_line(caplog).endswith(
            ": resumed 0, stuck 1 (1 non-determinism), 0 orphaned child(ren) to cancel, 0 corrupt"
        )
        handle = system.get("flow/f-1")
        assert "flowed" == await handle.result()
        assert (None, None) == (handle.stuck, handle.last_error)
        assert [] == events(caplog, logging.WARNING)


async def test_the_open_counts_each_kind(opener, autojump_clock, caplog):
    async with opener(flow_v1, shipment, billing) as system:
        await wait_status(await system.start(flow_v1, "f-1"), "suspended")
        await wait_status(await system.start(shipment, "s-1"), "suspended")
        await wait_status(await system.start(billing, "b-1"), "suspended")
    async with opener(flow_v2, billing) as system:
        await system.send("flow/f-1", go)
        while system.get("flow/f-1").stuck is None:
            await trio.sleep(0.01)
        # Seen in memory as its record is written: closed before that write
        # lands, the next open would find it suspended, not stuck.
        await wait_quiescent(system)
    cli(opener.path, "send", "billing/b-1", "go")  # mail to read at the next open
    caplog.clear()
    async with opener(flow_v2, billing) as system:
        assert "billed" == await system.get("billing/b-1").result()
    assert opened_line(caplog).endswith(
        ": resumed 1, stuck 2 (1 unregistered process, 1 non-determinism), 0 orphaned "
        "child(ren) to cancel, 0 corrupt"
    )
