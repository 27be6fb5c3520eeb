"""Changing the code of running processes with ``ctx.patched`` and
``ctx.deprecate_patch``: each version of one process (one template) runs on
the histories the earlier versions recorded, across a close and reopen, and
``actors.testing.replay_check`` agrees."""

from __future__ import annotations

import pytest

import actors
from actors import Context, Signal, process
from actors.testing import replay_check
from tests.runtime_helpers import Opener, wait_status

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
