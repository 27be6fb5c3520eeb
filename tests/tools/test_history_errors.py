"""Errors of the documented types, with messages that say what to do: the
history helpers of `actors.testing` refuse a path that is no history file
and arguments of the wrong kind with `HistoryFormatError` and
`InvalidArguments` (never a bare OSError or TypeError); ``ctx.send_many``
of no collection is `InvalidArguments`; ``system.dropped`` of an address
where no instance is raises `NotDelivered`, as ``system.mail`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

import actors
from actors import Context, Signal, process
from actors.testing import import_history, open_test_system, replay_check, replay_history
from storage import MemoryJournal

GOLDEN = Path(__file__).resolve().parents[1] / "history_v1.history"
ping = Signal("ping")


@process("batch/:id")
async def batch(ctx: Context, id: str) -> str:
    try:
        await ctx.send_many(5)  # type: ignore[arg-type]
    except actors.InvalidArguments as exc:
        return str(exc)
    return "sent"


@process("idle/:id")
async def idle(ctx: Context, id: str) -> None:
    await ctx.wait(ping)


async def test_replay_history_refuses_a_path_that_is_no_history_file(tmp_path):
    with pytest.raises(actors.HistoryFormatError, match=r"no history file at .*export") as found:
        await replay_history(tmp_path / "absent.history", [idle])
    assert isinstance(found.value.__cause__, FileNotFoundError)
    with pytest.raises(actors.HistoryFormatError, match="is a directory, not a history file"):
        await replay_history(tmp_path, [idle])
    with pytest.raises(actors.InvalidArguments, match=r"path of a history file.*not 5"):
        await replay_history(5, [idle])  # type: ignore[arg-type]
    with pytest.raises(actors.InvalidArguments, match=r"@actors\.process definitions, not 5"):
        await replay_history(GOLDEN, 5)  # type: ignore[arg-type]
    with pytest.raises(actors.InvalidArguments, match="one is 'idle'"):
        await replay_history(GOLDEN, ["idle"])  # type: ignore[list-item]
    with pytest.raises(actors.InvalidArguments, match="replay_check's processes"):
        await replay_check(MemoryJournal(), 5)  # type: ignore[arg-type]


async def test_import_history_refuses_alike(tmp_path):
    with pytest.raises(actors.HistoryFormatError, match="no history file at"):
        await import_history(tmp_path / "absent.history", MemoryJournal())
    with pytest.raises(actors.HistoryFormatError, match="is a directory"):
        await import_history(tmp_path, MemoryJournal())
    with pytest.raises(actors.InvalidArguments, match="the journal to import into"):
        await import_history(GOLDEN, str(tmp_path / "journal"))  # type: ignore[arg-type]


async def test_ctx_send_many_of_no_collection_is_invalid_arguments(autojump_clock):
    async with open_test_system([batch]) as system:
        handle = await system.start(batch, "b-1")
        message = await handle.result()
    assert "ctx.send_many takes a collection" in message and "not 5" in message


async def test_dropped_and_mail_agree_on_an_unknown_address(autojump_clock):
    async with open_test_system([idle]) as system:
        for read in (system.mail, system.dropped):
            with pytest.raises(actors.NotDelivered, match="no instance at 'idle/nobody'"):
                await read("idle/nobody")
        await system.start(idle, "i-1")
        assert [] == await system.dropped("idle/i-1")  # there, and nothing dropped
