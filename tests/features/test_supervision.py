"""Children, cascade cancellation and restart strategies, through the public
API on LMDB, durable paths across close and reopen."""

from __future__ import annotations

from itertools import pairwise

import pytest
import trio

import actors
from actors import Context, OneForAll, OneForOne, RestForOne, Signal, process
from actors.testing import wait_quiescent
from storage import Txn, instance_id
from tests.runtime_helpers import wait_status

go = Signal("go")
executions: list[str] = []


def work(tag: str) -> str:
    executions.append(tag)
    return tag


@pytest.fixture(autouse=True)
def _reset():
    executions.clear()
    crashes.clear()


@process("child/:name")
async def child(ctx: Context, name: str, *, fail: bool = False) -> str:
    await ctx.step(work, f"child {name}")
    value = await ctx.wait(go)
    if fail:
        raise RuntimeError(f"child {name} failed on purpose")
    return f"{name}:{value}"


@process("parent/:name")
async def parent(ctx: Context, name: str, *, fail: bool = False) -> str:
    result = await ctx.call(child, "c", fail=fail)
    return f"parent got {result}"


async def test_call_returns_the_childs_result_and_children_have_addresses(opener):
    async with opener(parent, child) as system:
        handle = await system.start(parent, "p")
        kid = system.get("parent/p/child/c")
        while kid is None:
            await trio.sleep(0.01)
            kid = system.get("parent/p/child/c")
        assert [i.id async for i in system.query(process=child)] == ["parent/p/child/c"]
        await system.send("parent/p/child/c", go, 5)
        assert await handle.result() == "parent got c:5"
        assert await kid.result() == "c:5"


async def test_call_failure_is_child_failed_in_the_parent(opener):
    @process("catcher/:name")
    async def catcher(ctx: Context, name: str) -> str:
        try:
            await ctx.call(child, "c", fail=True)
        except actors.ChildFailed as exc:
            return f"caught {exc.address}: {exc.error_type} {exc.error_message}"
        return "no"

    async with opener(catcher, child) as system:
        handle = await system.start(catcher, "x")
        await _send_when_ready(system, "catcher/x/child/c", go, 1)
        assert await handle.result() == (
            "caught catcher/x/child/c: builtins.RuntimeError child c failed on purpose"
        )


async def _send_when_ready(system, address, signal, payload=None):
    for _ in range(500):
        try:
            await system.send(address, signal, payload)
            return
        except actors.NotDelivered:
            await trio.sleep(0.01)
    raise AssertionError(f"{address} never appeared")


async def test_parent_suspended_on_call_resumes_after_restart_and_child_runs_once(opener):
    async with opener(parent, child, passivate_after=0) as system:
        await system.start(parent, "p")
        await _send_when_ready(system, "parent/p/child/c", Signal("nothing"))
        await wait_quiescent(system)
    async with opener(parent, child) as system:
        await system.send("parent/p/child/c", go, "later")
        assert await system.get("parent/p").result() == "parent got c:later"
    assert executions == ["child c"]  # the child's step ran once, across restarts


async def test_child_that_finished_while_the_system_was_down(opener, autojump_clock):
    @process("sleeper/:name")
    async def sleeper(ctx: Context, name: str) -> str:
        await ctx.sleep(86400)
        return "rested"

    @process("waiter/:name")
    async def waiter(ctx: Context, name: str) -> str:
        return await ctx.call(sleeper, "s")

    async with opener(waiter, sleeper) as system:
        await system.start(waiter, "w")
        await trio.sleep(3600)
    await trio.sleep(2 * 86400)
    async with opener(waiter, sleeper) as system:
        assert await system.get("waiter/w").result() == "rested"


@process("tree/:name")
async def tree(ctx: Context, name: str, *, depth: int, end: str = "wait") -> str:
    if depth > 0:
        await ctx.spawn(tree, "t", depth=depth - 1, end="wait")
    await ctx.step(work, ctx.id)
    if end == "fail":
        raise ValueError("parent fails")
    if end == "complete":
        return "done"
    await ctx.wait(go)
    return "released"


async def _three_levels(system, end):
    root = await system.start(tree, "r", depth=3, end=end)
    addresses = ["tree/r/tree/t", "tree/r/tree/t/tree/t", "tree/r/tree/t/tree/t/tree/t"]
    for address in addresses:
        while system.get(address) is None or system.get(address).status != "suspended":
            await trio.sleep(0.01)
    return root, [system.get(a) for a in addresses]


@pytest.mark.parametrize("end", ["complete", "fail", "cancel"])
async def test_cascade_through_three_levels(opener, end):
    async with opener(tree) as system:
        if end == "cancel":
            root, kids = await _three_levels(system, "wait")
            assert await system.cancel("tree/r")
            reason_word = "cancelled"
        else:
            # The root ends as soon as its step has run; wait for the tree first.
            root = await system.start(tree, "r", depth=3, end=end)
            with pytest.raises(actors.ProcessFailed) if end == "fail" else _nothing():
                await root.result()
            kids = [
                system.get(a)
                for a in ["tree/r/tree/t", "tree/r/tree/t/tree/t", "tree/r/tree/t/tree/t/tree/t"]
            ]
            reason_word = {"complete": "completed", "fail": "failed"}[end]
        for kid in kids:
            if kid is not None:
                assert await wait_status(kid, "cancelled") == "cancelled"
        assert kids[0] is None or kids[0].reason == f"parent tree/r {reason_word}"
    async with opener(tree) as system:
        statuses = [i.status async for i in system.query(process=tree)]
        assert set(statuses) <= {"cancelled", "completed", "failed"}
        if end == "cancel":
            assert statuses.count("cancelled") == 4
            assert system.get("tree/r/tree/t/tree/t").reason == ("parent tree/r/tree/t cancelled")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


async def test_cancel_of_a_passivated_tree_after_restart(opener):
    async with opener(tree, passivate_after=0) as system:
        await _three_levels(system, "wait")
        await wait_quiescent(system)
    async with opener(tree) as system:
        assert await system.cancel("tree/r")
        deepest = system.get("tree/r/tree/t/tree/t/tree/t")
        assert deepest.status == "cancelled"
        assert deepest.reason == "parent tree/r/tree/t/tree/t cancelled"


crashes: list[str] = []


@process("crashy/:name")
async def crashy(ctx: Context, name: str, *, times: int = 0, mode: str = "crash") -> str:
    done = await ctx.step(_count_crash, ctx.id)
    if done <= times:
        raise RuntimeError(f"crash {done}")
    if mode == "wait":
        await ctx.wait(go)
    return f"ok after {done - 1}"


def _count_crash(address: str) -> int:
    crashes.append(address)
    return crashes.count(address)


@process("sup/:name", supervision=OneForOne(max_restarts=3, within=5))
async def sup(ctx: Context, name: str, *, times: int, kind: str = "transient") -> str:
    kid = await ctx.spawn(crashy, "k", restart=kind, times=times, mode="wait")
    await ctx.wait(go)
    return kid.id


async def test_transient_child_is_restarted_with_reasons(opener, autojump_clock):
    async with opener(sup, crashy) as system:
        await system.start(sup, "s", times=2)
        kid_address = "sup/s/crashy/k"
        while system.get(kid_address) is None or system.get(kid_address).status != "suspended":
            await trio.sleep(0.01)
        kid = system.get(kid_address)
        assert [r["reason"] for r in kid.restarts] == [
            "restart 1 after RuntimeError('crash 1')",
            "restart 2 after RuntimeError('crash 2')",
        ]
        assert [r["count"] for r in kid.restarts] == [1, 2]
        await system.send(kid_address, go, 1)
        assert await kid.result() == "ok after 2"
    async with opener(sup, crashy) as system:
        assert len(system.get("sup/s/crashy/k").restarts) == 2


async def test_temporary_child_is_not_restarted_and_permanent_one_is(opener, autojump_clock):
    @process("supt/:name")
    async def supt(ctx: Context, name: str) -> None:
        await ctx.spawn(crashy, "tmp", restart="temporary", times=1)
        await ctx.spawn(crashy, "perm", restart="permanent", times=0)
        await ctx.wait(go)

    async with opener(supt, crashy) as system:
        await system.start(supt, "t")
        tmp = perm = None
        while tmp is None or perm is None:
            await trio.sleep(0.01)
            tmp, perm = system.get("supt/t/crashy/tmp"), system.get("supt/t/crashy/perm")
        with pytest.raises(actors.ProcessFailed, match="crash 1"):
            await tmp.result()
        assert tmp.restarts == []
        # A permanent child is restarted even after a normal exit, until the limit.
        while len(perm.restarts) < 3:
            await trio.sleep(0.1)
        assert perm.restarts[0]["reason"] == "restart 1 after exit"


async def test_intensity_limit_escalates_to_the_parent(opener, autojump_clock):
    async with opener(sup, crashy) as system:
        handle = await system.start(sup, "e", times=10)
        with pytest.raises(actors.ProcessFailed) as info:
            await handle.result()
        assert "ChildFailed" in str(info.value) and "restart limit" in str(info.value)
        kid = system.get("sup/e/crashy/k")
        assert kid.status == "failed"
        assert len(kid.restarts) == 3
        # Restarts backed off: 0.1 s, then 0.2 s (then 0.4 s before the third run).
        gaps = [b["at"] - a["at"] for a, b in pairwise(kid.restarts)]
        assert gaps == [pytest.approx(0.1, abs=0.02), pytest.approx(0.2, abs=0.02)]


@pytest.mark.parametrize(
    "strategy, restarted",
    [(OneForOne(), {"b"}), (OneForAll(), {"a", "b", "c"}), (RestForOne(), {"b", "c"})],
)
async def test_restart_strategies(opener, autojump_clock, strategy, restarted):
    @process("strat/:name", supervision=strategy)
    async def strat(ctx: Context, name: str) -> None:
        for kid in ("a", "b", "c"):
            await ctx.spawn(crashy, kid, times=1 if kid == "b" else 0, mode="wait")
        await ctx.wait(go)

    async with opener(strat, crashy) as system:
        await system.start(strat, "s")
        b = None
        while b is None or not b.restarts:
            await trio.sleep(0.05)
            b = system.get("strat/s/crashy/b")
        await trio.sleep(1)
        got = {k for k in "abc" if system.get(f"strat/s/crashy/{k}").restarts}
        assert got == restarted
        for k in restarted - {"b"}:
            assert (
                system.get(f"strat/s/crashy/{k}")
                .restarts[0]["reason"]
                .startswith("restart: sibling strat/s/crashy/b crashed")
            )


async def test_top_level_restart_type(opener, autojump_clock):
    @process("top/:name", restart="transient")
    async def top(ctx: Context, name: str) -> str:
        done = await ctx.step(_count_crash, ctx.id)
        if done < 3:
            raise RuntimeError(f"crash {done}")
        return "third time lucky"

    async with opener(top) as system:
        handle = await system.start(top, "t")
        assert await handle.result() == "third time lucky"
        assert len(handle.restarts) == 2


@process("item/:n")
async def item(ctx: Context, n: str, *, scale: int = 1) -> int:
    if n == "13":
        raise ValueError("unlucky")
    if n == "slow":
        await ctx.wait(go)
    return int(n) * scale


async def test_scope_runs_one_child_per_item(opener):
    @process("fan/:name")
    async def fan(ctx: Context, name: str, *, count: int) -> dict:
        return await ctx.scope(
            [str(i) for i in range(count)], item, key=int, input=lambda i: {"scale": 10}
        )

    async with opener(fan, item) as system:
        handle = await system.start(fan, "f", count=12)
        assert await handle.result() == {i: i * 10 for i in range(12)}


async def test_scope_failure_cancels_siblings_and_bad_scopes_start_nothing(opener):
    @process("fan2/:name")
    async def fan2(ctx: Context, name: str, *, items: list) -> object:
        try:
            return await ctx.scope(items, item)
        except actors.ChildFailed as exc:
            return f"failed: {exc.address}"
        except (actors.InvalidArguments, actors.LimitExceeded) as exc:
            return f"refused: {type(exc).__name__}"

    async with opener(fan2, item) as system:
        handle = await system.start(fan2, "a", items=["slow", "13"])
        assert await handle.result() == "failed: fan2/a/item/13"
        assert await wait_status(system.get("fan2/a/item/slow"), "cancelled") == "cancelled"
        dup = await system.start(fan2, "b", items=["1", "1"])
        assert await dup.result() == "refused: InvalidArguments"
        big = await system.start(fan2, "c", items=[str(i) for i in range(1001)])
        assert await big.result() == "refused: LimitExceeded"
        assert [i async for i in system.query(process=item) if "/fan2/b/" in i.id] == []


async def test_orphan_is_cancelled_at_recovery(opener):
    async with opener(tree, passivate_after=0) as system:
        await _three_levels(system, "wait")
        await wait_quiescent(system)
        # As if the system died right after the root completed, before its cascade:
        txn = Txn()
        txn.set_status(instance_id("tree/r"), "completed")
        await system.journal.commit(txn)
    async with opener(tree) as system:
        kid = system.get("tree/r/tree/t")
        assert kid.status == "cancelled"
        assert kid.reason == "parent tree/r completed"
        assert system.get("tree/r/tree/t/tree/t/tree/t").status == "cancelled"
