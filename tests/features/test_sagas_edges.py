"""Sagas at their edges: a compensation recorded by a program run as a script
and finished by the same file imported as a module; a compensation that the
program's code does not give, parked with the cause named (never imported by
its recorded name); and a stuck compensation seen from
``result()``, across close and reopen."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Retry, Signal, process
from storage import LMDBJournal, instance_id
from tests import saga_shop
from tests.runtime_helpers import wait_status

ROOT = Path(__file__).resolve().parents[2]
go = Signal("go")
ledger: list[str] = []
failing = {"on": True}


@pytest.fixture(autouse=True)
def _reset():
    ledger.clear()
    failing["on"] = True


# -- script, then import --------------------------------------------------------


def _run_script(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SAGA_SHOP_LEDGER=str(tmp_path / "ledger"))
    env.pop("SAGA_SHOP_DIE_IN_RELEASE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "saga_shop.py"), str(tmp_path / "journal"), mode],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _recorded_names(path: Path) -> list[str]:
    async with LMDBJournal(path) as journal:
        row = await journal.read(lambda r: r.instance(instance_id("shop/o1")))
    return [c["fn"] for c in row.record.compensations]


def _ledger(tmp_path: Path) -> list[str]:
    return (tmp_path / "ledger").read_text().splitlines()


async def test_script_records_then_import_finishes_the_compensation(
    tmp_path, monkeypatch, autojump_clock
):
    done = _run_script(tmp_path, "close")
    assert 0 == done.returncode, done.stderr
    # As the script recorded them: its module was __main__.
    assert ["__main__:refund", "__main__:release"] == await _recorded_names(tmp_path / "journal")
    monkeypatch.setenv("SAGA_SHOP_LEDGER", str(tmp_path / "ledger"))
    async with actors.open_system(
        LMDBJournal(tmp_path / "journal"), processes=[saga_shop.shop]
    ) as system:
        handle = system.get("shop/o1")
        await system.send("shop/o1", saga_shop.approval, "no")
        with trio.fail_after(60), pytest.raises(actors.ProcessFailed, match="o1 declined") as exc:
            await handle.result()
        assert "compensation is stuck" not in str(exc.value)
        assert "failed" == handle.status
    assert [
        "charge o1",
        "reserve o1",
        "release o1 r-o1",
        "refund o1 ch-o1",
    ] == _ledger(tmp_path)


async def test_script_dies_mid_compensation_and_import_finishes_it(
    tmp_path, monkeypatch, autojump_clock
):
    done = _run_script(tmp_path, "die")
    assert 3 == done.returncode, done.stderr
    assert ["charge o1", "reserve o1", "release o1 r-o1"] == _ledger(tmp_path)
    monkeypatch.setenv("SAGA_SHOP_LEDGER", str(tmp_path / "ledger"))
    async with actors.open_system(
        LMDBJournal(tmp_path / "journal"), processes=[saga_shop.shop]
    ) as system:
        handle = system.get("shop/o1")
        with trio.fail_after(60), pytest.raises(actors.ProcessFailed, match="o1 declined") as exc:
            await handle.result()
        assert "compensation is stuck" not in str(exc.value)
    # The interrupted release runs again (at least once), then the refund.
    assert [
        "charge o1",
        "reserve o1",
        "release o1 r-o1",
        "release o1 r-o1",
        "refund o1 ch-o1",
    ] == _ledger(tmp_path)


async def test_import_records_then_script_finishes_the_compensation(
    tmp_path, monkeypatch, autojump_clock
):
    monkeypatch.setenv("SAGA_SHOP_LEDGER", str(tmp_path / "ledger"))
    async with actors.open_system(
        LMDBJournal(tmp_path / "journal"), processes=[saga_shop.shop]
    ) as system:
        handle = await system.start(saga_shop.shop, "o1")
        assert "suspended" == await wait_status(handle, "suspended")
    recorded = await _recorded_names(tmp_path / "journal")
    assert ["tests.saga_shop:refund", "tests.saga_shop:release"] == recorded
    done = _run_script(tmp_path, "finish")
    assert 0 == done.returncode, done.stderr
    # Found in the script's own module, not in a second copy imported by name.
    assert [
        "charge o1",
        "reserve o1",
        "release o1 r-o1",
        "refund o1 ch-o1",
        "finished: 'shop/o1' failed: ValueError: order o1 declined",
    ] == _ledger(tmp_path)


# -- a compensation this program does not give: the cause, named ----------------------


def charge(order: str) -> str:
    ledger.append(f"charge {order}")
    return f"ch-{order}"


def vanishing_refund(order: str) -> None:
    ledger.append(f"refund {order}")


def other_refund(order: str) -> None:
    ledger.append(f"other refund {order}")


def _defined_elsewhere(module: str, filename: str) -> object:
    """A module-level function of a module that does not exist here."""
    namespace: dict[str, object] = {"__name__": module}
    exec(compile("def undo(order):\n    ledger.append('undo')\n", filename, "exec"), namespace)
    return namespace["undo"]


def _order_with(undo: object) -> actors.ProcessDef:
    @process("edge/:id")
    async def edge(ctx: Context, id: str) -> None:
        await ctx.step(charge, id, compensate=undo)
        if await ctx.wait(go) == "fail":
            raise ValueError("declined")

    return edge


@asynccontextmanager
async def _stranded(opener, proc):
    """Run the step and close; then, as a new program whose code passes
    another function as that step's compensate=, make the process fail.
    Yields the handle once the instance is stuck, and the virtual time that took."""
    async with opener(proc) as system:
        handle = await system.start(proc, "e")
        assert "suspended" == await wait_status(handle, "suspended")
    changed = _order_with(other_refund)
    async with opener(changed) as system:
        handle = system.get("edge/e")
        t0 = trio.current_time()
        await system.send("edge/e", go, "fail")
        assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")
        yield handle, trio.current_time() - t0


GIVEN_NONE = (
    "this system was given no function of that name{where}, and a name read from the "
    "journal never chooses the code that runs; if the application defines it, pass it to "
    "open_system(compensations=[{name}]) (or open the system with the process code that "
    "passes it as compensate=), then resume_compensation('edge/e'); otherwise undo the "
    "step by hand and abandon_compensation"
)


@pytest.mark.parametrize(
    "undo, cause",
    [
        pytest.param(
            lambda order: None,
            "it was a closure, lambda or other unnamed callable, which exists only while the "
            "program that made it runs",
            id="lambda",
        ),
        pytest.param(
            vanishing_refund,
            GIVEN_NONE.format(
                where=f" (defined in {os.path.realpath(__file__)!r})", name="vanishing_refund"
            ),
            id="name-gone",
        ),
        pytest.param(
            _defined_elsewhere("gone_shop", "/nonexistent/gone_shop.py"),
            GIVEN_NONE.format(where=" (defined in '/nonexistent/gone_shop.py')", name="undo"),
            id="module-gone",
        ),
        pytest.param(
            _defined_elsewhere("__main__", "/nonexistent/other_script.py"),
            GIVEN_NONE.format(where=" (defined in '/nonexistent/other_script.py')", name="undo"),
            id="other-script",
        ),
    ],
)
async def test_a_compensation_the_code_does_not_give_parks_at_once_naming_the_cause(
    opener, autojump_clock, caplog, undo, cause
):
    async with _stranded(opener, _order_with(undo)) as (handle, took):
        assert 0 == took  # parked at once: retrying cannot bring it back
        assert cause in handle.last_error
        with pytest.raises(actors.ProcessFailed) as failed:
            await handle.result()
        assert cause in str(failed.value)
    assert ["charge e"] == ledger  # nothing ran in its place, other_refund neither
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "is not run" in r.message]
    assert 1 == len(warned)  # and the ERROR that the instance is parked
    assert cause in warned[0].message
    assert warned[0].name.startswith("actors")


async def test_a_compensation_given_to_open_system_finishes_after_the_code_changed(
    opener, autojump_clock
):
    """The documented fix: a compensation the process code no longer passes
    runs once the application gives it to open_system."""
    proc = _order_with(vanishing_refund)
    async with opener(proc) as system:
        handle = await system.start(proc, "e")
        assert "suspended" == await wait_status(handle, "suspended")
    changed = _order_with(other_refund)
    async with opener(changed) as system:
        await system.send("edge/e", go, "fail")
        handle = system.get("edge/e")
        assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")
    async with opener(changed, compensations=[vanishing_refund]) as system:
        assert await system.resume_compensation("edge/e")
        with trio.fail_after(60), pytest.raises(actors.ProcessFailed, match="declined"):
            await system.get("edge/e").result()
    assert ["charge e", "refund e"] == ledger


# -- a stuck compensation and result() ---------------------------------------------------


def stubborn_release(order: str) -> None:
    if failing["on"]:
        raise ConnectionError("warehouse down")
    ledger.append(f"release {order}")


@process("stuck/:id")
async def stuck_order(ctx: Context, id: str) -> None:
    await ctx.step(charge, id, compensate=stubborn_release, retry=Retry(attempts=2, backoff=0))
    await ctx.wait(go)
    raise ValueError("no approval")


@process("stuckc/:id", compensate_on_cancel=True)
async def stuck_cancel(ctx: Context, id: str) -> None:
    await ctx.step(charge, id, compensate=stubborn_release, retry=Retry(attempts=2, backoff=0))
    await ctx.wait(go)


STUCK = (
    "its compensation is stuck (compensation of step {step!r} failed: ConnectionError: "
    "warehouse down); fix the cause and call system.resume_compensation({addr!r}) to retry "
    "it, or system.abandon_compensation({addr!r}) to end it failed without the rest"
)


async def test_result_raises_process_failed_when_compensation_is_stuck(opener, autojump_clock):
    step = charge.__qualname__
    async with opener(stuck_order) as system:
        handle = await system.start(stuck_order, "s")
        assert "suspended" == await wait_status(handle, "suspended")

        async def waiter() -> None:  # waits from before the failure
            with pytest.raises(actors.ProcessFailed) as failed:
                await handle.result()
            caught.append(failed.value)

        caught: list[actors.ProcessFailed] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await system.send("stuck/s", go)
        expected = "'stuck/s' failed: ValueError: no approval; " + STUCK.format(
            step=step, addr="stuck/s"
        )
        assert [expected] == [str(e) for e in caught]
        assert ("builtins.ValueError", "no approval") == (
            caught[0].error_type,
            caught[0].error_message,
        )
        assert "compensation_stuck" == handle.status
    async with opener(stuck_order) as system:
        handle = system.get("stuck/s")
        with trio.fail_after(60):
            with pytest.raises(actors.ProcessFailed) as failed:
                await handle.result()
        assert expected == str(failed.value)
        assert "compensation_stuck" == handle.status  # result() changed nothing
        failing["on"] = False
        assert await system.resume_compensation("stuck/s")
        with pytest.raises(actors.ProcessFailed) as failed:
            await handle.result()
        assert "'stuck/s' failed: ValueError: no approval" == str(failed.value)
        assert ["charge s", "release s"] == ledger


async def test_result_raises_process_cancelled_when_a_cancels_compensation_is_stuck(
    opener, autojump_clock
):
    async with opener(stuck_cancel) as system:
        handle = await system.start(stuck_cancel, "c")
        assert "suspended" == await wait_status(handle, "suspended")
        assert await handle.cancel() is False  # it did not end cancelled: it is parked
        assert "compensation_stuck" == handle.status
    async with opener(stuck_cancel) as system:
        handle = system.get("stuckc/c")
        with trio.fail_after(60):
            with pytest.raises(actors.ProcessCancelled) as cancelled:
                await handle.result()
        assert (
            "'stuckc/c' was cancelled: cancelled by system.cancel; "
            + STUCK.format(step=charge.__qualname__, addr="stuckc/c")
        ) == str(cancelled.value)
        assert "cancelled by system.cancel" == cancelled.value.reason


async def test_open_system_takes_functions_as_compensations_never_names(opener):
    with pytest.raises(actors.InvalidArguments, match="takes the functions that undo steps"):
        async with opener(stuck_order, compensations=["os:system"]):
            pass
