"""Process code that awaits the runtime's own awaitables gets a ContextError
saying what to use, and the system stays up (it used to end the whole trio
run with TrioInternalError)."""

from __future__ import annotations

import pytest

import actors
from actors import Context, process
from actors.testing import open_test_system


@process("worker/:n")
async def worker(ctx: Context, n: str) -> str:
    return "ok"


@process("waits-on-handle/:n")
async def waits_on_handle(ctx: Context, n: str) -> str:
    child = await ctx.spawn(worker, "a")
    return await child.result()


@process("sends-directly/:n")
async def sends_directly(ctx: Context, n: str) -> None:
    await SYSTEM[0].send("worker/x", actors.Signal("hi"))


SYSTEM: list[actors.ActorSystem] = []


async def test_awaiting_a_child_handle_in_process_code_fails_that_process_only(
    autojump_clock: object,
) -> None:
    async with open_test_system([waits_on_handle, worker]) as system:
        handle = await system.start(waits_on_handle, "x")
        with pytest.raises(actors.ProcessFailed, match=r"handle\.result\(\).*ctx\.call"):
            await handle.result()
        # The system is still up: another instance runs to the end.
        assert "ok" == await (await system.start(worker, "later")).result()


async def test_system_calls_from_process_code_say_what_to_use(autojump_clock: object) -> None:
    async with open_test_system([sends_directly, worker]) as system:
        SYSTEM[:] = [system]
        handle = await system.start(sends_directly, "x")
        with pytest.raises(actors.ProcessFailed, match=r"system\.send\(\).*ctx\.step"):
            await handle.result()
        assert "failed" == handle.status
