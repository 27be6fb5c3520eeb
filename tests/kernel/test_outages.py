"""A journal that stops answering for a while: the system rides it out.

`Unreachable` is a `MemoryJournal` that, while ``down``, refuses every
read and write with `JournalUnavailable` (writes are not applied), as a
PostgreSQL journal does while its server is away. Virtual time (the
autojump clock) makes the outage minutes long and the recovery exact; the
real thing, through a TCP proxy in front of PostgreSQL, is in
tests/whole/test_multinode_faults.py.
"""

from __future__ import annotations

import logging

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import MemoryJournal, Txn
from storage._journal import Settled
from storage.errors import JournalUnavailable

ping = Signal("ping")
seen: list[str] = []


def note(what: str) -> None:
    seen.append(what)


@process("napper/:id")
async def napper(ctx: Context, id: str) -> str:
    await ctx.sleep(60)
    await ctx.step(note, f"woke {id}")
    return "rested"


@process("echo/:id")
async def echo(ctx: Context, id: str) -> None:
    while True:
        _signal, payload = await ctx.receive(ping)
        await ctx.step(note, payload)


class Unreachable(MemoryJournal):
    down = False

    def _refuse(self) -> None:
        if self.down:
            raise JournalUnavailable("the test's journal is down")

    async def read(self, fn):
        self._refuse()
        return await super().read(fn)

    def submit(self, txn: Txn):
        if self.down:
            return Settled(JournalUnavailable("the test's journal is down"))
        return super().submit(txn)


async def test_work_resumes_by_itself_once_the_journal_answers(autojump_clock, caplog):
    seen.clear()
    journal = Unreachable()
    caplog.set_level(logging.WARNING, logger="actors")
    async with actors.open_system(journal, processes=[napper, echo]) as system:
        nap = await system.start(napper, "n")
        box = await system.start(echo, "e")
        await system.send(box.id, ping, "before")
        await trio.sleep(1)
        assert ["before"] == seen
        journal.down = True
        await trio.sleep(30)
        with pytest.raises(JournalUnavailable):  # a caller learns of the outage
            await system.send(box.id, ping, "during")
        await trio.sleep(600)  # the napper's timer falls due meanwhile
        assert ["before"] == seen
        journal.down = False
        back_at = trio.current_time()
        assert "rested" == await nap.result()
        woke = trio.current_time() - back_at
        await system.send(box.id, ping, "after")
        await trio.sleep(1)
        assert ["before", "woke n", "after"] == seen
        assert 0 < woke <= 0.6, woke  # the probe's longest interval, and a reload
        assert "suspended" == box.status
    messages = [r.getMessage() for r in caplog.records]
    assert any("the journal does not answer" in m for m in messages), messages
    assert any("the journal answers again after" in m for m in messages), messages
