"""Queues and schedules as the command line and the web inspector show them:
a journal written by a system, read by ``python -m actors`` (a subprocess)
and by the inspector's app; a cancel from the command line removes a
queued instance from its queue."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Queue, process
from storage import LMDBJournal
from tests.cli_runner import run_in_process

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def clock() -> float:
    return T0 + trio.current_time()


@process("cjob/:name")
async def cjob(ctx: Context, name: str) -> str:
    await ctx.sleep(3 * 3600)
    return name


@process("nightly/:region/:tick")
async def nightly(ctx: Context, region: str, tick: str) -> str:
    return tick


def run_cli(journal: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m actors --journal JOURNAL ARGS``, run in this process
    (tests/cli_runner.py): no system holds the journal meanwhile."""
    return run_in_process(["--journal", str(journal), *args])


async def build(path: Path) -> None:
    q = Queue("api", concurrency=1)
    async with actors.open_system(
        LMDBJournal(path), processes=[cjob, nightly], queues=[q], now=clock, control=False
    ) as system:
        for name in ("a", "b", "c"):
            await system.start(cjob, name, queue=q)
        await system.schedule("eu", nightly, cron="0 3 * * *", params=["eu"])
        await system.schedule("us", nightly, every=3600, params=["us"])
        await trio.sleep(4 * 3600 + 60)  # "a" completes and "b" runs; ticks of "us" run
        await system.pause_schedule("us")


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal"
    trio.run(build, path, clock=trio.testing.MockClock(autojump_threshold=0))
    return path


def test_the_cli_lists_queues_schedules_and_queued_instances_and_cancels_one(journal):
    queues = json.loads(run_cli(journal, "--json", "queues").stdout)["queues"]
    assert [(q["name"], q["waiting"], q["running"]) for q in queues] == [("api", 1, 1)]
    assert queues[0]["oldest_wait"] > 0
    schedules = json.loads(run_cli(journal, "--json", "schedules").stdout)["schedules"]
    by_name = {s["name"]: s for s in schedules}
    assert by_name["eu"]["last_tick"] == "2026-01-01T03:00:00Z"
    assert by_name["eu"]["next_tick"] == "2026-01-02T03:00:00Z"
    assert by_name["us"]["paused"] is True
    assert by_name["us"]["last_started"] == "nightly/us/2026-01-01T04:00:00Z"
    text = run_cli(journal, "schedules").stdout
    assert "eu" in text and "paused" in text
    shown = json.loads(run_cli(journal, "--json", "show", "cjob/c").stdout)
    assert (shown["status"], shown["queued"]["queue"], shown["queued"]["priority"]) == (
        "queued",
        "api",
        0,
    )
    assert "  queued in     api (priority 0) since " in run_cli(journal, "show", "cjob/c").stdout
    listed = run_cli(journal, "--json", "list", "--status", "queued")
    assert [i["address"] for i in json.loads(listed.stdout)["instances"]] == ["cjob/c"]
    done = run_cli(journal, "cancel", "cjob/c")
    assert done.returncode == 0, done.stderr
    queues = json.loads(run_cli(journal, "--json", "queues").stdout)["queues"]
    assert queues[0]["waiting"] == 0


async def test_the_inspector_shows_queued_instances(journal):
    pytest.importorskip("starlette", reason="install the 'web' extra")
    from actors._tools._web import create_app
    from tests.tools.test_web import call, rows

    async with LMDBJournal(journal, readonly=True) as opened:
        app = create_app(opened, source=str(journal), poll=1.0)
        status, _, body = await call(app, "/?status=queued")
        assert status == 200
        assert rows(body) == ["cjob/c"]
        assert '<span class="badge queued">queued</span>' in body
        assert '<span class="badge queued">queued <b>1</b></span>' in body  # the status chip
        status, _, body = await call(app, "/instance?address=cjob%2Fc")
        assert status == 200
        assert '<span class="badge queued">queued</span>' in body
