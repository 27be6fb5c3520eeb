"""Process code that awaits the runtime's own awaitables gets a ContextError
saying what to use, and the system stays up (it used to end the whole trio
run with TrioInternalError)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import trio

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


HELD = threading.Event()
LET_GO = threading.Event()


@process("holds-its-thread/:n")
async def holds_its_thread(ctx: Context, n: str) -> str:
    # Process code that blocks (badly) inside its own step: while it runs,
    # the guard names this instance in this thread only.
    HELD.set()
    LET_GO.wait(30)
    return "held"


def test_the_guard_of_one_thread_s_run_does_not_refuse_another_s() -> None:
    # Two systems, each run by trio in its own thread: one's process code is
    # running (in the middle of a step), the other's caller awaits a handle.
    def first() -> str:
        async def main() -> str:
            async with open_test_system([holds_its_thread]) as system:
                return await (await system.start(holds_its_thread, "a")).result()

        return trio.run(main)

    def second() -> str:
        async def main() -> str:
            async with open_test_system([worker]) as system:
                handle = await system.start(worker, "b")
                return await handle.result()  # not process code: no ContextError

        return trio.run(main)

    results: dict[str, object] = {}

    def keep(name: str, fn: Callable[[], str]) -> None:
        try:
            results[name] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            results[name] = exc

    holder = threading.Thread(target=keep, args=("first", first))
    holder.start()
    assert HELD.wait(30)
    try:
        keep("second", second)
    finally:
        LET_GO.set()
        holder.join(30)
    assert {"first": "held", "second": "ok"} == results
