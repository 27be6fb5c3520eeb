"""A non-determinism error says what differs between the log and the code:
the kind of effect, its name (step name, signal, child address), or its
arguments: the one that differs, by position or keyword (a step's entry
keeps each argument's digest); for an entry written before entries kept
them, the call as the code gives it now, with both digests."""

from __future__ import annotations

import attrs
import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import replay_check
from storage import LMDBJournal, LogEntry, Txn, instance_id
from tests.runtime_helpers import wait_status

go = Signal("go")
stop = Signal("stop")


def charge(order: str, amount: int, *, currency: str = "EUR", note: str = "") -> str:
    return f"{order}:{amount}{currency}"


def refund(order: str, amount: int, *, currency: str = "EUR") -> None:
    pass


@process("orders/:id")
async def v1(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="EUR")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def other_arguments(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 200, currency="EUR")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def other_step(ctx: Context, id: str) -> str:
    await ctx.step(refund, id, 100, currency="EUR")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def other_kind(ctx: Context, id: str) -> str:
    await ctx.sleep(5)
    await ctx.wait(go)
    return id


@process("orders/:id")
async def other_signal(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="EUR")
    await ctx.wait(stop)
    return id


async def _message_on(opener, changed) -> str:
    async with opener(v1) as system:
        await wait_status(await system.start(v1, "o-1"), "suspended")
        await system.send("orders/o-1", go)
        await wait_status(system.get("orders/o-1"), "completed")
    async with opener(changed) as system:
        problems = await replay_check(system.journal, [changed], include_finished=True)
    (problem,) = problems
    return problem.message


@pytest.mark.parametrize(
    "changed, says",
    [
        (
            other_arguments,
            "the log holds step 'charge' made with other arguments than the code gives now: "
            "argument 2 (position 1) differs: the log ran it with a value whose digest is ",
        ),
        (
            other_step,
            "the log holds step 'charge', the code asked for step 'refund': another step name "
            "('charge' in the log, 'refund' now)",
        ),
        (
            other_kind,
            "the log holds step 'charge', the code asked for sleep (ctx.sleep(5)), another "
            "kind of effect",
        ),
    ],
    ids=["arguments", "name", "kind"],
)
async def test_the_message_says_what_differs(opener, autojump_clock, changed, says):
    message = await _message_on(opener, changed)
    assert says in message, message
    if changed is other_arguments:
        # The digest shown, then what the code gives now and the whole call.
        assert "; the code gives 200 now (the call now: " in message, message
        assert "ctx.step(charge, 'o-1', 200, currency='EUR'))" in message, message


async def test_a_different_signal_is_named(opener, autojump_clock):
    async with opener(v1) as system:
        await wait_status(await system.start(v1, "o-1"), "suspended")
        await system.send("orders/o-1", go)
        await wait_status(system.get("orders/o-1"), "completed")
    async with opener(other_signal) as system:
        (problem,) = await replay_check(system.journal, [other_signal], include_finished=True)
    assert (
        "the log holds wait 'go', the code asked for wait 'stop': another signal "
        "('go' in the log, 'stop' now)"
    ) in problem.message


@process("orders/:id")
async def other_currency(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="USD")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def keyword_added(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="EUR", note="gift")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def keyword_removed(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100)
    await ctx.wait(go)
    return id


@process("orders/:id")
async def fewer_positional(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, currency="EUR")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def keywords_reordered(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, note="", currency="EUR")
    await ctx.wait(go)
    return id


@process("orders/:id")
async def v1_with_note(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="EUR", note="")
    await ctx.wait(go)
    return id


def nothing() -> None:
    pass


@process("orders/:id")
async def no_arguments(ctx: Context, id: str) -> str:
    await ctx.step(nothing)
    await ctx.wait(go)
    return id


@process("orders/:id")
async def arguments_added(ctx: Context, id: str) -> str:
    await ctx.step(nothing, id, when="now")
    await ctx.wait(go)
    return id


async def _stuck_reason(opener, first, changed) -> str:
    """Run ``first`` to its wait on an LMDB journal, close, reopen with
    ``changed``: the reason the instance is held on the new code."""
    async with opener(first) as system:
        await wait_status(await system.start(first, "o-1"), "suspended")
    return await _held_reason(opener, changed)


async def _held_reason(opener, changed) -> str:
    """Reopen with ``changed`` and wake the instance: why it is held."""
    async with opener(changed) as system:
        await system.send("orders/o-1", go)  # wakes it: replay meets the step
        handle = system.get("orders/o-1")
        with trio.fail_after(100 * 86400):
            while not handle.last_error:
                await trio.sleep(0.01)
        assert "suspended" == handle.status
        assert "NonDeterminismError" in handle.last_error
        return handle.last_error


@pytest.mark.parametrize(
    "first, changed, says",
    [
        (
            v1,
            other_arguments,
            "argument 2 (position 1) differs: the log ran it with a value whose digest is ",
        ),
        (v1, other_currency, "keyword 'currency' differs: the log ran it with a value whose"),
        (
            v1,
            keyword_added,
            "a keyword 'note' was added: the log ran it without one; the code gives "
            "note='gift' now",
        ),
        (v1, keyword_removed, "keyword 'currency' was removed: the log ran it with one"),
        (v1, fewer_positional, "2 positional arguments in the log, 1 now"),
        (
            v1_with_note,
            keywords_reordered,
            "the keywords are given in another order (currency, note in the log, "
            "note, currency now)",
        ),
        (
            no_arguments,
            arguments_added,
            "the log ran it with no arguments, the code gives 1 positional argument and "
            "1 keyword (when) now",
        ),
    ],
    ids=["position", "keyword", "added", "removed", "count", "order", "none-before"],
)
async def test_a_restart_on_changed_code_names_the_argument(
    opener, autojump_clock, first, changed, says
):
    reason = await _stuck_reason(opener, first, changed)
    assert says in reason, reason


async def test_the_digest_shown_is_the_one_the_log_keeps(opener, autojump_clock):
    reason = await _stuck_reason(opener, v1, other_currency)
    async with LMDBJournal(opener.path) as journal:
        row = await journal.read(lambda r: r.instance(instance_id("orders/o-1")))
        log = await journal.read(lambda r: r.entries(row.iid, row.record.run))
    positional, keywords = log[1].parts
    assert 8 == len(positional)  # two positional arguments, 4 bytes each
    assert ["currency"] == list(keywords)
    assert f"whose digest is {keywords['currency'].hex()}; the code gives 'USD' now" in reason


async def test_a_log_written_before_argument_digests_gives_the_old_message(opener, autojump_clock):
    async with opener(v1) as system:
        await wait_status(await system.start(v1, "o-1"), "suspended")
    # Rewrite the step's entry as a version before argument digests wrote it.
    async with LMDBJournal(opener.path) as journal:
        iid = instance_id("orders/o-1")
        row = await journal.read(lambda r: r.instance(iid))
        log = await journal.read(lambda r: r.entries(iid, row.record.run))
        assert log[1].parts is not None
        old = attrs.evolve(log[1], parts=None).to_stored()
        assert "p" not in old
        txn = Txn()
        txn.put_log(iid, row.record.run, 1, old)
        await journal.commit(txn)
    reason = await _held_reason(opener, other_arguments)
    assert (
        "the log holds step 'charge' made with other arguments than the code gives now, "
        "ctx.step(charge, 'o-1', 200, currency='EUR') (the log keeps a digest of the "
        f"arguments it ran with, {log[1].hash.hex()}; these give "
    ) in reason, reason


def test_an_entry_without_parts_matches_as_before():
    # The whole digest is the one replay compares, parts or not.
    with_parts = LogEntry("step", "charge", b"12345678", parts=[b"abcd", {}])
    assert LogEntry.from_stored({"k": "step", "n": "charge", "h": b"12345678"}).parts is None
    assert with_parts == LogEntry.from_stored(with_parts.to_stored())
    assert "p" in with_parts.to_stored()


@process("accounts/:id")
async def account(ctx: Context, id: str) -> str:
    await ctx.step(charge, id, 100, currency="EUR")
    return id


async def test_a_fork_to_another_address_names_the_argument_it_changes(opener, autojump_clock):
    async with opener(account) as system:
        assert "a-1" == await (await system.start(account, "a-1")).result()
        with pytest.raises(actors.InvalidArguments) as refused:
            await system.fork("accounts/a-1", from_effect=1, to="accounts/a-2")
    message = str(refused.value)
    assert "does not replay on the current code" in message, message
    assert (
        "argument 1 (position 0) differs: the log ran it with a value whose digest is "
    ) in message, message
    assert "the code gives 'a-2' now" in message, message
