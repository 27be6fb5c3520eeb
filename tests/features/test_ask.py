"""Request/reply through the public API: system.ask, ctx.ask, ctx.reply;
durable across a close and reopen of the system."""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal, decode, digest, encode, instance_id
from tests.runtime_helpers import Opener

add = Signal("add")
get = Signal("get")
stop = Signal("stop")
crash_point = Signal("crash_point")

# Set by a test to stop the counter's process between its take and its reply.
HOLD: dict[str, trio.Event] = {}
REACHED: set[str] = set()


async def _pause(key: str) -> None:
    event = HOLD.get(key)
    if event is not None:
        REACHED.add(key)
        await event.wait()


async def _until_reached(key: str) -> None:
    with trio.fail_after(10):
        while key not in REACHED:
            await trio.sleep(0.001)


async def _log_kinds(path, address: str) -> list[str]:
    """The kinds of the current run's log entries of ``address``, in order."""
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            iid = instance_id(address)
            row = r.instance(iid)
            log = r.log(iid, row.record.run)
    return [log[seq]["k"] for seq in sorted(log)]


@process("counter/:name")
async def counter(ctx: Context, name: str, *, total: int = 0) -> int:
    while True:
        signal, payload = await ctx.receive(add, get, stop)
        if signal is add:
            total += payload
            await ctx.step(_pause, name)  # a durable point between take and reply
            await ctx.reply(total)
        elif signal is get:
            await ctx.reply(total)
        else:
            return total


@process("silent/:name")
async def silent(ctx: Context, name: str) -> str:
    payload = await ctx.wait(add)
    return f"took {payload} and said nothing"


@process("twice/:name")
async def twice(ctx: Context, name: str) -> list[int]:
    first = await ctx.wait(add)
    await ctx.reply(first)
    await ctx.reply(first + 1000)  # answered already: a recorded no-op
    second = await ctx.wait(add)
    await ctx.reply(second)
    return [first, second]


@process("rolling/:name")
async def rolling(ctx: Context, name: str, *, total: int = 0) -> None:
    signal, payload = await ctx.receive(add, get)
    total += payload if signal is add else 0
    await ctx.reply(total)
    await ctx.continue_as_new(total=total)


@process("client/:name")
async def client(ctx: Context, name: str, *, target: str, amount: int) -> list[int]:
    got = [await ctx.ask(target, add, amount)]
    await ctx.step(_pause, f"client-{name}")
    got.append(await ctx.ask(target, get))
    return got


@process("impatient/:name")
async def impatient(ctx: Context, name: str, *, target: str) -> str:
    try:
        await ctx.ask(target, add, 1, timeout=30)
    except actors.AskTimeout as exc:
        return f"timeout after {exc.timeout}"
    return "replied"


@process("prober/:name")
async def prober(ctx: Context, name: str, *, target: str) -> str:
    try:
        await ctx.ask(target, add, 1)
    except actors.NotDelivered as exc:
        return f"{exc.reason}: {exc}"
    return "replied"


async def test_ask_gets_the_reply_and_send_to_the_same_process_is_a_noop(any_opener):
    async with any_opener(counter) as system:
        handle = await system.start(counter, "c")
        assert 5 == await system.ask("counter/c", add, 5)
        await system.send("counter/c", add, 10)  # sent, not asked: its reply is a no-op
        assert 15 == await system.ask("counter/c", get)
        assert 18 == await system.ask("counter/c", add, 3)
        await system.send("counter/c", stop)
        assert 18 == await handle.result()


async def test_concurrent_asks_each_get_their_own_reply(any_opener):
    async with any_opener(counter) as system:
        await system.start(counter, "c")
        results: dict[int, int] = {}

        async def one(k: int) -> None:
            results[k] = await system.ask("counter/c", add, 1)

        async with trio.open_nursery() as nursery:
            for k in range(20):
                nursery.start_soon(one, k)
        assert list(range(1, 21)) == sorted(results.values())


async def test_restart_between_take_and_reply_neither_loses_nor_repeats(tmp_path):
    opener = Opener(tmp_path)
    HOLD["c"] = trio.Event()  # the process stops after its take, inside a step
    try:
        async with opener(counter) as system:
            await system.start(counter, "c")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(system.ask, "counter/c", add, 7)
                await _until_reached("c")
                nursery.cancel_scope.cancel()  # the asker gives up; the system closes
        assert ["wait", "step"] == await _log_kinds(opener.path, "counter/c")  # no reply yet
        # Reopened: the take replays, the step and the reply run live, once.
        del HOLD["c"]
        async with opener(counter) as system:
            assert 7 == await system.ask("counter/c", get)
            assert 10 == await system.ask("counter/c", add, 3)
        kinds = ["wait", "step", "reply", "wait", "reply", "wait", "step", "reply"]
        assert kinds == await _log_kinds(opener.path, "counter/c")
        async with opener(counter) as system:
            assert 10 == await system.ask("counter/c", get)  # the replies replay, none runs
        assert [*kinds, "wait", "reply"] == await _log_kinds(opener.path, "counter/c")
    finally:
        HOLD.pop("c", None)
        REACHED.discard("c")


async def test_ask_timeout_is_an_actor_error_and_a_timeout_error(opener, autojump_clock):
    async with opener(counter) as system:
        HOLD["t"] = trio.Event()
        try:
            await system.start(counter, "t")
            start = trio.current_time()
            with pytest.raises(actors.AskTimeout) as caught:
                await system.ask("counter/t", add, 1, timeout=90)
            assert 90 == pytest.approx(trio.current_time() - start)
            assert isinstance(caught.value, TimeoutError)
            assert isinstance(caught.value, actors.ActorError)
            assert "counter/t" in str(caught.value)
            HOLD["t"].set()
            # The message stayed asked: its reply went to no one; the next ask works.
            assert 1 == await system.ask("counter/t", get)
        finally:
            HOLD.pop("t", None)


async def test_ask_an_unknown_or_finished_address_is_not_delivered(opener):
    async with opener(counter) as system:
        with pytest.raises(actors.NotDelivered) as caught:
            await system.ask("counter/nobody", get)
        assert "unknown" == caught.value.reason
        handle = await system.start(counter, "done")
        await system.send("counter/done", stop)
        await handle.result()
        with pytest.raises(actors.NotDelivered) as caught:
            await system.ask("counter/done", get)
        assert "completed" == caught.value.reason


async def test_instance_that_ends_without_replying_gives_not_delivered(opener):
    async with opener(silent) as system:
        await system.start(silent, "s")
        with pytest.raises(actors.NotDelivered, match="ended without replying") as caught:
            await system.ask("silent/s", add, 1)
        assert "completed" == caught.value.reason


async def test_cancel_answers_unread_asks_with_not_delivered(opener, autojump_clock):
    async with opener(counter) as system:
        HOLD["q"] = trio.Event()
        try:
            await system.start(counter, "q")
            outcomes: list[str] = []

            async def ask_one(amount: int) -> None:
                try:
                    await system.ask("counter/q", add, amount)
                    outcomes.append("replied")
                except actors.NotDelivered as exc:
                    outcomes.append(exc.reason)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask_one, 1)  # taken, then held before its reply
                await trio.sleep(1)
                nursery.start_soon(ask_one, 2)  # unread
                await trio.sleep(1)
                await system.cancel("counter/q")
            assert ["cancelled", "cancelled"] == outcomes
        finally:
            HOLD.pop("q", None)


async def test_second_reply_to_one_ask_is_a_noop(any_opener):
    async with any_opener(twice) as system:
        handle = await system.start(twice, "t")
        assert 1 == await system.ask("twice/t", add, 1)
        assert 2 == await system.ask("twice/t", add, 2)
        assert [1, 2] == await handle.result()


async def test_ask_across_continue_as_new(any_opener):
    async with any_opener(rolling) as system:
        await system.start(rolling, "r")
        assert [1, 3, 6, 6] == [
            await system.ask("rolling/r", add, 1),
            await system.ask("rolling/r", add, 2),
            await system.ask("rolling/r", add, 3),
            await system.ask("rolling/r", get, 0),
        ]


async def test_ctx_ask_from_a_process_is_durable_across_a_restart(tmp_path):
    opener = Opener(tmp_path)
    HOLD["client-a"] = trio.Event()
    try:
        async with opener(counter, client) as system:
            await system.start(counter, "c")
            await system.start(client, "a", target="counter/c", amount=4)
            await _until_reached("client-a")  # the first ask is answered; the client holds
        assert ["ask", "step"] == (await _log_kinds(opener.path, "client/a"))[:2]
        del HOLD["client-a"]
        async with opener(counter, client) as system:
            # The first ask replays from the client's log: it is not sent again
            # (the counter would say 8).
            handle = system.get("client/a")
            assert [4, 4] == await handle.result()
            assert 4 == await system.ask("counter/c", get)
    finally:
        HOLD.pop("client-a", None)
        REACHED.discard("client-a")


async def test_ctx_ask_timeout_and_not_delivered(opener, autojump_clock):
    async with opener(silent, impatient, prober) as system:
        done = await system.start(silent, "s")
        await system.send("silent/s", add, 0)  # it takes this and completes
        await done.result()
        late = await system.start(prober, "late", target="silent/s")
        assert (await late.result()).startswith("completed: no live instance at 'silent/s'")
        nobody = await system.start(prober, "nobody", target="silent/nobody")
        assert (await nobody.result()).startswith("unknown: no instance at 'silent/nobody'")
        await system.start(silent, "s2")
        ends = await system.start(prober, "ends", target="silent/s2")
        assert (await ends.result()).startswith("completed: 'silent/s2' ended without replying")
    async with opener(counter, impatient) as system:
        HOLD["slow"] = trio.Event()
        try:
            await system.start(counter, "slow")
            handle = await system.start(impatient, "i", target="counter/slow")
            assert "timeout after 30.0" == await handle.result()
        finally:
            HOLD.pop("slow", None)


async def test_ask_payload_and_reply_are_what_was_encoded(any_opener):
    seen: list[object] = []
    replied: list[object] = []

    @process("keeper/:name")
    async def keeper(ctx: Context, name: str) -> None:
        payload = await ctx.wait(add)
        seen.append(payload)
        value = {"got": payload, "tuple": (1, 2)}
        replied.append(value)
        await ctx.reply(value)

    async with any_opener(keeper) as system:
        await system.start(keeper, "k")
        sent = {"x": [1, 2]}
        reply = await system.ask("keeper/k", add, sent)
        assert decode(encode(replied[0])) == reply
        assert reply is not replied[0] and reply["got"] is not sent
        assert seen[0] is not sent


async def test_bad_ask_arguments_say_what_to_do(opener):
    async with opener(counter) as system:
        await system.start(counter, "c")
        with pytest.raises(actors.InvalidArguments, match=r"actors\.Signal"):
            await system.ask("counter/c", "add")  # type: ignore[arg-type]
        with pytest.raises(actors.InvalidArguments):
            await system.ask("counter/c", get, timeout=-1)
        with pytest.raises(actors.EncodeError):
            await system.ask("counter/c", add, object())


async def test_asks_through_passivation_at_every_suspension(any_opener):
    # Each ask activates the counter and replays its takes and replies.
    async with any_opener(counter, passivate_after=0) as system:
        await system.start(counter, "p")
        for n in range(1, 6):
            assert n * (n + 1) // 2 == await system.ask("counter/p", add, n)
        await system.send("counter/p", add, 100)  # unread while passivated, then taken
        assert 115 == await system.ask("counter/p", get)


@process("fragile/:name")
async def fragile(ctx: Context, name: str) -> None:
    await ctx.wait(add)
    raise RuntimeError("lost the thread")  # crashes before its reply


@process("keeper/:name", supervision=actors.OneForOne(max_restarts=5, within=60))
async def keeper_of_fragile(ctx: Context, name: str) -> None:
    await ctx.spawn(fragile, "f")
    await ctx.wait(stop)


async def test_a_restart_of_the_run_that_took_an_ask_says_so(opener, autojump_clock):
    async with opener(fragile, keeper_of_fragile) as system:
        await system.start(keeper_of_fragile, "k")
        while system.get("keeper/k/fragile/f") is None:
            await trio.sleep(0.01)
        with pytest.raises(actors.NotDelivered, match="was restarted") as caught:
            await system.ask("keeper/k/fragile/f", add, 1)
        assert "restarted" == caught.value.reason


def test_a_cancel_written_by_the_cli_answers_an_asking_instance(tmp_path):
    from tests.tools.test_cli import run_cli

    opener = Opener(tmp_path)
    HOLD["c"] = trio.Event()  # the counter holds before its reply

    async def ask_and_close() -> None:
        async with opener(counter, prober) as system:
            await system.start(counter, "c")
            await system.start(prober, "p", target="counter/c")
            await _until_reached("c")

    async def reopen() -> str:
        async with opener(counter, prober) as system:
            return await system.get("prober/p").result()

    try:
        trio.run(ask_and_close)
        done = run_cli(opener.path, "cancel", "counter/c")
        assert 0 == done.returncode, done.stderr
        del HOLD["c"]
        assert trio.run(reopen).startswith("cancelled: 'counter/c' ended without replying")
    finally:
        HOLD.pop("c", None)
        REACHED.discard("c")


async def test_asks_still_waiting_when_the_system_closes_get_journal_closed(tmp_path):
    opener = Opener(tmp_path)
    HOLD["z"] = trio.Event()
    errors: list[BaseException] = []

    async def asker(system) -> None:
        try:
            await system.ask("counter/z", add, 1)
        except actors.JournalClosed as exc:
            errors.append(exc)

    try:
        async with trio.open_nursery() as outside, opener(counter) as system:
            await system.start(counter, "z")
            outside.start_soon(asker, system)
            await _until_reached("z")
        assert 1 == len(errors) and "closed while an ask of 'counter/z'" in str(errors[0])
    finally:
        HOLD.pop("z", None)
        REACHED.discard("z")


async def test_a_reply_to_a_sent_message_is_recorded_and_replays(tmp_path):
    opener = Opener(tmp_path)
    async with opener(counter) as system:
        await system.start(counter, "n")
        await system.send("counter/n", add, 2)  # its ctx.reply answers no one
        assert 2 == await system.ask("counter/n", get)
    async with LMDBJournal(opener.path) as journal:
        with journal.reader() as r:
            log = r.log(instance_id("counter/n"), 0)
    replies = [entry["n"] for _, entry in sorted(log.items()) if entry["k"] == "reply"]
    assert 2 == len(replies)
    assert "" == replies[0] and "" != replies[1]  # the no-op, then the answer (its ask id)
    async with opener(counter) as system:  # both replay; the counter goes on
        assert 5 == await system.ask("counter/n", add, 3)


async def test_a_reply_records_the_digest_of_its_value(tmp_path):
    # ctx.reply hashes the one encoding it also copies the answer from:
    # the hash is `digest`'s, as every journal written before holds it.
    opener = Opener(tmp_path)
    async with opener(counter) as system:
        await system.start(counter, "d")
        await system.send("counter/d", add, 2)  # a reply to a sent message
        assert 2 == await system.ask("counter/d", get)  # and one to an ask
    async with LMDBJournal(opener.path) as journal:
        with journal.reader() as r:
            log = r.log(instance_id("counter/d"), 0)
    hashes = [entry["h"] for _, entry in sorted(log.items()) if entry["k"] == "reply"]
    assert [digest(2), digest(2)] == hashes
