"""Stored data never chooses code: a history file edited to name ``os:system``
as a compensation, imported and resumed every way an operator can (opening
a system, ``system.resume_compensation``, the command line with and without
a running system, a fork), runs nothing: the instance parks
``compensation_stuck`` with a WARNING naming the function, and the marker
file the forged command would write never appears.

The forged file is made the way an attacker would: a real history exported
with ``actors export``, its JSON edited.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Retry, Signal, process
from actors._tools._cli import main as cli_main
from storage import LMDBJournal
from tests.runtime_helpers import virtual_wall, wait_status

ROOT = Path(__file__).resolve().parents[2]
go = Signal("go")
REFUNDS: list[str] = []


def charge(order: str) -> str:
    return f"ch-{order}"


def refund(order: str) -> None:
    """The application's real compensation: it fails in production, so the
    exported instance is parked ``compensation_stuck``."""
    REFUNDS.append(order)
    raise ConnectionError("bank down")


@process("trust/:order")
async def order(ctx: Context, order: str) -> None:
    await ctx.step(charge, order, compensate=refund, retry=Retry(attempts=1, backoff=0))
    await ctx.wait(go)
    raise ValueError(f"order {order} declined")


@pytest.fixture(autouse=True)
def _fresh():
    REFUNDS.clear()


class Store:
    """A journal (LMDB directory or PostgreSQL schema) and how the CLI names it."""

    def __init__(self, make, argv: list[str]) -> None:
        self.make = make
        self.argv = argv  # --journal's value, then options that go after the command

    def open(self, **kw):
        return actors.open_system(self.make(), [order], now=virtual_wall, **kw)

    async def cli(self, *args: str) -> int:
        argv = ["--journal", self.argv[0], *args, *self.argv[1:]]
        return await trio.to_thread.run_sync(cli_main, argv)


def lmdb_store(path: Path) -> Store:
    return Store(lambda: LMDBJournal(path), [str(path)])


@pytest.fixture(params=["lmdb", "postgres"])
def laptop(request, tmp_path) -> Store:
    """Where the forged history is imported."""
    if request.param == "lmdb":
        return lmdb_store(tmp_path / "laptop")
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)
    return Store(lambda: PostgresJournal(dsn, schema=schema), [dsn, "--schema", schema])


async def forged_history(tmp_path: Path, status: str) -> tuple[Path, Path]:
    """A history of ``trust/o-1`` whose compensation is edited to be
    ``os.system("id > MARKER")``, with ``status``; and the marker's path."""
    production = lmdb_store(tmp_path / "production")
    async with production.open() as system:
        handle = await system.start(order, "o-1")
        assert "suspended" == await wait_status(handle, "suspended")
        await system.send("trust/o-1", go)
        assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")
    assert ["o-1"] == REFUNDS
    REFUNDS.clear()
    exported = tmp_path / "o-1.history"
    assert 0 == await production.cli("export", "trust/o-1", "--output", str(exported))
    doc = json.loads(exported.read_text())
    marker = tmp_path / "pwned"
    (instance,) = doc["instances"]
    (comp,) = instance["record"]["compensations"]
    assert comp["fn"].endswith(":refund")  # what the edit replaces
    comp.update(fn="os:system", file=os.__file__, args=[f"id > {marker}"], kwargs={})
    instance["status"] = status
    forged = tmp_path / "forged.history"
    forged.write_text(json.dumps(doc))
    return forged, marker


def refused(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The WARNINGs that a recorded compensation was not run."""
    return [
        r.message
        for r in caplog.records
        if r.levelno == logging.WARNING
        and r.name.startswith("actors")
        and "is not run" in r.message
    ]


async def parked_again(handle, caplog, warnings: int) -> None:
    """Wait until ``warnings`` refusals were logged and the instance is parked."""
    with trio.fail_after(60):
        while (
            len(refused(caplog)) < warnings
            or handle.status != "compensation_stuck"
            or "'os:system' is not run" not in (handle.last_error or "")
        ):
            await trio.sleep(0.01)
            await handle.refresh()  # on PostgreSQL, what the journal holds


def assert_refused(handle, marker: Path, caplog) -> None:
    assert "compensation_stuck" == handle.status
    assert not marker.exists(), "os.system ran: stored data chose the code"
    assert [] == REFUNDS  # nor anything else in its place
    warnings = refused(caplog)
    assert warnings, "no WARNING named the compensation"
    assert all("compensation 'os:system' is not run" in w for w in warnings)
    assert "open_system(compensations=[system])" in warnings[-1]  # the fix
    assert "os:system" in handle.last_error


async def test_a_forged_running_compensation_runs_nothing_when_the_system_opens(
    laptop, tmp_path, caplog, autojump_clock
):
    forged, marker = await forged_history(tmp_path, "running")
    assert 0 == await laptop.cli("import", str(forged))
    async with laptop.open() as system:
        handle = system.get("trust/o-1")
        assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")
        assert_refused(handle, marker, caplog)


async def test_a_forged_stuck_compensation_resumed_through_the_api_runs_nothing(
    laptop, tmp_path, caplog, autojump_clock
):
    forged, marker = await forged_history(tmp_path, "compensation_stuck")
    assert 0 == await laptop.cli("import", str(forged))
    async with laptop.open() as system:
        handle = system.get("trust/o-1")
        assert "compensation_stuck" == handle.status
        assert [] == refused(caplog)  # nothing tried yet
        assert await system.resume_compensation("trust/o-1")
        await parked_again(handle, caplog, 1)
        assert_refused(handle, marker, caplog)
        with pytest.raises(actors.ProcessFailed, match="compensation 'os:system' is not run"):
            await handle.result()
        # Resumed again, the same: never something else in its place.
        assert await system.resume_compensation("trust/o-1")
        await parked_again(handle, caplog, 2)
        assert_refused(handle, marker, caplog)


async def test_a_forged_stuck_compensation_resumed_by_the_cli_runs_nothing(
    tmp_path, caplog, autojump_clock
):
    laptop = lmdb_store(tmp_path / "laptop")
    forged, marker = await forged_history(tmp_path, "compensation_stuck")
    assert 0 == await laptop.cli("import", str(forged))
    # No system running: the command puts it back to running, for the next open.
    assert 0 == await laptop.cli("resume-compensation", "trust/o-1")
    async with laptop.open() as system:
        handle = system.get("trust/o-1")
        assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")
        assert_refused(handle, marker, caplog)


async def test_a_forked_forged_compensation_runs_nothing(tmp_path, caplog, autojump_clock):
    laptop = lmdb_store(tmp_path / "laptop")
    forged, marker = await forged_history(tmp_path, "failed")
    doc = json.loads(forged.read_text())
    record = doc["instances"][0]["record"]
    record.update(error=record["failure"], failure=None, failure_end=None, stuck=None)
    forged.write_text(json.dumps(doc))
    assert 0 == await laptop.cli("import", str(forged))
    async with laptop.open() as system:
        fork = await system.fork("trust/o-1", from_effect=1)  # keeps the forged compensation
        # The fork puts back the `go` its discarded part took: the new run
        # takes it, fails again, and meets the forged compensation.
        assert "compensation_stuck" == await wait_status(fork, "compensation_stuck")
        assert_refused(fork, marker, caplog)


@pytest.mark.slow  # a second process: the command line beside the running system
async def test_a_forged_stuck_compensation_resumed_by_the_cli_beside_a_running_system(
    tmp_path, caplog
):
    # On the real clock: the command talks to the system's control socket,
    # whose read timeout an autojumping clock would spend at once while the
    # command is still starting (it was refused "broken pipe" under load).
    laptop = lmdb_store(tmp_path / "laptop")
    forged, marker = await forged_history(tmp_path, "compensation_stuck")
    assert 0 == await laptop.cli("import", str(forged))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TZ="UTC")
    async with laptop.open() as system:
        handle = system.get("trust/o-1")
        done = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "actors",
                    "--journal",
                    str(tmp_path / "laptop"),
                    "resume-compensation",
                    "trust/o-1",
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        )
        assert 0 == done.returncode, done.stderr
        assert "through the running system" in done.stdout
        await parked_again(handle, caplog, 1)
        assert_refused(handle, marker, caplog)
