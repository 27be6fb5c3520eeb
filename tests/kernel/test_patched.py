"""Changing the code of running processes with ``ctx.patched`` and
``ctx.deprecate_patch``: each version of one process (one template) runs on
the histories the earlier versions recorded, across a close and reopen, and
``actors.testing.replay_check`` agrees.

A run that ran before on code without the patch gets False wherever it had
got to, logged or not: suspended at its first wait (nothing logged), or past
its last logged effect; also after a SIGKILL. A run that is new gets True,
whether it runs at once or is first loaded from the journal (a restart)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import replay_check, wait_quiescent
from storage import LMDBJournal
from tests.crash_kit import acked_ids, kill_after_acks
from tests.runtime_helpers import Opener, virtual_wall, wait_status

go = Signal("go")
CALLS: list[str] = []


def charge(order: str) -> str:
    CALLS.append(f"charge {order}")
    return f"charged {order}"


def charge_with_fee(order: str) -> str:
    CALLS.append(f"charge+fee {order}")
    return f"charged {order} with a fee"


def audit(order: str) -> str:
    CALLS.append(f"audit {order}")
    return "audited"


@process("orders/:id")
async def v1(ctx: Context, id: str) -> list[str]:
    done = [await ctx.step(charge, id)]
    done.append(await ctx.wait(go))
    return done


@process("orders/:id")
async def v2(ctx: Context, id: str) -> list[str]:
    if ctx.patched("fee"):
        done = [await ctx.step(charge_with_fee, id)]
    else:
        done = [await ctx.step(charge, id)]
    done.append(await ctx.wait(go))
    if ctx.patched("fee"):  # the first answer holds for the run
        done.append(await ctx.step(audit, id))
    return done


@process("orders/:id")
async def v3(ctx: Context, id: str) -> list[str]:
    ctx.deprecate_patch("fee")  # no history before "fee" remains
    done = [await ctx.step(charge_with_fee, id)]
    done.append(await ctx.wait(go))
    done.append(await ctx.step(audit, id))
    return done


@process("orders/:id")
async def unpatched(ctx: Context, id: str) -> list[str]:
    done = [await ctx.step(charge_with_fee, id)]  # changed without a patch
    done.append(await ctx.wait(go))
    return done


# A wait first: a run suspended there has logged nothing yet.
@process("orders/:id")
async def w1(ctx: Context, id: str) -> list[str]:
    got = await ctx.wait(go)
    return [got, await ctx.step(charge, id)]


@process("orders/:id")
async def w2(ctx: Context, id: str) -> list[str]:
    fee = ctx.patched("fee")
    got = await ctx.wait(go)
    if fee:
        return [got, await ctx.step(charge_with_fee, id)]
    return [got, await ctx.step(charge, id)]


# The patch after the last logged effect of v1's history (its charge).
@process("orders/:id")
async def v2_late(ctx: Context, id: str) -> list[str]:
    done = [await ctx.step(charge, id)]
    audited = ctx.patched("audit")
    done.append(await ctx.wait(go))
    if audited:
        done.append(await ctx.step(audit, id))
    return done


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()
    yield


async def test_old_histories_take_the_old_branch_new_runs_the_new(tmp_path):
    opener = Opener(tmp_path)
    async with opener(v1) as system:
        handle = await system.start(v1, "old")  # charges, then waits for go
        await wait_status(handle, "suspended")
    assert [] == await replay_check(opener.path, [v2])  # the patched code fits the history
    problems = await replay_check(opener.path, [unpatched])
    assert 1 == len(problems) and "orders/old" == problems[0].address
    assert {"k": "step", "n": "charge"} == problems[0].expected
    async with opener(v2) as system:
        new = await system.start(v2, "new")
        await system.send("orders/old", go, "ok")
        await system.send("orders/new", go, "ok")
        assert ["charged old", "ok"] == await system.get("orders/old").result()
        assert ["charged new with a fee", "ok", "audited"] == await new.result()
    # The old one replayed its charge (never ran it again); the new one ran the new code.
    assert ["charge old", "charge+fee new", "audit new"] == CALLS


async def test_a_recorded_marker_replays_as_true(tmp_path):
    opener = Opener(tmp_path)
    async with opener(v2) as system:
        await wait_status(await system.start(v2, "a"), "suspended")
    assert [] == await replay_check(opener.path, [v2])
    async with opener(v2, passivate_after=0) as system:
        await system.send("orders/a", go, "ok")
        assert ["charged a with a fee", "ok", "audited"] == await system.get("orders/a").result()
    assert ["charge+fee a", "audit a"] == CALLS  # the charge ran once, before the reopen


async def test_deprecate_patch_replays_histories_with_and_without_its_marker(tmp_path):
    opener = Opener(tmp_path)
    async with opener(v2) as system:
        await wait_status(await system.start(v2, "marked"), "suspended")  # with the marker
    async with opener(v3) as system:
        await wait_status(await system.start(v3, "plain"), "suspended")  # without it
    assert [] == await replay_check(opener.path, [v3])
    # Without the deprecate_patch call, the marked history would not replay:
    # the call goes only once no history holds the marker.
    problems = await replay_check(opener.path, [unpatched])
    assert ["orders/marked"] == [p.address for p in problems]
    assert {"k": "patch", "n": "fee"} == problems[0].expected
    async with opener(v3) as system:
        for address in ("orders/marked", "orders/plain"):
            await system.send(address, go, "ok")
        assert ["charged marked with a fee", "ok", "audited"] == (
            await system.get("orders/marked").result()
        )
        assert ["charged plain with a fee", "ok", "audited"] == (
            await system.get("orders/plain").result()
        )


async def test_replay_check_with_patches_in_include_finished_histories(tmp_path):
    opener = Opener(tmp_path)
    async with opener(v1) as system:
        handle = await system.start(v1, "done")
        await system.send("orders/done", go, "ok")
        await handle.result()
    assert [] == await replay_check(opener.path, [v2], include_finished=True)


async def test_patch_ids_must_be_names(opener):
    @process("bad/:id")
    async def bad(ctx: Context, id: str) -> None:
        ctx.patched("")

    async with opener(bad) as system:
        handle = await system.start(bad, "x")
        with pytest.raises(actors.ProcessFailed, match="patch id is empty"):
            await handle.result()


async def test_a_run_suspended_at_its_first_wait_keeps_the_old_branch(any_opener):
    async with any_opener(w1) as system:
        await wait_status(await system.start(w1, "old"), "suspended")  # nothing logged
    async with any_opener(w2) as system:
        new = await system.start(w2, "new")
        await system.send("orders/old", go, "ok")
        await system.send("orders/new", go, "ok")
        # The old order ran v1 to its wait: no fee. The new one was placed on v2.
        assert ["ok", "charged old"] == await system.get("orders/old").result()
        assert ["ok", "charged new with a fee"] == await new.result()
    assert ["charge old", "charge+fee new"] == sorted(CALLS)  # the two ran concurrently


async def test_a_run_past_its_last_logged_effect_keeps_the_old_branch(any_opener):
    async with any_opener(v1) as system:
        await wait_status(await system.start(v1, "old"), "suspended")  # charged, waits
    async with any_opener(v2_late) as system:
        new = await system.start(v2_late, "new")
        await system.send("orders/old", go, "ok")
        await system.send("orders/new", go, "ok")
        assert ["charged old", "ok"] == await system.get("orders/old").result()
        assert ["charged new", "ok", "audited"] == await new.result()
    assert ["audit new", "charge new", "charge old"] == sorted(CALLS)


async def test_the_old_branch_holds_over_every_wake_of_the_run(any_opener):
    # Dropped from memory at every suspension: each wake replays the run.
    @process("orders/:id")
    async def w1_twice(ctx: Context, id: str) -> list[str]:
        return [await ctx.wait(go), await ctx.wait(go)]

    @process("orders/:id")
    async def w2_twice(ctx: Context, id: str) -> list[str]:
        fee = ctx.patched("fee")
        got = [await ctx.wait(go), await ctx.wait(go)]
        return [*got, await ctx.step(charge_with_fee if fee else charge, id)]

    async with any_opener(w1_twice) as system:
        await wait_status(await system.start(w1_twice, "old"), "suspended")
    async with any_opener(w2_twice, passivate_after=0) as system:
        await system.send("orders/old", go, "a")
        await wait_quiescent(system)  # suspended at the second wait, on v2
        await system.send("orders/old", go, "b")
        assert ["a", "b", "charged old"] == await system.get("orders/old").result()


async def test_a_run_started_on_the_patched_code_keeps_the_new_branch(any_opener):
    async with any_opener(w2) as system:
        await wait_status(await system.start(w2, "a"), "suspended")  # its marker is logged
    async with any_opener(w2, passivate_after=0) as system:
        await system.send("orders/a", go, "ok")
        assert ["ok", "charged a with a fee"] == await system.get("orders/a").result()
    assert ["charge+fee a"] == CALLS


async def test_a_patch_after_the_first_wait_is_new_code_for_a_run_waiting_there(any_opener):
    # v1 stopped at the wait; what follows it runs for the first time on v2.
    @process("orders/:id")
    async def w2_after(ctx: Context, id: str) -> list[str]:
        got = await ctx.wait(go)
        if ctx.patched("fee"):
            return [got, await ctx.step(charge_with_fee, id)]
        return [got, await ctx.step(charge, id)]

    async with any_opener(w1) as system:
        await wait_status(await system.start(w1, "old"), "suspended")
    async with any_opener(w2_after) as system:
        await system.send("orders/old", go, "ok")
        assert ["ok", "charged old with a fee"] == await system.get("orders/old").result()


@process("restarting/:id", restart="transient")
async def restarting(ctx: Context, id: str) -> list[object]:
    fee = ctx.patched("fee")
    got = await ctx.wait(go)
    if ctx.run == 0:
        raise RuntimeError("crash")  # restarted: the next run is new
    return [fee, got]


async def test_a_restarted_run_is_new_though_loaded_from_the_journal(any_opener, autojump_clock):
    # The first run suspended (status "suspended"), then crashed; the restart
    # is a new run that the system loads from the journal before it runs.
    async with any_opener(restarting, passivate_after=0) as system:
        handle = await system.start(restarting, "r")
        await wait_status(handle, "suspended")
        await system.send("restarting/r", go, 1)
        while not handle.restarts:
            await trio.sleep(0.01)
        await wait_status(handle, "suspended")
        await system.send("restarting/r", go, 2)
        assert [True, 2] == await handle.result()


# -- SIGKILL: the v1 program is killed while its instance waits ------------------


async def _child(journal: str, acks: str) -> None:
    async with actors.open_system(
        LMDBJournal(journal), processes=[w1], passivate_after=0, now=virtual_wall
    ) as system:
        await wait_status(await system.start(w1, "old"), "suspended")
        await wait_quiescent(system)  # its suspension is durable
        Path(acks).write_text("S 1\n")
        await trio.sleep_forever()


async def test_a_run_killed_at_its_first_wait_keeps_the_old_branch(tmp_path):
    journal, acks = tmp_path / "journal", tmp_path / "acks"
    kill_after_acks(
        ["-m", "tests.kernel.test_patched", str(journal), str(acks)],
        stderr_path=tmp_path / "stderr",
        acked=lambda: len(acked_ids(acks)),
        min_acks=1,
        start_timeout=60.0,
        delay=0.0,
        label="the v1 program",
    )
    opener = Opener(tmp_path)
    async with opener(w2) as system:
        await system.send("orders/old", go, "ok")
        assert ["ok", "charged old"] == await system.get("orders/old").result()
    assert ["charge old"] == CALLS


if __name__ == "__main__":  # the v1 program of the SIGKILL test
    trio.run(_child, sys.argv[1], sys.argv[2])
