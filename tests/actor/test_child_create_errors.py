"""A journal error while a child is being created is the journal's, not the
parent's: the parent stalls (a full journal) or is loaded again (a lost
connection) and creates the child on its next try, as a step's write does.
Only a bad definition or input fails the parent.

`_FailsOnce` wraps a journal so that the first commit that writes the
child's record raises the error given (nothing of it is written), as a
journal that is momentarily full or unreachable does.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import actors
from actors import Context, process
from storage import LMDBJournal, MemoryJournal, Txn, instance_id
from storage._txn import PUT_INSTANCE
from storage.errors import JournalFull, JournalUnavailable
from tests.runtime_helpers import virtual_wall


@process("kid/:id")
async def kid(ctx: Context, id: str, *, n: int) -> int:
    return n * 2


@process("calls/:id")
async def caller(ctx: Context, id: str) -> int:
    return await ctx.call(kid, "k", n=21)


@process("spawns/:id")
async def spawner(ctx: Context, id: str) -> str:
    child = await ctx.spawn(kid, "k", n=21)
    await ctx.sleep(1)  # the child ends first: the parent's end would cancel it
    return child.id


class _FailsOnce:
    """Mixed into a journal: the first commit writing ``target``'s record
    raises ``error`` instead, writing nothing."""

    target: bytes = b""
    error: BaseException | None = None
    failed = 0

    async def commit(self, txn: Txn, *, durable: bool | None = None) -> list[int]:
        if self.error is not None and any(
            op[0] == PUT_INSTANCE and op[1] == self.target for op in txn.ops
        ):
            error, self.error = self.error, None
            self.failed += 1
            raise error
        return await super().commit(txn, durable=durable)  # type: ignore[misc, no-any-return]


class _MemoryFailsOnce(_FailsOnce, MemoryJournal):
    pass


class _LMDBFailsOnce(_FailsOnce, LMDBJournal):
    pass


def _journal(backend: str, tmp_path: Any) -> Any:
    if backend == "memory":
        return _MemoryFailsOnce()
    return _LMDBFailsOnce(tmp_path / "journal")


ERRORS = {
    "full": lambda: JournalFull("the test's journal is full, once"),
    "unavailable": lambda: JournalUnavailable("the test's journal is away, once"),
}


@pytest.mark.parametrize("backend", ["memory", "lmdb"])
@pytest.mark.parametrize("error", sorted(ERRORS))
async def test_a_call_rides_out_a_journal_error_at_the_childs_creation(
    autojump_clock, tmp_path, backend, error
):
    journal = _journal(backend, tmp_path)
    journal.target = instance_id("calls/c/kid/k")
    journal.error = ERRORS[error]()
    async with actors.open_system(journal, processes=[caller, kid], now=virtual_wall) as system:
        parent = await system.start(caller, "c")
        with trio.fail_after(120):
            assert 42 == await parent.result()
        assert 1 == journal.failed
        assert "completed" == parent.status
        child = system.get("calls/c/kid/k")
        assert child is not None
        assert 42 == await child.result()
        assert None is (await _info(system, parent.id)).last_error


@pytest.mark.parametrize("backend", ["memory", "lmdb"])
@pytest.mark.parametrize("error", sorted(ERRORS))
async def test_a_spawn_rides_out_a_journal_error_at_the_childs_creation(
    autojump_clock, tmp_path, backend, error
):
    journal = _journal(backend, tmp_path)
    journal.target = instance_id("spawns/s/kid/k")
    journal.error = ERRORS[error]()
    async with actors.open_system(journal, processes=[spawner, kid], now=virtual_wall) as system:
        parent = await system.start(spawner, "s")
        with trio.fail_after(120):
            assert "spawns/s/kid/k" == await parent.result()
        assert 1 == journal.failed
        child = system.get("spawns/s/kid/k")
        assert child is not None
        with trio.fail_after(10):
            assert 42 == await child.result()
        assert "completed" == (await _info(system, child.id)).status


async def test_a_bad_input_still_fails_the_parent(autojump_clock):
    @process("bad/:id")
    async def bad(ctx: Context, id: str) -> int:
        return await ctx.call(kid, "k", n=object())  # type: ignore[arg-type]

    async with actors.open_system(
        MemoryJournal(), processes=[bad, kid], now=virtual_wall
    ) as system:
        parent = await system.start(bad, "b")
        with trio.fail_after(10), pytest.raises(actors.ProcessFailed, match="EncodeError"):
            await parent.result()


async def _info(system: Any, address: str, status: str | None = None) -> Any:
    found = [info async for info in system.query(status=status) if info.id == address]
    assert 1 == len(found), found
    return found[0]
