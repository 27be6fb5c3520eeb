"""``ctx.send`` and ``ctx.send_many`` through the public API: a process
sends to another instance's mailbox, durably and once.

The `make_journal` fixture runs the journal-level tests on memory, LMDB and
PostgreSQL; two nodes on one PostgreSQL schema send across; and a real
program (tests/crash_child_ctx_send.py) sending 1,000 messages one by one
is killed with SIGKILL again and again, after which the receiver must have
each exactly once, in order.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import open_test_system
from storage import LMDBJournal, instance_id
from tests import crash_child_ctx_send as crash_child
from tests.crash_kit import acked_ids, kill_after_acks
from tests.runtime_helpers import virtual_wall

item = Signal("item")
done = Signal("done")
go = Signal("go")
seen = Signal("seen")


@process("inbox/:name")
async def inbox(ctx: Context, name: str) -> list:
    """Takes items until ``done``; gives them in the order taken. ``seen``
    (asked) replies with the items so far."""
    taken: list = []
    while True:
        signal, payload = await ctx.receive(item, seen, done)
        if signal is done:
            return taken
        if signal is seen:
            await ctx.reply(taken)
        else:
            taken.append(payload)


@process("once/:name")
async def once(ctx: Context, name: str) -> str:
    return "over"


@process("outbox/:name")
async def outbox(ctx: Context, name: str, *, to: str, first: list, then: list) -> int:
    """Sends ``first``, waits for ``go``, sends ``then`` and ``done``."""
    for payload in first:
        await ctx.send(to, item, payload)
    await ctx.wait(go)
    for payload in then:
        await ctx.send(to, item, payload)
    await ctx.send(to, done)
    return len(first) + len(then)


@process("mutating/:name")
async def mutating(ctx: Context, name: str, *, to: str) -> None:
    payload = {"n": 1, "tags": ["a"]}
    await ctx.send(to, item, payload)
    payload["n"] = 2  # after the send: the message holds what was encoded
    payload["tags"].append("b")
    await ctx.send(to, item, (1, 2))
    await ctx.send(to, done)


@process("selfish/:name")
async def selfish(ctx: Context, name: str) -> list:
    await ctx.send(ctx.id, item, "to me")
    await ctx.send(ctx.id, item, "again")
    return [await ctx.wait(item), await ctx.wait(item)]


@process("hopeful/:name")
async def hopeful(ctx: Context, name: str, *, targets: list) -> list:
    """Sends to each target; records what each send gave; waits for ``go``."""
    outcomes = []
    for target in targets:
        try:
            await ctx.send(target, item, f"for {target}")
        except actors.NotDelivered as exc:
            outcomes.append([exc.reason, exc.address, str(exc)])
        else:
            outcomes.append("sent")
    await ctx.wait(go)
    return outcomes


@process("careless/:name")
async def careless(ctx: Context, name: str) -> None:
    await ctx.send("inbox/nobody", item, 1)  # NotDelivered, not caught: fails


@process("keyed/:name")
async def keyed(ctx: Context, name: str, *, to: str, sends: list, round: int = 0) -> int:
    """Sends ``[payload, key]`` pairs; continues as new once, sending them again."""
    for payload, key in sends:
        await ctx.send(to, item, payload, key=key)
    if round == 0:
        await ctx.continue_as_new(to=to, sends=sends, round=1)
    await ctx.wait(go)
    return round


@process("bad/:name")
async def bad(ctx: Context, name: str, *, to: str) -> list:
    """Each kind of bad send, caught in the process."""
    caught = []
    for payload in ({"ok": [1, object()]}, b"x" * 400):
        try:
            await ctx.send(to, item, payload)
        except (actors.EncodeError, actors.LimitExceeded) as exc:
            caught.append([type(exc).__name__, getattr(exc, "path", "")])
    for args, kw in (
        ((to, "item", 1), {}),
        ((to, item, 1), {"key": ""}),
        (("", item, 1), {}),
        ((to, item, 1), {"key": "k" * 201}),
    ):
        try:
            await ctx.send(*args, **kw)
        except (actors.InvalidArguments, actors.LimitExceeded) as exc:
            caught.append([type(exc).__name__, ""])
    await ctx.send(to, item, "fine")
    await ctx.send(to, done)
    return caught


@process("batch/:name")
async def batch(ctx: Context, name: str, *, messages: list) -> list:
    """send_many of ``[address, payload]`` pairs, then waits for ``go``."""
    try:
        await ctx.send_many([(address, item, payload) for address, payload in messages])
    except actors.NotDelivered as exc:
        outcome = [exc.reason, exc.address]
    else:
        outcome = ["sent"]
    await ctx.wait(go)
    return outcome


def open_on(make_journal, *processes, **kw):
    """A system on the store of ``make_journal`` (a fresh journal object on
    the same data each time, as a restarted program would have)."""
    kw.setdefault("now", virtual_wall)
    return actors.open_system(make_journal(), processes=list(processes), **kw)


async def stored_messages(make_journal, address: str) -> int:
    """How many messages were ever stored for ``address`` (its mailbox counter)."""
    async with make_journal() as journal:
        return await journal.read(lambda r: r.last_message_seq(instance_id(address)))


async def test_messages_arrive_once_in_order_as_encoded(make_journal):
    with trio.fail_after(30):
        async with open_on(make_journal, inbox, outbox, mutating) as system:
            receiver = await system.start(inbox, "a")
            sender = await system.start(
                outbox, "s", to="inbox/a", first=[1, "two", [3], {"four": 4}], then=[]
            )
            await system.send("outbox/s", go)
            assert 4 == await sender.result()
            assert [1, "two", [3], {"four": 4}] == await receiver.result()

            receiver = await system.start(inbox, "m")
            await system.start(mutating, "m", to="inbox/m")
            assert [{"n": 1, "tags": ["a"]}, (1, 2)] == await receiver.result()
    assert 3 == await stored_messages(make_journal, "inbox/m")


async def test_a_process_sends_to_itself():
    async with open_test_system([selfish]) as system:
        handle = await system.start(selfish, "me")
        with trio.fail_after(10):
            assert ["to me", "again"] == await handle.result()


async def test_a_replay_sends_nothing_again(make_journal):
    with trio.fail_after(30):
        async with open_on(make_journal, inbox, outbox) as system:
            await system.start(inbox, "a")
            await system.start(outbox, "s", to="inbox/a", first=[1, 2, 3], then=[4, 5])
            asks = 1
            while [1, 2, 3] != await system.ask("inbox/a", seen):
                asks += 1
                await trio.sleep(0.01)
        # The sender replays its three sends on reopen (it waits for go).
        async with open_on(make_journal, inbox, outbox) as system:
            await system.send("outbox/s", go)
            assert 5 == await system.get("outbox/s").result()
            assert [1, 2, 3, 4, 5] == await system.get("inbox/a").result()
    # Never a message stored twice: the items, the asks and done.
    assert 5 + asks + 1 == await stored_messages(make_journal, "inbox/a")


async def test_every_step_replayed():
    # always_replay: each instance is dropped at every suspension, so the
    # sender replays all its sends each time it wakes.
    async with open_test_system([inbox, outbox], always_replay=True) as system:
        receiver = await system.start(inbox, "a")
        sender = await system.start(outbox, "s", to="inbox/a", first=[1, 2], then=[3])
        with trio.fail_after(10):
            while [1, 2] != await system.ask("inbox/a", seen):
                await trio.sleep(0.01)
            await system.send("outbox/s", go)
            assert 3 == await sender.result()
            assert [1, 2, 3] == await receiver.result()


async def test_not_delivered_is_recorded_and_raised_again_on_replay(make_journal):
    targets = ["inbox/later", "once/o", "inbox/here"]
    with trio.fail_after(30):
        async with open_on(make_journal, inbox, once, hopeful) as system:
            assert "over" == await (await system.start(once, "o")).result()
            await system.start(inbox, "here")
            await system.start(hopeful, "h", targets=targets)
            while ["for inbox/here"] != await system.ask("inbox/here", seen):
                await trio.sleep(0.01)
        # Meanwhile an instance appears at the address that had none: the
        # replay raises the recorded NotDelivered and sends it nothing.
        async with open_on(make_journal, inbox, once, hopeful) as system:
            later = await system.start(inbox, "later")
            await system.send("hopeful/h", go)
            outcomes = await system.get("hopeful/h").result()
            await system.send("inbox/later", done)
            assert [] == await later.result()
    assert ["unknown", "inbox/later"] == outcomes[0][:2]
    assert "no instance at 'inbox/later'" in outcomes[0][2]
    assert ["completed", "once/o"] == outcomes[1][:2]
    assert "it completed" in outcomes[1][2]
    assert "sent" == outcomes[2]
    assert 1 == await stored_messages(make_journal, "inbox/later")  # done only
    assert 0 == await stored_messages(make_journal, "once/o")


async def test_an_uncaught_not_delivered_fails_the_process(any_opener):
    async with any_opener(careless) as system:
        handle = await system.start(careless, "c")
        with trio.fail_after(10), pytest.raises(actors.ProcessFailed, match="NotDelivered"):
            await handle.result()


async def test_keyed_sends_follow_system_send(make_journal):
    sends = [["a", "k1"], ["a again", "k1"], ["b", "k2"], ["c", None]]
    with trio.fail_after(30):
        async with open_on(make_journal, inbox, keyed) as system:
            await system.start(inbox, "a")
            await system.send("inbox/a", item, "from outside", key="k3")
            # The second run (after continue-as-new) sends the same keys again.
            await system.start(keyed, "k", to="inbox/a", sends=[*sends, ["x", "k3"]])
            while ["from outside", "a", "b", "c", "c"] != await system.ask("inbox/a", seen):
                await trio.sleep(0.01)
            await system.send("inbox/a", item, "a from outside", key="k1")
        async with open_on(make_journal, inbox, keyed) as system:
            await system.send("keyed/k", go)
            assert 1 == await system.get("keyed/k").result()
            await system.send("inbox/a", done)
            assert ["from outside", "a", "b", "c", "c"] == await system.get("inbox/a").result()


async def test_bad_payloads_and_arguments_raise_in_the_process(any_opener):
    async with any_opener(inbox, bad, max_payload=300) as system:
        receiver = await system.start(inbox, "a")
        sender = await system.start(bad, "b", to="inbox/a")
        with trio.fail_after(10):
            assert [
                ["EncodeError", "payload['ok'][1]"],
                ["LimitExceeded", ""],
                ["InvalidArguments", ""],
                ["InvalidArguments", ""],
                ["InvalidArguments", ""],
                ["LimitExceeded", ""],
            ] == await sender.result()
            assert ["fine"] == await receiver.result()  # nothing else was stored


async def test_send_many_stores_all_or_none(make_journal):
    with trio.fail_after(30):
        async with open_on(make_journal, inbox, batch) as system:
            await system.start(inbox, "x")
            await system.start(inbox, "y")
            await system.start(
                batch, "ok", messages=[["inbox/x", 1], ["inbox/y", 2], ["inbox/x", 3]]
            )
            await system.start(
                batch, "no", messages=[["inbox/x", 4], ["inbox/none", 5], ["inbox/y", 6]]
            )
            await system.start(batch, "empty", messages=[])  # nothing to send
            while [1, 3] != await system.ask("inbox/x", seen):
                await trio.sleep(0.01)
        async with open_on(make_journal, inbox, batch) as system:
            for address in ("batch/ok", "batch/no", "batch/empty", "inbox/x", "inbox/y"):
                await system.send(address, go if address.startswith("batch") else done)
            # The batches replay: the refused one raises NotDelivered again.
            assert ["sent"] == await system.get("batch/ok").result()
            assert ["unknown", "inbox/none"] == await system.get("batch/no").result()
            assert ["sent"] == await system.get("batch/empty").result()
            assert [1, 3] == await system.get("inbox/x").result()
            assert [2] == await system.get("inbox/y").result()


# -- two nodes on PostgreSQL ------------------------------------------------------------


@pytest.fixture
def two_nodes(request):
    """Open systems "a" and "b" on one fresh schema: ``async with two_nodes(procs) as (a, b)``."""
    if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
        pytest.skip("PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from contextlib import asynccontextmanager

    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)

    @asynccontextmanager
    async def both(processes):
        journal_a = PostgresJournal(dsn, schema=schema, lease_timeout=3.0)
        journal_b = PostgresJournal(dsn, schema=schema, lease_timeout=3.0)
        async with (
            actors.open_system(journal_a, processes=processes, node="a") as a,
            actors.open_system(journal_b, processes=processes, node="b") as b,
        ):
            yield a, b

    return both


async def test_a_sender_on_one_node_reaches_a_receiver_on_another(two_nodes):
    payloads = list(range(40))
    async with two_nodes([inbox, outbox, once, hopeful]) as (a, b):
        with trio.fail_after(30):
            receiver = await b.start(inbox, "r")
            assert "over" == await (await b.start(once, "o")).result()
            sender = await a.start(outbox, "s", to="inbox/r", first=payloads, then=["last"])
            while payloads != await a.ask("inbox/r", seen):
                await trio.sleep(0.02)
            # Each ran where it was started: the messages crossed nodes.
            assert (
                instance_id("inbox/r") in b.registry.live
                and instance_id("inbox/r") not in a.registry.live
            )
            assert (
                instance_id("outbox/s") in a.registry.live
                and instance_id("outbox/s") not in b.registry.live
            )
            await b.send("outbox/s", go)
            assert 41 == await sender.result()
            assert [*payloads, "last"] == await receiver.result()

            hoping = await a.start(hopeful, "h", targets=["once/o", "inbox/nowhere"])
            await b.send("hopeful/h", go)
            outcomes = await hoping.result()
    assert [["completed", "once/o"], ["unknown", "inbox/nowhere"]] == [o[:2] for o in outcomes]


# -- SIGKILL ------------------------------------------------------------------------------

CRASH_CHILD = Path(__file__).resolve().parents[1] / "crash_child_ctx_send.py"
COUNT = 1000
ROUNDS = 10
# Each round is killed once it has acknowledged a random number of sends in
# this range (a count, not a time, so a faster machine still kills midway),
# then a random moment of up to 5 ms later (inside a commit, often).
ACKS_PER_ROUND = (20, 120)


@pytest.mark.slow
async def test_sigkill_while_sending_one_by_one_loses_and_repeats_nothing(tmp_path):
    # Real processes and real time: a program killed mid-stream, several times.
    seed = int(os.environ.get("ACTORS_CRASH_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    began = time.monotonic()
    journal_path, acks = tmp_path / "journal", tmp_path / "acks"
    mid_stream = 0
    rounds = []
    for round_no in range(ROUNDS):
        before = len(acked_ids(acks))
        if before >= COUNT:
            break
        target, delay = rng.randint(*ACKS_PER_ROUND), rng.uniform(0.0, 0.005)

        def progress(before: int = before, target: int = target) -> int:
            now = len(acked_ids(acks))
            return target if now >= COUNT else now - before  # all sent: kill anyway

        kill_after_acks(
            [str(CRASH_CHILD), str(journal_path), str(acks), str(COUNT)],
            stderr_path=tmp_path / f"child{round_no}.err",
            acked=progress,
            min_acks=target,
            start_timeout=20.0,
            delay=delay,
            label=f"child of round {round_no}",
        )
        after = len(acked_ids(acks))
        rounds.append((after - before, delay))
        mid_stream += after < COUNT
    acked = acked_ids(acks)

    # Recover in this process: the sender finishes, the receiver gives what it took.
    async with actors.open_system(
        LMDBJournal(journal_path), processes=[crash_child.inbox, crash_child.outbox]
    ) as system:
        await crash_child.start_both(system, COUNT)
        with trio.fail_after(60):
            assert COUNT == await system.get(crash_child.SENDER).result()
            taken = await system.get(crash_child.RECEIVER).result()
    async with LMDBJournal(journal_path) as journal:
        stored = await journal.read(lambda r: r.last_message_seq(instance_id(crash_child.RECEIVER)))
    duplicates = len(taken) - len(set(taken))
    lost = sorted(set(range(COUNT)) - set(taken))
    print(
        f"\nctx.send crash test (seed {seed}): {len(rounds)} kills, {mid_stream} mid-stream "
        f"[(acks, kill delay ms) {', '.join(f'({n}, {d * 1000:.1f})' for n, d in rounds)}]; "
        f"{len(acked)} sends acknowledged before the last kill, {COUNT} sent, "
        f"{len(taken)} taken, {stored} stored, {duplicates} duplicates, {len(lost)} lost; "
        f"{time.monotonic() - began:.1f} s"
    )
    assert mid_stream >= 5, f"only {mid_stream} kills came mid-stream (seed {seed})"
    assert acked <= set(taken), sorted(acked - set(taken))[:20]
    assert list(range(COUNT)) == taken, f"seed {seed}: {duplicates} duplicates, lost {lost[:20]}"
    assert COUNT + 1 == stored  # every item once, and done: nothing was ever stored twice


@process("hasty/:name")
async def hasty(ctx: Context, name: str, *, how: str) -> str:
    if how == "forgotten":
        ctx.send("inbox/c", item, 1)  # no await: it must not pass silently
        await ctx.sleep(1)
    else:
        await ctx.first(sent=ctx.send("inbox/c", item, 1), late=ctx.sleep(1))
    return "over"


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("forgotten", "ctx.send('inbox/c') made at"),
        ("raced", "take effect where they are awaited, so they race and join nothing"),
    ],
)
async def test_a_send_must_be_awaited_alone(any_opener, autojump_clock, how, words):
    async with any_opener(inbox, hasty) as system:
        await system.start(inbox, "c")
        handle = await system.start(hasty, "x", how=how)
        with pytest.raises(actors.ProcessFailed, match=r"ContextError|InvalidArguments") as failed:
            await handle.result()
        assert words in str(failed.value)
        with system.journal.reader() as r:
            assert [] == r.mailbox(instance_id("inbox/c"))  # nothing was sent
