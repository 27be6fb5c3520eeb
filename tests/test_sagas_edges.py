"""Sagas at their edges: a compensation recorded by a program run as a script
and finished by the same file imported as a module; a compensation that is
truly missing, with the cause named; and a stuck compensation seen from
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
from actors import Context, Retry, Signal, _saga, process
from storage import LMDBJournal, instance_id
from tests import saga_shop
from tests.runtime_helpers import wait_status

ROOT = Path(__file__).resolve().parent.parent
go = Signal("go")
ledger: list[str] = []
failing = {"on": True}


@pytest.fixture(autouse=True)
def _reset():
    ledger.clear()
    failing["on"] = True


def _fresh_program(monkeypatch) -> None:
    """Forget the compensations this program has seen, as a new program would."""
    monkeypatch.setattr(_saga, "_known", {})


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


# -- a compensation truly missing: the cause, named ------------------------------------


def charge(order: str) -> str:
    ledger.append(f"charge {order}")
    return f"ch-{order}"


def vanishing_refund(order: str) -> None:
    ledger.append(f"refund {order}")


def _defined_elsewhere(module: str, filename: str) -> object:
    """A module-level function of a module that does not exist here."""
    namespace: dict[str, object] = {"__name__": module}
    exec(compile("def undo(order):\n    pass\n", filename, "exec"), namespace)
    return namespace["undo"]


def _order_with(undo: object) -> actors.ProcessDef:
    @process("edge/:id")
    async def edge(ctx: Context, id: str) -> None:
        await ctx.step(charge, id, compensate=undo)
        if await ctx.wait(go) == "fail":
            raise ValueError("declined")

    return edge


@asynccontextmanager
async def _stranded(opener, proc, monkeypatch, vanish: bool):
    """Run the step and close; then, as a new program (``vanish``: one where
    the compensation's name is gone), make the process fail. Yields the
    handle once the instance is stuck, and the virtual time that took."""
    async with opener(proc) as system:
        handle = await system.start(proc, "e")
        assert "suspended" == await wait_status(handle, "suspended")
    _fresh_program(monkeypatch)
    if vanish:
        monkeypatch.delattr(sys.modules[__name__], "vanishing_refund")
    async with opener(proc) as system:
        handle = system.get("edge/e")
        t0 = trio.current_time()
        await system.send("edge/e", go, "fail")
        assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")
        yield handle, trio.current_time() - t0


@pytest.mark.parametrize(
    "undo, vanish, cause",
    [
        pytest.param(
            lambda order: None,
            False,
            "was a closure, lambda or other unnamed callable, which exists only while the "
            "program that made it runs",
            id="lambda",
        ),
        pytest.param(
            vanishing_refund,
            True,
            f"module {__name__!r} ({os.path.realpath(__file__)}) has no 'vanishing_refund' "
            "(renamed or removed since the step ran?); restore it under that name, then call "
            "system.resume_compensation('edge/e')",
            id="name-gone",
        ),
        pytest.param(
            _defined_elsewhere("gone_shop", "/nonexistent/gone_shop.py"),
            False,
            "module 'gone_shop' (/nonexistent/gone_shop.py) cannot be imported "
            "(ModuleNotFoundError: No module named 'gone_shop'); make it importable in the "
            "program that resumes the instance, then call system.resume_compensation('edge/e')",
            id="module-gone",
        ),
        pytest.param(
            _defined_elsewhere("__main__", "/nonexistent/other_script.py"),
            False,
            "was recorded by a program run as a script (/nonexistent/other_script.py), and "
            "no module loaded here comes from that file: import that file's module before "
            "open_system (or run it as the script again), then call "
            "system.resume_compensation('edge/e')",
            id="other-script",
        ),
    ],
)
async def test_a_missing_compensation_parks_at_once_naming_the_cause(
    opener, monkeypatch, autojump_clock, undo, vanish, cause
):
    async with _stranded(opener, _order_with(undo), monkeypatch, vanish) as (handle, took):
        assert 0 == took  # parked at once: retrying cannot bring it back
        assert cause in handle.last_error
        assert "define it at module level" not in handle.last_error
        with pytest.raises(actors.ProcessFailed) as failed:
            await handle.result()
        assert cause in str(failed.value)
    assert ["charge e"] == ledger  # nothing ran in its place


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
