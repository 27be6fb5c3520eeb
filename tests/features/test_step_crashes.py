"""A crash is not a step failure (DESIGN.md, Wave 4).

An attempt cut short by a crash runs again after recovery, under the same
idempotency key, outside the exception budget of ``Retry(attempts=)``;
past the crash budget (``Retry(crashes=)``, 3 by default, also without
``retry=``) the instance is parked stuck with a WARNING naming the step, and
``system.retry`` resumes it; ``at_most_once=True`` keeps the old rule (a
crash spends an attempt: tests/kernel/test_values_keys_retries.py, hole 3).

A crash is simulated in process, as in tests/kernel/test_values_keys_retries.py:
while an attempt runs, the step function copies the journal's files
(everything committed so far, the attempt's start included) to a new
directory, the state a SIGKILL at that moment would leave; opening a system
on the copy is the restart after the crash. tests/whole/test_step_crashes_sigkill.py
does the same with real SIGKILLs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio

import actors
from actors import Context, Retry, process
from storage import LMDBJournal
from tests.cli_runner import run_in_process
from tests.crash_kit import ROOT

#: The state of one test's crashes: where the live journal is, the copies
#: made so far, what each attempt of the step does, and what ran.
STATE: dict[str, Any] = {}
LEDGER: list[str] = []


def _crash_here() -> None:
    source: Path = STATE["source"]
    target = STATE["root"] / f"crash-{len(STATE['copies'])}"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("owner.lock", "*control.sock*"))
    STATE["copies"].append(target)


async def charge(amount: int) -> str:
    """Does what ``STATE["plan"]`` says for this attempt: "crash", "raise",
    "hang" or (past the plan's end) return its key."""
    info = actors.current_step()
    LEDGER.append(f"{info.key} {info.attempt}")
    plan: list[str] = STATE["plan"]
    what = plan[info.attempt - 1] if info.attempt <= len(plan) else "ok"
    if what == "crash":
        _crash_here()
        await trio.sleep_forever()  # the process "died" here
    if what == "raise":
        raise ValueError(f"declined on attempt {info.attempt}")
    if what == "hang":
        await trio.sleep_forever()  # until the system closes
    return info.key


@process("pay/:id")
async def pay(ctx: Context, id: str, *, retry: list[int] | None = None, once: bool = False) -> str:
    policy = Retry(attempts=retry[0], crashes=retry[1], backoff=0) if retry else None
    return await ctx.step(charge, 5, name="charge", retry=policy, at_most_once=once)


def _open(path: Path) -> Any:
    return actors.open_system(LMDBJournal(path), processes=[pay])


def _reset(tmp_path: Path, plan: list[str]) -> Path:
    journal = tmp_path / "journal"
    STATE.update(root=tmp_path, copies=[], source=journal, plan=plan)
    LEDGER.clear()
    return journal


async def _settle(system: actors.ActorSystem, address: str, crashes: int) -> str:
    """Wait until the instance at ``address`` ends, is stuck, or crashes
    once more; which ("crashed", "stuck" or its end status)."""
    with trio.fail_after(60):
        while True:
            if len(STATE["copies"]) > crashes:
                return "crashed"
            handle = system.get(address)
            if handle is not None:
                if handle.status in ("completed", "failed"):
                    return handle.status
                if handle.stuck is not None:
                    return "stuck"
            await trio.sleep(0.01)


async def _run_through_crashes(start: dict[str, Any]) -> tuple[int, str]:
    """Start ``pay/x`` with ``start`` as input, then open each crash copy
    in turn (the restart after the crash) until a run neither crashes nor
    is left running; (crashes, how it settled)."""
    crashes = 0
    async with _open(STATE["source"]) as system:
        await system.start(pay, "x", **start)
        settled = await _settle(system, "pay/x", crashes)
    while settled == "crashed":
        assert crashes < 10, f"still crashing after {crashes} restarts: {LEDGER}"
        STATE["source"] = STATE["copies"][crashes]
        crashes += 1
        async with _open(STATE["source"]) as system:
            settled = await _settle(system, "pay/x", crashes)
    return crashes, settled


async def test_a_crash_in_a_step_without_retry_runs_it_again_under_its_key(
    tmp_path, autojump_clock
):
    _reset(tmp_path, ["crash"])
    crashes, settled = await _run_through_crashes({})
    assert (1, "completed") == (crashes, settled)
    key = "pay/x/1/0/charge/1"
    assert [f"{key} 1", f"{key} 2"] == LEDGER  # run twice, under one key
    async with _open(STATE["source"]) as system:
        assert key == await system.get("pay/x").result()


async def test_a_crash_spends_none_of_the_exception_budget(tmp_path, autojump_clock):
    # attempts=2: one crash and one exception leave the third attempt to run.
    _reset(tmp_path, ["crash", "raise"])
    crashes, settled = await _run_through_crashes({"retry": [2, 3]})
    assert (1, "completed") == (crashes, settled)
    key = "pay/x/1/0/charge/1"
    assert [f"{key} 1", f"{key} 2", f"{key} 3"] == LEDGER
    # Two exceptions are still the budget: the step fails at the second.
    _reset(tmp_path / "b", ["crash", "raise", "raise"])
    STATE["root"].mkdir()
    crashes, settled = await _run_through_crashes({"retry": [2, 3]})
    assert (1, "failed") == (crashes, settled)
    assert 3 == len(LEDGER)


@pytest.mark.parametrize(("start", "budget"), [({}, 3), ({"retry": [5, 1]}, 1)])
async def test_a_step_that_crashes_every_time_parks_its_instance_and_retry_resumes_it(
    tmp_path, autojump_clock, caplog, start, budget
):
    _reset(tmp_path, ["crash"] * 20)
    caplog.set_level(logging.WARNING, logger="actors")
    crashes, settled = await _run_through_crashes(start)
    # Run budget + 1 times, each cut short; not run again after that.
    assert (budget + 1, "stuck") == (crashes, settled)
    key = "pay/x/1/0/charge/1"
    assert [f"{key} {n}" for n in range(1, budget + 2)] == LEDGER
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("is stuck" in m and "'charge'" in m and "crash budget" in m for m in warned)
    # Stuck, not failed: the record says why; a reopen keeps it so, running nothing.
    async with _open(STATE["source"]) as system:
        handle = system.get("pay/x")
        await _settle(system, "pay/x", crashes)
        assert "suspended" == handle.status
        assert "crash budget spent by step 'charge'" == handle.stuck
        assert handle.last_error is not None
        assert f"cut short by a crash {budget + 1} time(s)" in handle.last_error
        assert "system.retry('pay/x')" in handle.last_error
        with trio.move_on_after(5):
            await handle.result()
            raise AssertionError("a stuck instance has no result")
        assert budget + 1 == len(LEDGER)
        # The fix is deployed (the step no longer crashes); retry resumes it,
        # the same incarnation, and the step runs under the key it had.
        STATE["plan"] = []
        resumed = await system.retry("pay/x")
        assert key == await resumed.result()
        assert None is handle.stuck
    assert f"{key} {budget + 2}" == LEDGER[-1]
    assert budget + 2 == len(LEDGER)


async def test_retry_of_a_parked_instance_keeps_its_input(tmp_path, autojump_clock):
    _reset(tmp_path, ["crash"] * 20)
    _, settled = await _run_through_crashes({"retry": [1, 0]})
    assert "stuck" == settled
    async with _open(STATE["source"]) as system:
        await _settle(system, "pay/x", len(STATE["copies"]))
        with pytest.raises(actors.InvalidArguments, match="retry without input"):
            await system.retry("pay/x", input={"once": True})


async def test_at_most_once_fails_the_step_at_a_crash(tmp_path, autojump_clock):
    _reset(tmp_path, ["crash"])
    crashes, settled = await _run_through_crashes({"once": True})
    assert (1, "failed") == (crashes, settled)
    assert ["pay/x/1/0/charge/1 1"] == LEDGER  # never run twice
    async with _open(STATE["source"]) as system:
        with pytest.raises(actors.ProcessFailed, match="attempt 1 of 1 was interrupted by a crash"):
            await system.get("pay/x").result()


async def test_a_close_then_a_crash_counts_only_the_crash(tmp_path, autojump_clock):
    # A close cuts attempt 1 short without spending either budget; the crash
    # in attempt 2 is the one crash a budget of 1 runs again.
    journal = _reset(tmp_path, ["hang", "crash"])
    async with _open(journal) as system:
        await system.start(pay, "x", retry=[1, 1])
        with trio.fail_after(30):
            while not LEDGER:
                await trio.sleep(0.01)
    async with _open(journal) as system:
        assert "crashed" == await _settle(system, "pay/x", 0)
    STATE["source"] = STATE["copies"][0]
    async with _open(STATE["source"]) as system:
        assert "completed" == await _settle(system, "pay/x", 1)
    key = "pay/x/1/0/charge/1"
    assert [f"{key} 1", f"{key} 2", f"{key} 3"] == LEDGER


async def _parked_journal(tmp_path: Path) -> Path:
    """A journal holding ``pay/x`` parked by its step's crash budget (of 0)."""
    _reset(tmp_path, ["crash"] * 20)
    _, settled = await _run_through_crashes({"retry": [1, 0]})
    assert "stuck" == settled
    STATE["plan"] = []  # the fix is deployed: the step no longer crashes
    return STATE["source"]


async def test_two_retries_of_a_parked_instance_at_once_resume_it_once(
    tmp_path, autojump_clock, monkeypatch
):
    # The second retry's look (is it parked?) is held until the first has
    # returned: by then the instance runs again, and the second still gets
    # the first's handle, not "it is running".
    from actors._features import _crashes

    journal = await _parked_journal(tmp_path)
    ran = len(LEDGER)
    first_back = trio.Event()
    looks: list[str] = []
    look = _crashes.resume_parked

    async def slow_look(system: Any, address: str, input: Any) -> Any:
        looks.append(address)
        if len(looks) == 2:
            await first_back.wait()
        return await look(system, address, input)

    monkeypatch.setattr(_crashes, "resume_parked", slow_look)
    async with _open(journal) as system:
        await _settle(system, "pay/x", len(STATE["copies"]))
        handles: list[Any] = []

        async def one() -> None:
            handles.append(await system.retry("pay/x"))
            first_back.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
        assert [1, 1] == [h.incarnation for h in handles]  # resumed, not a new incarnation
        key = "pay/x/1/0/charge/1"
        assert [key, key] == [await h.result() for h in handles]
    assert ran + 1 == len(LEDGER)  # the step ran once more, not twice


async def test_the_command_line_resumes_a_parked_instance_on_a_closed_journal(
    tmp_path, autojump_clock
):
    journal = await _parked_journal(tmp_path)
    done = await trio.to_thread.run_sync(
        lambda: run_in_process(["--journal", str(journal), "retry", "pay/x", "--json"])
    )
    assert 0 == done.returncode, done.stderr
    doc = json.loads(done.stdout)
    assert (True, 1, "crash budget spent by step 'charge'") == (
        doc["resumed"],
        doc["incarnation"],
        doc["was"],
    )
    async with _open(journal) as system:  # it runs on when a system opens the journal
        assert "pay/x/1/0/charge/1" == await system.get("pay/x").result()
    assert ["pay/x/1/0/charge/1 1", "pay/x/1/0/charge/1 2"] == LEDGER


@pytest.mark.slow  # the command line in a subprocess, through the control socket
async def test_the_command_line_resumes_a_parked_instance_through_the_running_system():
    with tempfile.TemporaryDirectory(prefix="sc") as d:  # a unix socket's path is short
        journal = await _parked_journal(Path(d))
        async with _open(journal) as system:
            handle = system.get("pay/x")
            await _settle(system, "pay/x", len(STATE["copies"]))
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            done = await trio.run_process(
                [sys.executable, "-m", "actors", "--journal", str(journal), "retry", "pay/x"],
                cwd=ROOT,
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert 0 == done.returncode, done.stderr.decode()
            assert "its crashes forgiven, through the running system" in done.stdout.decode()
            with trio.fail_after(30):
                assert "pay/x/1/0/charge/1" == await handle.result()


@pytest.mark.parametrize("crashes", [-1, True, 1.5, "3"])
def test_a_crash_budget_is_a_whole_number_of_0_or_more(crashes):
    with pytest.raises(
        actors.InvalidArguments, match=r"Retry\(crashes=\.\.\.\) takes a whole number"
    ):
        Retry(crashes=crashes)


async def test_at_most_once_takes_true_or_false(tmp_path, autojump_clock):
    @process("flag/:id")
    async def flag(ctx: Context, id: str) -> str:
        try:
            await ctx.step(charge, 5, at_most_once="yes")
        except actors.InvalidArguments as exc:
            return str(exc)
        return "taken"

    _reset(tmp_path, [])
    async with actors.open_system(LMDBJournal(tmp_path / "journal"), [flag]) as system:
        handle = await system.start(flag, "x")
        assert "ctx.step(at_most_once=...) takes True or False, not 'yes'" == await handle.result()
