"""Names and path params with NUL or other control characters are refused at
the call, with `InvalidArguments` saying what to do, on every journal
(memory, LMDB, PostgreSQL: the `make_journal` fixture runs each test on all
three), and nothing is stored; printable text, non-ASCII included, is taken.

(PostgreSQL's text cannot hold NUL: before, such a name failed there at the
commit or on the next read, while LMDB took it.)"""

from __future__ import annotations

import pytest

import actors
from actors import Context, Queue, Signal, process
from actors._kernel._checks import check_name, check_text
from storage import instance_id
from tests.runtime_helpers import virtual_wall

go = Signal("go")

CONTROL = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))]  # Unicode's Cc
REFUSED = [
    "a\x00b",
    "\x00",
    "\x00key x",
    "\x1fkey x",
    "line\nbreak",
    "tab\there",
    "del\x7f",
    "é\x85",
]
PRINTABLE = ["café", "名前", "👩‍💻 dev", "a b", "no\u00a0break", "x\u2028y", "~!@#$%^&*()"]
HOW = "control character.*remove it"


@process("job/:name")
async def job(ctx: Context, name: str) -> str:
    return name


@process("feed/:name")
async def feed(ctx: Context, name: str) -> None:
    while True:
        await ctx.emit(await ctx.wait(go))


@process("report/:region/:tick")
async def report(ctx: Context, region: str, tick: str) -> str:
    return f"{region} {tick}"


@process("parent/:name")
async def parent(ctx: Context, name: str, *, child_param: str) -> str:
    try:
        call = ctx.call(job, child_param)
    except actors.InvalidArguments as exc:
        return f"refused: {exc}"
    return f"called: {await call}"


def open_on(make_journal, *processes, **kw):
    return actors.open_system(make_journal(), processes=list(processes), now=virtual_wall, **kw)


async def addresses(system) -> list[str]:
    return sorted([info.id async for info in system.query()])


def test_every_control_character_is_refused_and_printable_text_taken():
    for char in CONTROL:
        with pytest.raises(actors.InvalidArguments, match=HOW) as caught:
            check_text(f"ab{char}c", "a name")
        assert "at index 2" in str(caught.value)
        with pytest.raises(actors.InvalidArguments, match=HOW):
            check_name(f"{char}", "a name")
    for text in PRINTABLE:
        assert text == check_text(text, "a name") == check_name(text, "a name")
    with pytest.raises(actors.InvalidArguments, match="lone surrogate"):
        check_text("a\ud800", "a name")  # still refused, before any control character


async def test_stream_consumer_names_with_control_characters_are_refused(make_journal):
    async with open_on(make_journal, feed) as system:
        await system.start(feed, "a")
        await system.send("feed/a", go, 1)
        for name in REFUSED:
            with pytest.raises(actors.InvalidArguments, match=HOW):
                system.stream("feed/a", consumer=name)
        for name in PRINTABLE:
            async with system.stream("feed/a", consumer=name) as stream:
                async for value in stream:
                    assert 1 == value
                    break
        consumers = await system.journal.read(lambda r: r.cursors(instance_id("feed/a")))
    assert sorted(PRINTABLE) == sorted(consumers)
    async with open_on(make_journal, feed) as system:  # the journal reads back whole
        assert ["feed/a"] == await addresses(system)


async def test_queue_names_with_control_characters_are_refused(make_journal):
    for name in REFUSED:
        with pytest.raises(actors.InvalidArguments, match=HOW):
            Queue(name, concurrency=1)
    queue = Queue("jobs café", concurrency=1)  # printable: taken on every journal
    async with open_on(make_journal, job, queues=[queue]) as system:
        handle = await system.start(job, "a", queue=queue)
        assert "a" == await handle.result()
        assert 0 == (await system.queue_info(queue)).waiting
    async with open_on(make_journal, job, queues=[queue]) as system:
        assert "jobs café" == (await system.queue_info("jobs café")).name


async def test_schedule_names_with_control_characters_are_refused(make_journal):
    async with open_on(make_journal, job, report) as system:
        for name in REFUSED:
            with pytest.raises(actors.InvalidArguments, match=HOW):
                await system.schedule(name, report, every=3600.0, params=["eu"])
        await system.schedule("nightly café", report, every=3600.0, params=["eu"])
        assert ["nightly café"] == [info.name for info in await system.list_schedules()]
    async with open_on(make_journal, job, report) as system:  # nothing broken was stored
        assert ["nightly café"] == [info.name for info in await system.list_schedules()]


async def test_schedule_params_with_control_characters_are_refused(make_journal):
    async with open_on(make_journal, job, report) as system:
        for param in REFUSED:
            with pytest.raises(actors.InvalidArguments, match=HOW):
                await system.schedule("s", report, every=3600.0, params=[param])
        assert [] == await system.list_schedules()


async def test_child_path_params_with_control_characters_are_refused(make_journal):
    async with open_on(make_journal, job, parent) as system:
        for n, param in enumerate(REFUSED):
            handle = await system.start(parent, f"p{n}", child_param=param)
            result = await handle.result()
            assert result.startswith("refused: ") and "control character" in result, result
        done = await system.start(parent, "ok", child_param="café")
        assert "called: café" == await done.result()
        assert "parent/ok/job/café" in await addresses(system)
    async with open_on(make_journal, job, parent) as system:
        assert 2 + len(REFUSED) == len(await addresses(system))


async def test_non_ascii_path_params_with_control_characters_are_refused(make_journal):
    async with open_on(make_journal, job) as system:
        for param in ("é\x00", "名前\n", "café\x85", "é\x1fkey"):
            with pytest.raises(actors.InvalidArguments, match=HOW):
                await system.start(job, param)
            with pytest.raises(actors.InvalidArguments, match=HOW):
                await system.signal_with_start(job, param, signal=go)
        for param in PRINTABLE:
            assert param == await (await system.start(job, param)).result()
        assert sorted(f"job/{p}" for p in PRINTABLE) == await addresses(system)
    async with open_on(make_journal, job) as system:
        assert len(PRINTABLE) == len(await addresses(system))


async def test_ascii_path_params_with_control_characters_are_refused(make_journal):
    async with open_on(make_journal, job) as system:
        for param in ("a\x00b", "\x00", "line\n", "tab\t", "del\x7f"):
            with pytest.raises(actors.InvalidArguments, match=HOW):
                await system.start(job, param)
            with pytest.raises(actors.InvalidArguments, match=HOW):
                await system.signal_with_start(job, param, signal=go)
        assert [] == await addresses(system)


async def test_an_address_with_control_characters_is_refused_at_the_call(make_journal):
    async with open_on(make_journal, job) as system:
        with pytest.raises(actors.InvalidArguments, match=HOW):
            await system.send("job/a\x00", go, None)
        with pytest.raises(actors.InvalidArguments, match=HOW):
            system.stream("job/a\x00", consumer="c")
