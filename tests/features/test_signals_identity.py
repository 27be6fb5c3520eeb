"""Signals routed by identity (#48) through the public API, on memory,
LMDB and PostgreSQL (the `make_journal` fixture): ``system.signal`` and
``ctx.signal`` reach exactly the live instances of the processes that
listen and have the identity, once; bad identities and templates are
refused; a process's ``ctx.signal`` replays without signalling again.
"""

from __future__ import annotations

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import open_test_system
from storage import LMDBJournal, MemoryJournal, instance_id
from tests.runtime_helpers import virtual_wall

shipped = Signal("orders.shipped", identity=("order_id",))
rated = Signal("orders.rated", identity=("customer", "order_id"))
go = Signal("go")


@process("orders/:order_id", listens=[shipped])
async def order(ctx: Context, order_id: str) -> object:
    return await ctx.wait(shipped)


@process("parcels/:order_id/:parcel", listens=[shipped])
async def parcel(ctx: Context, order_id: str, parcel: str) -> list:
    return [parcel, await ctx.wait(shipped)]


@process("loyalty/:customer/:order_id", listens=[shipped, rated])
async def loyalty(ctx: Context, customer: str, order_id: str) -> list:
    taken = []
    while len(taken) < 2:
        signal, payload = await ctx.receive(shipped, rated)
        taken.append([signal.name, payload])
    return taken


@process("audit/:order_id")  # the same param name, listening to nothing
async def audit(ctx: Context, order_id: str) -> object:
    return await ctx.wait(go)


@process("late/:order_id", listens=[shipped])
async def late(ctx: Context, order_id: str) -> list:
    """Waits for ``go`` first: a signal that came before stays in the mailbox."""
    await ctx.wait(go)
    return [await ctx.wait(shipped)]


@process("emitter/:name")
async def emitter(ctx: Context, name: str, *, order_id: str) -> int:
    """Signals once, then waits for ``go``: a reopen replays the signal."""
    reached = await ctx.signal(shipped, {"order_id": order_id}, {"by": name})
    await ctx.wait(go)
    return reached


def open_on(make_journal, *processes, **kw):
    kw.setdefault("now", virtual_wall)
    return actors.open_system(make_journal(), processes=list(processes), **kw)


async def unread(system, address: str) -> list:
    return [(m.signal, m.payload) for m in await system.mail(address)]


async def test_a_signal_reaches_exactly_the_listeners_with_that_identity(make_journal):
    procs = (order, parcel, loyalty, audit)
    with trio.fail_after(30):
        async with open_on(make_journal, *procs) as system:
            o1 = await system.start(order, "o-1")
            parcels = [await system.start(parcel, "o-1", p) for p in ("p1", "p2")]
            await system.start(parcel, "o-2", "p1")  # another order
            await system.start(order, "o-2")
            fan = await system.start(loyalty, "ann", "o-1")  # a field that is no prefix
            await system.start(loyalty, "bob", "o-2")
            await system.start(audit, "o-1")  # same param, listens to nothing
            assert 4 == await system.signal(shipped, {"order_id": "o-1"}, {"track": "T1"})
            assert {"track": "T1"} == await o1.result()
            assert [["p1", {"track": "T1"}], ["p2", {"track": "T1"}]] == [
                await p.result() for p in parcels
            ]
            # None of the others got anything.
            for address in ("parcels/o-2/p1", "orders/o-2", "loyalty/bob/o-2", "audit/o-1"):
                assert [] == await unread(system, address)
            assert "suspended" == system.get("orders/o-2").status
            # A two-field identity: only the instance with both values.
            assert 1 == await system.signal(rated, {"order_id": "o-1", "customer": "ann"}, 5)
            assert [["orders.shipped", {"track": "T1"}], ["orders.rated", 5]] == (
                await fan.result()
            )
            assert [] == await unread(system, "loyalty/bob/o-2")
            # Ended instances get nothing, and nothing is stored.
            assert 0 == await system.signal(shipped, {"order_id": "o-1"}, "again")
            assert 0 == await system.signal(rated, {"order_id": "o-2", "customer": "ann"})


async def test_children_are_reached_at_their_own_addresses():
    @process("shop/:order_id")
    async def shop(ctx: Context, order_id: str) -> list:
        return [await ctx.call(parcel, order_id, p) for p in ("a",)]

    @process("sender/:order_id")
    async def sender(ctx: Context, order_id: str) -> int:
        return await ctx.signal(shipped, {"order_id": order_id}, "child")

    async with open_test_system([shop, parcel, sender]) as system:
        with trio.fail_after(10):
            handle = await system.start(shop, "o-9")
            while system.get("shop/o-9/parcels/o-9/a") is None:
                await trio.sleep(0.01)
            assert 1 == await (await system.start(sender, "o-9")).result()
            assert [["a", "child"]] == await handle.result()


async def test_a_signal_before_the_wait_is_kept(make_journal):
    with trio.fail_after(30):
        async with open_on(make_journal, late) as system:
            handle = await system.start(late, "o-1")
            assert 1 == await system.signal(shipped, {"order_id": "o-1"}, "early")
            await system.send("late/o-1", go)
            assert ["early"] == await handle.result()


async def test_ctx_signal_replays_without_signalling_again(make_journal):
    with trio.fail_after(30):
        async with open_on(make_journal, order, parcel, emitter) as system:
            await system.start(parcel, "o-1", "p1")
            await system.start(parcel, "o-1", "p2")
            await system.start(emitter, "e", order_id="o-1")
            while (
                len(await system.mail("parcels/o-1/p1")) + len(await system.mail("parcels/o-1/p2"))
                < 2
                and system.get("parcels/o-1/p1").status != "completed"
            ):
                await trio.sleep(0.01)
        # The emitter replays its signal on reopen (it waits for go).
        async with open_on(make_journal, order, parcel, emitter) as system:
            await system.send("emitter/e", go)
            assert 2 == await system.get("emitter/e").result()
            for p in ("p1", "p2"):
                assert [p, {"by": "e"}] == await system.get(f"parcels/o-1/{p}").result()
    async with make_journal() as journal:
        counts = await journal.read(
            lambda r: [r.last_message_seq(instance_id(f"parcels/o-1/{p}")) for p in ("p1", "p2")]
        )
    assert [1, 1] == counts  # never stored twice


async def test_keyed_signals_reach_each_recipient_once(make_journal):
    later = process("later/:order_id", listens=[shipped])(late.fn)
    with trio.fail_after(30):
        async with open_on(make_journal, late, later) as system:
            await system.start(late, "o-1")
            assert 1 == await system.signal(shipped, {"order_id": "o-1"}, "one", key="k")
            assert 0 == await system.signal(shipped, {"order_id": "o-1"}, "two", key="k")
            # The key is per recipient: an instance that has not had it gets it.
            await system.start(later, "o-1")
            assert 1 == await system.signal(shipped, {"order_id": "o-1"}, "three", key="k")
            assert 2 == await system.signal(shipped, {"order_id": "o-1"}, "four", key="j")
            assert [("orders.shipped", "one"), ("orders.shipped", "four")] == await unread(
                system, "late/o-1"
            )
            assert [("orders.shipped", "three"), ("orders.shipped", "four")] == await unread(
                system, "later/o-1"
            )


async def test_a_signal_nobody_listens_to_stores_nothing():
    async with open_test_system([audit]) as system:
        await system.start(audit, "o-1")
        assert 0 == await system.signal(shipped, {"order_id": "o-1"}, "x")
        assert [] == await unread(system, "audit/o-1")


@pytest.mark.parametrize(
    ("identity", "words"),
    [
        ({}, "missing 'order_id'"),
        ({"order_id": "o-1", "parcel": "p"}, "unknown 'parcel'"),
        ({"orderId": "o-1"}, "missing 'order_id' and unknown 'orderId'"),
        (["o-1"], "takes the identity as a mapping"),
        ({"order_id": "a/b"}, "without '/'"),
        ({"order_id": ""}, "without '/'"),
        ({"order_id": 17}, "path param's value"),
    ],
)
async def test_bad_identities_are_refused(identity, words):
    async with open_test_system([order]) as system:
        await system.start(order, "o-1")
        with pytest.raises(actors.InvalidArguments, match=words):
            await system.signal(shipped, identity, "x")
        assert [] == await unread(system, "orders/o-1")


async def test_signals_without_identity_and_bad_arguments_are_refused():
    async with open_test_system([order]) as system:
        with pytest.raises(actors.InvalidArguments, match="no identity fields"):
            await system.signal(go, {}, "x")
        with pytest.raises(actors.InvalidArguments, match=r"takes an actors\.Signal"):
            await system.signal("orders.shipped", {"order_id": "o-1"})  # type: ignore[arg-type]
        with pytest.raises(actors.EncodeError):
            await system.signal(shipped, {"order_id": "o-1"}, object())
        with pytest.raises(actors.LimitExceeded, match="max_payload"):
            await system.signal(shipped, {"order_id": "nobody"}, "x" * (2 << 20))
        with pytest.raises(actors.InvalidArguments):
            await system.signal(shipped, {"order_id": "o-1"}, key="")


def test_a_signal_keeps_comparing_by_name():
    assert Signal("orders.shipped") == shipped
    assert () == Signal("x").identity
    assert ("a", "b") == Signal("x", identity=["a", "b"]).identity
    for bad in ("order_id", ("a", "a"), ("",), (":a",), ("a/b",), (1,)):
        with pytest.raises(actors.InvalidArguments):
            Signal("x", identity=bad)  # type: ignore[arg-type]


def test_templates_that_cannot_take_a_listened_signal_are_refused():
    async def fn(ctx: Context, parcel: str) -> None:
        pass

    with pytest.raises(
        actors.InvalidArguments, match=r"identity field 'order_id'.*parcels/:parcel"
    ):
        process("parcels/:parcel", listens=[shipped])(fn)
    with pytest.raises(actors.InvalidArguments, match="no identity fields"):
        process("parcels/:parcel", listens=[go])(fn)
    with pytest.raises(actors.InvalidArguments, match=r"actors\.Signal objects"):
        process("parcels/:parcel", listens=["orders.shipped"])(fn)  # type: ignore[list-item]
    with pytest.raises(actors.InvalidArguments, match="a list of signals"):
        process("parcels/:parcel", listens=shipped)(fn)  # type: ignore[arg-type]
    assert (shipped,) == process("parcels/:order_id", listens=[shipped])(fn).listens


async def test_ctx_signal_is_awaited_alone_and_checks_at_the_call():
    @process("racer/:n")
    async def racer(ctx: Context, n: str) -> str:
        try:
            await ctx.first(a=ctx.signal(shipped, {"order_id": "o"}), b=ctx.sleep(1))
        except actors.InvalidArguments as exc:
            refused = str(exc)
        try:
            ctx.signal(shipped, {"order": "o"})
        except actors.InvalidArguments as exc:
            refused += " | " + str(exc)
        try:
            ctx.signal(Signal("orders.shipped", identity=("parcel",)), {"parcel": "o"})
        except actors.InvalidArguments as exc:
            refused += " | " + str(exc)
        return refused

    async with open_test_system([racer, order]) as system:
        with trio.fail_after(10):
            words = await (await system.start(racer, "1")).result()
    assert "await them alone" in words and "unknown 'order'" in words
    assert "listens to it with ['order_id']" in words


class StartsDuringARead(MemoryJournal):
    """A memory journal that, once armed, lets a start commit between a
    read and the commit the reader builds on it (the race a second node
    makes)."""

    def __init__(self) -> None:
        super().__init__()
        self.between = None

    async def read(self, fn):
        found = await super().read(fn)
        between, self.between = self.between, None
        if between is not None:
            await between()
        return found


async def test_an_instance_started_during_the_routing_gets_the_signal():
    journal = StartsDuringARead()
    async with actors.open_system(journal, processes=[order, parcel]) as system:
        await system.start(parcel, "o-1", "p1")

        async def start_another() -> None:
            await system.start(parcel, "o-1", "p2")

        journal.between = start_another
        # The p2 start commits after the signal read its recipients and
        # before it commits: the signal reads again and reaches it.
        assert 2 == await system.signal(shipped, {"order_id": "o-1"}, "s")
        with trio.fail_after(10):
            assert ["p2", "s"] == await system.get("parcels/o-1/p2").result()


async def test_one_signal_name_has_one_identity_in_a_system():
    other = Signal("orders.shipped", identity=("parcel",))

    @process("boxes/:parcel", listens=[other])
    async def box(ctx: Context, parcel: str) -> None:
        pass

    with pytest.raises(actors.InvalidArguments, match="different identity fields"):
        async with open_test_system([order, box]):
            pass
    async with open_test_system([order]) as system:
        await system.start(order, "o-1")
        with pytest.raises(actors.InvalidArguments, match="listens to it with"):
            await system.signal(other, {"parcel": "o-1"})
        assert [] == await unread(system, "orders/o-1")


@pytest.mark.slow  # the command line runs as a second process, on real time
async def test_the_cli_signals_through_the_running_system(tmp_path):
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    def cli(journal: Path, *args: str) -> subprocess.CompletedProcess[str]:
        root = Path(__file__).resolve().parents[2]
        env = dict(os.environ, PYTHONPATH=str(root), TZ="UTC")
        command = [sys.executable, "-m", "actors", "--journal", str(journal), *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, check=False)

    # (A short directory: a unix socket's address holds about 100 bytes.)
    with tempfile.TemporaryDirectory(prefix="sig") as place:
        journal = Path(place) / "journal"
        async with actors.open_system(LMDBJournal(journal), processes=[order, parcel]) as system:
            await system.start(order, "o-1")
            await system.start(parcel, "o-1", "p1")
            await system.start(parcel, "o-2", "p1")
            done = await trio.to_thread.run_sync(
                cli,
                journal,
                "--json",
                "signal",
                "orders.shipped",
                '{"t": 1}',
                "--identity",
                "order_id=o-1",
            )
            assert (0, "") == (done.returncode, done.stderr)
            assert 2 == json.loads(done.stdout)["reached"]
            with trio.fail_after(10):
                assert {"t": 1} == await system.get("orders/o-1").result()
            assert [] == await unread(system, "parcels/o-2/p1")
            done = await trio.to_thread.run_sync(
                cli, journal, "signal", "orders.shipped", "--identity", "order=o-1"
            )
            assert 2 == done.returncode and "listens to it with ['order_id']" in done.stderr
        done = await trio.to_thread.run_sync(
            cli, journal, "signal", "orders.shipped", "--identity", "order_id=o-1"
        )
        assert 2 == done.returncode and "no system holds" in done.stderr


def test_show_lists_a_ctx_signal_and_the_message_it_left(tmp_path):
    from tests.cli_runner import run_in_process

    path = tmp_path / "journal"

    async def main() -> None:
        async with actors.open_system(LMDBJournal(path), processes=[late, emitter]) as system:
            await system.start(late, "o-1")
            await system.start(emitter, "e", order_id="o-1")
            with trio.fail_after(10):
                while not await system.mail("late/o-1"):
                    await trio.sleep(0.01)

    trio.run(main)
    shown = run_in_process(["--journal", str(path), "show", "emitter/e"])
    assert 0 == shown.returncode, shown.stderr
    entry = [line.split() for line in shown.stdout.splitlines() if "orders.shipped" in line]
    assert [["1", "signal", "orders.shipped", "ok:", "1"]] == entry
    shown = run_in_process(["--journal", str(path), "show", "late/o-1"])
    assert "orders.shipped" in shown.stdout and "{'by': 'e'}" in shown.stdout.replace('"', "'")
