"""The runtime core through the public API: start, send, get, query, cancel,
handles, signal_with_start; durable paths across a close and reopen."""

from __future__ import annotations

from contextlib import aclosing

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import instance_id
from tests.runtime_helpers import wait_status

go = Signal("go")
other = Signal("other")


@process("echo/:name")
async def echo(ctx: Context, name: str, *, greeting: str = "hello") -> str:
    payload = await ctx.wait(go)
    return f"{greeting} {name} {payload}"


@process("quick/:name")
async def quick(ctx: Context, name: str) -> dict:
    return {"name": name}


@process("boom/:name")
async def boom(ctx: Context, name: str) -> None:
    raise ValueError(f"boom {name}")


async def test_start_send_result(any_opener):
    async with any_opener(echo) as system:
        handle = await system.start(echo, "ann", greeting="hi")
        assert handle.id == "echo/ann"
        await system.send("echo/ann", go, 42)
        assert await handle.result() == "hi ann 42"
        assert handle.status == "completed"


async def test_start_is_idempotent_and_returns_finished_as_is(opener):
    async with opener(echo, quick) as system:
        first = await system.start(echo, "ann")
        again = await system.start(echo, "ann", greeting="ignored")
        assert first == again
        done = await system.start(quick, "q")
        assert await done.result() == {"name": "q"}
        assert await (await system.start(quick, "q")).result() == {"name": "q"}
    async with opener(echo, quick) as system:
        # After a restart, still the same instance: not started a second time.
        handle = await system.start(echo, "ann", greeting="ignored")
        await system.send("echo/ann", go, 1)
        assert await handle.result() == "hello ann 1"


async def test_cancelled_instance_starts_afresh_and_old_handle_says_cancelled(opener):
    async with opener(echo) as system:
        old = await system.start(echo, "bob")
        assert await system.cancel("echo/bob") is True
        assert old.status == "cancelled"
        with pytest.raises(actors.ProcessCancelled):
            await old.result()
        new = await system.start(echo, "bob", greeting="again")
        assert new != old
        await system.send("echo/bob", go, "x")
        assert await new.result() == "again bob x"
        with pytest.raises(actors.ProcessCancelled):
            await old.result()
        assert await system.cancel("echo/bob") is False  # already finished


async def test_bad_calls_are_clear_errors(opener):
    async with opener(echo) as system:
        with pytest.raises(actors.InvalidArguments, match="takes 1 path param"):
            await system.start(echo, "a", "b")
        with pytest.raises(actors.InvalidArguments, match="without '/'"):
            await system.start(echo, "a/b")
        with pytest.raises(actors.InvalidArguments, match="does not fit"):
            await system.start(echo, "a", colour="red")
        with pytest.raises(actors.UnknownProcess, match="not registered"):
            await system.start(quick, "a")
        with pytest.raises(actors.UnknownProcess):
            await system.start("nope/:x", "a")
        with pytest.raises(actors.EncodeError, match=r"input\['greeting'\]"):
            await system.start(echo, "a", greeting=object())
        assert system.get("echo/a") is None


def test_reserved_keyword_names_are_rejected_at_definition():
    with pytest.raises(actors.InvalidArguments, match="reserved"):

        @process("x/:id")
        async def bad(ctx, id, *, restart=None):  # noqa: ARG001
            pass

    @process("x/:id")
    async def fine(ctx, id, *, timeout=None, retry=None):  # noqa: ARG001 - step's own, no clash
        pass

    with pytest.raises(actors.InvalidArguments, match="async def"):
        process("x/:id")(lambda ctx, id: None)
    with pytest.raises(actors.InvalidArguments, match="path params"):

        @process("x/:id/:other")
        async def short(ctx, id):  # noqa: ARG001
            pass


async def test_send_errors_store_nothing(opener):
    async with opener(echo, quick) as system:
        with pytest.raises(actors.NotDelivered) as info:
            await system.send("echo/nobody", go)
        assert info.value.reason == "unknown" and "start one first" in str(info.value)
        done = await system.start(quick, "q")
        await done.result()
        with pytest.raises(actors.NotDelivered) as info:
            await system.send("quick/q", go, 1)
        assert info.value.reason == "completed" and "it completed" in str(info.value)
        await system.start(echo, "e")
        with pytest.raises(actors.EncodeError) as info:
            await system.send("echo/e", go, {"items": [1, 2, 3, object()]})
        assert info.value.path == "payload['items'][3]"
        with system.journal.reader() as r:
            assert r.mailbox(instance_id("quick/q")) == []
            assert r.mailbox(instance_id("echo/e")) == []
            assert r.instance(instance_id("echo/nobody")) is None


async def test_payload_size_limit(opener):
    async with opener(echo, max_payload=100) as system:
        await system.start(echo, "e")
        with pytest.raises(actors.LimitExceeded, match="max_payload"):
            await system.send("echo/e", go, "x" * 1000)


async def test_sent_message_is_durable_before_send_returns(opener):
    async with opener(echo, passivate_after=0) as system:
        await system.start(echo, "d")
        await system.send("echo/d", other, "unmatched")
        await system.send("echo/d", go, "kept")
    async with opener(echo) as system:
        handle = system.get("echo/d")
        assert await handle.result() == "hello d kept"
        with system.journal.reader() as r:
            # The unmatched message stays for inspection after the end.
            assert [m[:2] for _, m in r.mailbox(instance_id("echo/d"))] == [["other", "unmatched"]]


async def test_failure_carries_type_and_message(opener):
    async with opener(boom) as system:
        handle = await system.start(boom, "x")
        with pytest.raises(actors.ProcessFailed) as info:
            await handle.result()
        assert "ValueError: boom x" in str(info.value)
        assert info.value.error_type == "builtins.ValueError"
        assert "Traceback" in info.value.error_traceback
    async with opener(boom) as system:
        with pytest.raises(actors.ProcessFailed, match="boom x"):
            await system.get("boom/x").result()


async def test_status_changes_and_get_after_restart(opener):
    async with opener(echo) as system:
        handle = await system.start(echo, "s")
        seen = []

        async def watch():
            async with aclosing(handle.status_changes()) as changes:
                async for status in changes:
                    seen.append(status)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await wait_status(handle, "suspended")
            await system.send("echo/s", go, 1)
        assert seen[-1] == "completed"
        assert "suspended" in seen
    async with opener(echo) as system:
        assert system.get("echo/s").status == "completed"
        assert system.get("echo/zzz") is None


async def test_query_by_status_and_process(opener):
    async with opener(echo, quick, boom) as system:
        for name in ("a", "b"):
            await system.start(echo, name)
            h = await system.start(quick, name)
            await h.result()
        h = await system.start(boom, "c")
        with pytest.raises(actors.ProcessFailed):
            await h.result()
        await wait_status(system.get("echo/b"), "suspended")
        rows = [i async for i in system.query(process=echo)]
        assert sorted(i.id for i in rows) == ["echo/a", "echo/b"]
        assert {i.status for i in rows} == {"suspended"}
        done = [i async for i in system.query(status="completed")]
        assert sorted(i.id for i in done) == ["quick/a", "quick/b"]
        assert [i.id async for i in system.query(status="failed", process="boom/:name")] == [
            "boom/c"
        ]
    async with opener(echo, quick, boom) as system:
        rows = [i async for i in system.query(status="suspended")]
        assert sorted(i.id for i in rows) == ["echo/a", "echo/b"]
        with pytest.raises(actors.InvalidArguments):
            [i async for i in system.query(status="sleeping")]


async def test_signal_with_start(opener):
    async with opener(echo, quick) as system:
        handle = await system.signal_with_start(
            echo, "w", signal=go, payload="first", greeting="yo"
        )
        assert await handle.result() == "yo w first"
        with pytest.raises(actors.NotDelivered):
            await system.signal_with_start(echo, "w", signal=go, payload="late")
        live = await system.start(echo, "v")
        await system.signal_with_start(echo, "v", signal=go, payload="queued")
        assert await live.result() == "hello v queued"
        assert await system.cancel("echo/v") is False
        await system.start(echo, "c")
        assert await system.cancel("echo/c")
        fresh = await system.signal_with_start(echo, "c", signal=go, payload="again")
        assert await fresh.result() == "hello c again"


async def test_second_system_on_one_journal_is_refused(opener):
    async with opener(echo):
        with pytest.raises(actors.JournalLocked, match="owned by another open system"):
            async with opener(echo):
                pass


async def test_awaiting_trio_inside_a_process_is_a_clear_error(opener):
    @process("bad/:id")
    async def bad(ctx: Context, id: str) -> None:
        await trio.sleep(1)

    async with opener(bad) as system:
        handle = await system.start(bad, "x")
        with pytest.raises(actors.ProcessFailed, match="only await ctx effects"):
            await handle.result()


async def test_cancel_of_a_passivated_instance(opener):
    async with opener(echo, passivate_after=0) as system:
        handle = await system.start(echo, "p")
        await wait_status(handle, "suspended")
        await trio.sleep(0.01)
    async with opener(echo) as system:
        assert await system.cancel("echo/p") is True
        with pytest.raises(actors.ProcessCancelled, match=r"system\.cancel"):
            await system.get("echo/p").result()
        with pytest.raises(actors.NotDelivered) as info:
            await system.send("echo/p", go)
        assert info.value.reason == "cancelled"


async def test_a_corrupt_record_does_not_keep_the_system_down(opener, tmp_path):
    import lmdb

    async with opener(echo) as system:
        await system.start(echo, "good")
        await system.start(echo, "bad")
    env = lmdb.open(str(opener.path), max_dbs=16)
    with env.begin(write=True, db=env.open_db(b"instances")) as t:
        value = t.get(instance_id("echo/bad"))
        # 0xc1 is never valid msgpack: the tail of the record no longer decodes
        t.put(instance_id("echo/bad"), value[:-10] + b"\xc1" * 10)
    env.close()
    async with opener(echo) as system:
        assert system.get("echo/bad").status == "corrupt"
        with pytest.raises(actors.JournalCorrupt):
            await system.get("echo/bad").result()
        await system.send("echo/good", go, 1)
        assert await system.get("echo/good").result() == "hello good 1"
