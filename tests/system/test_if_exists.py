"""Starting over an existing address: ``start(..., if_exists="return" | "error")``."""

from __future__ import annotations

import pytest

import actors
from actors import Context, Signal, process
from tests.runtime_helpers import wait_status

go = Signal("go")


@process("jobs/:id")
async def job(ctx: Context, id: str, *, fail: bool = False) -> str:
    payload = await ctx.wait(go)
    if fail:
        raise ValueError("no")
    return f"{id} {payload}"


async def test_error_names_the_instance_and_its_status(any_opener):
    async with any_opener(job) as system:
        handle = await system.start(job, "j1", if_exists="error")  # nothing there: started
        await wait_status(handle, "suspended")
        with pytest.raises(actors.AlreadyStarted) as caught:
            await system.start(job, "j1", if_exists="error")
        assert ("jobs/j1", "suspended") == (caught.value.address, caught.value.status)
        assert "an instance is already at 'jobs/j1' (suspended)" in str(caught.value)
        assert isinstance(caught.value, actors.ActorError)
        assert handle == await system.start(job, "j1")  # "return", the default
        assert handle == await system.start(job, "j1", if_exists="return")


@pytest.mark.parametrize("end", ["completed", "failed"])
async def test_finished_instances_are_kept_across_a_reopen(opener, end):
    async with opener(job) as system:
        handle = await system.start(job, "j", fail=end == "failed")
        await system.send("jobs/j", go, 1)
        assert end == await wait_status(handle, end)
    async with opener(job) as system:
        with pytest.raises(actors.AlreadyStarted, match=f"'jobs/j' \\({end}\\)") as caught:
            await system.start(job, "j", if_exists="error")
        assert end == caught.value.status
        assert end == (await system.start(job, "j")).status  # returned as it is


async def test_a_cancelled_instance_starts_a_new_incarnation_either_way(opener):
    async with opener(job) as system:
        await system.start(job, "c")
        assert await system.cancel("jobs/c")
        fresh = await system.start(job, "c", if_exists="error")
        await system.send("jobs/c", go, "again")
        assert "c again" == await fresh.result()


async def test_if_exists_takes_return_or_error(opener):
    async with opener(job) as system:
        with pytest.raises(actors.InvalidArguments, match="'return' or 'error'"):
            await system.start(job, "x", if_exists="replace")
        assert system.get("jobs/x") is None  # nothing was written


def test_if_exists_is_a_reserved_input_name():
    with pytest.raises(actors.InvalidArguments, match="if_exists"):

        @process("odd/:id")
        async def odd(ctx: Context, id: str, *, if_exists: str) -> None:
            pass
