"""`ActorSystem.retry`: a failed (or cancelled) instance runs again as a new
incarnation, with its params and its input or a new one; everything else is
refused with a message that says what to do. Through the public API on
every journal, across a close and reopen and a SIGKILL, with two nodes
retrying at once on PostgreSQL, and from the command line (directly and
through a running system)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

import pytest
import trio

import actors
from actors import Context, Queue, Retry, Signal, process
from actors._system._retry import KEPT_INCARNATIONS, read_kept
from storage import LMDBJournal, instance_id
from tests.cli_runner import run_in_process
from tests.crash_kit import ROOT, kill_after_acks
from tests.runtime_helpers import ReadsOffTheLoop
from tests.tools.test_cli import read_back, run_cli, run_json

approved = Signal("approved")
KEYS: list[str] = []
BROKEN: set[str] = set()


@pytest.fixture(autouse=True)
def _fresh():
    KEYS.clear()
    BROKEN.clear()


def charge(what: str) -> str:
    KEYS.append(actors.current_step().key)
    if what in BROKEN:
        raise RuntimeError(f"{what} declined")
    return f"charged {what}"


@process("orders/:order_id")
async def order(ctx: Context, order_id: str, *, amount: int = 1) -> dict:
    charged = await ctx.step(charge, order_id)
    return {"order": order_id, "amount": amount, "charged": charged}


@process("approvals/:id")
async def approval(ctx: Context, id: str, *, limit: int = 10) -> dict:
    await ctx.step(charge, id)
    by = await ctx.wait(approved)
    return {"by": by, "limit": limit}


@process("legs/:trip/:leg")
async def leg(ctx: Context, trip: str, leg: str) -> str:
    return await ctx.step(charge, f"{trip}-{leg}")


@process("trips/:id")
async def trip(ctx: Context, id: str) -> list[str]:
    return [await ctx.call(leg, id, "a"), await ctx.call(leg, id, "b")]


def unbook(what: str) -> None:
    raise RuntimeError("the desk is closed")


@process("bookings/:id")
async def booking(ctx: Context, id: str) -> None:
    await ctx.step(charge, id, compensate=unbook, retry=Retry(attempts=1))
    raise RuntimeError("no seats")


PROCESSES = [order, approval, leg, trip, booking]


async def failed(system, proc, *params, broken=None, **input):
    """Start an instance that fails (the charge of ``broken``, by default
    of its first param, is declined); its handle."""
    BROKEN.add(broken or params[0])
    handle = await system.start(proc, *params, **input)
    with pytest.raises(actors.ProcessFailed):
        await handle.result()
    BROKEN.clear()
    return handle


async def until_status(system, address, status):
    """Wait until the journal holds ``status`` for ``address`` (as another
    node or the command line would see it)."""
    iid = instance_id(address)
    with trio.fail_after(20):
        while (await system.journal.read(lambda r: r.instance(iid))).status != status:
            await trio.sleep(0.01)


async def kept(system, address):
    return (await system.journal.read(lambda r: read_kept(r, instance_id(address))))[1]


# -- the public API, on every journal ------------------------------------------------


async def test_a_failed_instance_runs_again_as_a_new_incarnation(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        first = await failed(system, order, "o-1", amount=3)
        handle = await system.retry("orders/o-1")
        assert 2 == handle.incarnation
        assert {"order": "o-1", "amount": 3, "charged": "charged o-1"} == await handle.result()
        assert 2 == system.get("orders/o-1").incarnation
        # Its step keys carry the new incarnation: none of the failed run repeats.
        assert ["orders/o-1/1/0/charge/1", "orders/o-1/2/0/charge/1"] == KEYS
        # The failed incarnation's record is kept, with its error.
        (one,) = await kept(system, "orders/o-1")
        assert (1, "failed", "orders/:order_id") == (one.incarnation, one.status, one.process)
        assert "o-1 declined" in one.record.error["message"]
        assert {"amount": 3} == one.record.input
        assert first.incarnation == one.incarnation


async def test_a_retry_replaces_the_input_when_given_and_checks_it(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, order, "o-2", amount=3)
        with pytest.raises(actors.InvalidArguments, match=r"input \['amout'\] does not fit"):
            await system.retry("orders/o-2", input={"amout": 5})
        with pytest.raises(actors.InvalidArguments, match="takes a dict"):
            await system.retry("orders/o-2", input=[("amount", 5)])  # type: ignore[arg-type]
        with pytest.raises(actors.EncodeError):
            await system.retry("orders/o-2", input={"amount": object()})
        assert 1 == system.get("orders/o-2").incarnation  # nothing was written
        handle = await system.retry("orders/o-2", input={"amount": 5})
        assert 5 == (await handle.result())["amount"]
        assert [] == [k for k in await kept(system, "orders/o-2") if k.incarnation != 1]


async def test_what_cannot_be_retried_is_refused_with_what_to_do(make_journal):
    queue = Queue("one", concurrency=1)
    async with actors.open_system(make_journal(), processes=PROCESSES, queues=[queue]) as system:
        live = await system.start(approval, "a-1")  # waits for approval
        queued = await system.start(approval, "a-2", queue=queue)  # takes the queue's slot
        waiting = await system.start(approval, "a-3", queue=queue)  # waits for it
        done = await system.start(order, "o-3")
        await done.result()
        expected = {
            "approvals/a-1": r"cannot retry 'approvals/a-1': it is (running|suspended); only a "
            r"failed or cancelled instance is retried: wait for it to end, or cancel it first",
            "approvals/a-3": r"cannot retry 'approvals/a-3': it is queued and takes messages once "
            r"it starts; only a failed or cancelled instance is retried: it starts when its "
            r"queue has room \(cancel it to take it out\)",
            "orders/o-3": r"cannot retry 'orders/o-3': it completed, and a completed instance "
            r"is never run again; read its result",
        }
        for address, message in expected.items():
            with pytest.raises(actors.InvalidArguments, match=message):
                await system.retry(address)
        with pytest.raises(
            actors.NotDelivered,
            match="no instance at 'orders/nope' to retry; "
            r"start one \(system.start\) or check the address",
        ) as info:
            await system.retry("orders/nope")
        assert "unknown" == info.value.reason
        with pytest.raises(actors.InvalidArguments, match="retry's address"):
            await system.retry("")
        # Nothing changed.
        assert [1, 1, 1, 1] == [h.incarnation for h in (live, queued, waiting, done)]
        assert [] == await kept(system, "orders/o-3")


async def test_a_stuck_compensation_is_settled_before_a_retry(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await system.start(booking, "b-1")
        await until_status(system, "bookings/b-1", "compensation_stuck")
        with pytest.raises(
            actors.InvalidArguments,
            match="it is parked in compensation_stuck; "
            r"only a failed or cancelled instance is retried: resume its "
            r"compensation \(resume_compensation\), or abandon it",
        ):
            await system.retry("bookings/b-1")
        assert await system.abandon_compensation("bookings/b-1")
        again = await system.retry("bookings/b-1")  # abandoned: it failed
        assert 2 == again.incarnation


async def test_a_cancelled_instance_is_retried_with_its_input(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await system.start(approval, "a-4", limit=3)
        assert await system.cancel("approvals/a-4")
        handle = await system.retry("approvals/a-4")
        assert 2 == handle.incarnation
        await system.send("approvals/a-4", approved, "ann")
        assert {"by": "ann", "limit": 3} == await handle.result()
        (one,) = await kept(system, "approvals/a-4")
        assert ("cancelled", "cancelled by system.cancel") == (one.status, one.record.reason)


async def test_a_retried_instance_resumes_after_a_reopen(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, approval, "a-5")
        await system.retry("approvals/a-5", input={"limit": 7})
        await until_status(system, "approvals/a-5", "suspended")  # it waits for its approval
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        handle = system.get("approvals/a-5")
        assert 2 == handle.incarnation
        await system.send("approvals/a-5", approved, "bo")
        assert {"by": "bo", "limit": 7} == await handle.result()
    # The step of the retried run ran once, before the reopen.
    assert ["approvals/a-5/1/0/charge/1", "approvals/a-5/2/0/charge/1"] == KEYS


async def test_a_child_is_retried_with_its_parent(make_journal):
    """Retrying a child is refused; retrying its parent reuses what the
    children completed and starts the failed ones afresh."""
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        BROKEN.add("t-1-b")
        handle = await system.start(trip, "t-1")
        with pytest.raises(actors.ProcessFailed, match="declined"):
            await handle.result()
        BROKEN.clear()
        child = "trips/t-1/legs/t-1/b"
        with pytest.raises(
            actors.InvalidArguments,
            match=f"cannot retry '{child}': it is a child "
            "of 'trips/t-1', whose run decides its children; retry 'trips/t-1' "
            r"instead \(its failed children start afresh\)",
        ):
            await system.retry(child)
        again = await system.retry("trips/t-1")
        assert ["charged t-1-a", "charged t-1-b"] == await again.result()
        assert 1 == system.get("trips/t-1/legs/t-1/a").incarnation  # completed: reused
        assert 2 == system.get(child).incarnation
        assert [
            "trips/t-1/legs/t-1/a/1/0/charge/1",
            "trips/t-1/legs/t-1/b/1/0/charge/1",
            "trips/t-1/legs/t-1/b/2/0/charge/1",
        ] == KEYS
        (one,) = await kept(system, child)
        assert ("failed", "trips/t-1") == (one.status, one.record.parent)


async def test_a_cleanup_removes_what_a_retry_kept(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, order, "o-6")
        for _ in range(2, KEPT_INCARNATIONS + 4):  # more than are kept
            BROKEN.add("o-6")
            with pytest.raises(actors.ProcessFailed):
                await (await system.retry("orders/o-6")).result()
        BROKEN.clear()
        handle = await system.retry("orders/o-6", input={"amount": 5})
        assert 5 == (await handle.result())["amount"]
        incarnations = [k.incarnation for k in await kept(system, "orders/o-6")]
        last = KEPT_INCARNATIONS + 3
        assert list(range(last - KEPT_INCARNATIONS + 1, last + 1)) == incarnations
        assert 1 == await system.cleanup(older_than=0)
        assert [] == await system.journal.read(lambda r: r.states("history/"))
        assert [] == await kept(system, "orders/o-6")
        with pytest.raises(actors.NotDelivered, match=rf"incarnation {last + 1} was cleaned up"):
            await system.retry("orders/o-6")


async def test_two_retries_at_once_make_one_incarnation(make_journal):
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, order, "o-7")
        await _two_retries_make_one_incarnation(system, "orders/o-7")


async def _two_retries_make_one_incarnation(system, address, after=None):
    """Retry ``address`` twice at once (``after`` is called as each returns):
    both get the one new incarnation, which runs its step once more."""
    handles = []

    async def one():
        handles.append(await system.retry(address))
        if after is not None:
            after()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
    assert [2, 2] == [h.incarnation for h in handles]
    await handles[0].result()
    assert 1 == len(await kept(system, address))
    assert 2 == len(KEYS)


async def test_a_retry_whose_first_look_is_slow_shares_the_one_under_way(make_journal, monkeypatch):
    # A retry first looks whether the instance is parked on a crash budget
    # (then it resumes it): a journal read, slow under load. The second of
    # two retries begun together is held in that look until the first has
    # returned: it still belongs to the first's outcome, not refused because
    # the instance it came to retry "is running" (or "completed") by then.
    from actors._features import _crashes

    first_back = trio.Event()
    looks: list[str] = []
    look = _crashes.resume_parked

    async def slow_look(system, address, input):
        looks.append(address)
        if len(looks) == 2:
            await first_back.wait()
        return await look(system, address, input)

    monkeypatch.setattr(_crashes, "resume_parked", slow_look)
    async with actors.open_system(make_journal(), processes=PROCESSES) as system:
        await failed(system, order, "o-8")
        await _two_retries_make_one_incarnation(system, "orders/o-8", first_back.set)


async def test_a_retry_whose_run_ends_during_a_status_read_still_answers(monkeypatch):
    # A status read begun while the new incarnation runs can come back after
    # that run has ended (a slow round trip): it found "running", and that
    # must not hide the end kept for handle reads, nor be all that is left
    # of the instance once that end is dropped; else result() waits for a
    # change that never comes.
    from actors._system._registry import Registry
    from actors._system._status_watch import Statuses

    journal = ReadsOffTheLoop()
    iid = instance_id("orders/o-9")
    refresh, ended = Statuses.refresh, Registry.ended

    async def slow_refresh(self, of):
        journal.slow = of == iid and of in self.live  # (its run is under way)
        try:
            return await refresh(self, of)
        finally:
            journal.slow = False

    def ended_here(self, actor, status):
        ended(self, actor, status)
        if actor.iid == iid and status == "completed":
            journal.until.set()

    monkeypatch.setattr(Statuses, "refresh", slow_refresh)
    monkeypatch.setattr(Registry, "ended", ended_here)
    async with actors.open_system(journal, processes=PROCESSES) as system:
        await failed(system, order, "o-9")
        handle = await system.retry("orders/o-9")
        with trio.fail_after(10):
            assert {"order": "o-9", "amount": 1, "charged": "charged o-9"} == await handle.result()
        assert "completed" == handle.status


# -- two nodes on PostgreSQL ---------------------------------------------------------

N = 30  # addresses retried from both nodes at once


@process("flaky/:id")
async def flaky(ctx: Context, id: str, *, fail: bool) -> str:
    if fail:
        raise RuntimeError("the first incarnation fails")
    return id


@pytest.mark.slow
async def test_two_nodes_retrying_one_address_make_one_incarnation(request):
    if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
        pytest.skip("PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from storage import PostgresJournal
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)

    def journal():
        return PostgresJournal(dsn, schema=schema, lease_timeout=3.0)

    with trio.fail_after(60):
        async with (
            actors.open_system(journal(), processes=[flaky], node="a") as a,
            actors.open_system(journal(), processes=[flaky], node="b") as b,
        ):
            for i in range(N):
                with pytest.raises(actors.ProcessFailed):
                    await (await a.start(flaky, f"f{i}", fail=True)).result()
            outcomes: dict[int, list] = {}

            async def both(i):
                got: list = []

                async def one(system):
                    try:
                        got.append(await system.retry(f"flaky/f{i}", input={"fail": False}))
                    except actors.InvalidArguments as exc:  # it came after the other's commit
                        assert re.match(
                            rf"cannot retry 'flaky/f{i}': it (is running|completed)", str(exc)
                        ), exc
                        got.append(exc)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(one, a)
                    nursery.start_soon(one, b)
                outcomes[i] = got

            async with trio.open_nursery() as nursery:
                for i in range(N):
                    nursery.start_soon(both, i)
            # Each address got one new incarnation; a retry that lost the
            # race at its commit returns its handle, one that read after it
            # is refused (the instance is running, or completed already).
            for i, got in outcomes.items():
                handles = [h for h in got if isinstance(h, actors.Handle)]
                assert handles and {2} == {h.incarnation for h in handles}, (i, got)
            for i in range(N):
                assert f"f{i}" == await a.get(f"flaky/f{i}").result()
                assert [1] == [k.incarnation for k in await kept(b, f"flaky/f{i}")]
            rows = await a.journal.read(lambda r: list(r.instances(None, "flaky/:id")))
            assert {("completed", 2)} == {(row.status, row.record.incarnation) for row in rows}


# -- a SIGKILL during the retried run ----------------------------------------------------

CHILD = ROOT / "tests" / "crash_child_retry_api.py"


@pytest.mark.slow  # two interpreters, real time: a few seconds
def test_a_retried_run_killed_mid_way_resumes(tmp_path):
    side, out = tmp_path / "side", tmp_path / "out"
    args = [str(CHILD), str(tmp_path / "journal"), str(side), str(out)]

    def retried() -> int:
        lines = side.read_text().split("\n")[:-1] if side.exists() else []
        return sum("/2/" in line for line in lines)

    kill_after_acks(
        args,
        stderr_path=tmp_path / "stderr",
        acked=retried,
        min_acks=1,
        start_timeout=20,
        delay=random.uniform(0, 0.3),
        label="the retrying program",
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(tmp_path / "stderr", "ab") as stderr:
        done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, stderr=stderr, timeout=30)
    assert 0 == done.returncode, (tmp_path / "stderr").read_text()
    assert "2 6" == out.read_text()
    keys = side.read_text().split()
    wanted = [f"jobs/x/2/0/work/{n}" for n in (1, 2, 3)]
    assert set(wanted) == set(keys)  # every step of the retried run, none of another
    assert all(keys.count(k) <= 2 for k in wanted)  # at least once: twice if cut short
    assert wanted == sorted(dict.fromkeys(keys))  # in order

    def history(r):
        return read_kept(r, instance_id("jobs/x"))[1]

    (one,) = read_back(tmp_path / "journal", history)
    assert (1, "failed") == (one.incarnation, one.status)


# -- the command line ------------------------------------------------------------------


async def test_the_cli_retries_offline_and_shows_the_kept_incarnation(tmp_path):
    path = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        await failed(system, order, "o-8", amount=3)
        await (await system.start(order, "o-9")).result()
        await failed(system, trip, "t-2", broken="t-2-b")  # its second leg fails

    def cli(*args):  # no system holds the journal now: the command line runs in this process
        return trio.to_thread.run_sync(lambda: run_in_process(["--journal", str(path), *args]))

    # A new input is checked against the process's code, so it takes --import.
    done = await cli("retry", "orders/o-8", "--input", '{"amount": 4}')
    assert 2 == done.returncode and "pass --import MODULE" in done.stderr
    done = await cli("--import", __name__, "retry", "orders/o-8", "--input", '{"amount": 4}')
    assert (0, "") == (done.returncode, done.stderr)
    assert done.stdout.startswith(
        "retried orders/o-8 (failed, incarnation 1) as incarnation 2; it runs when a system "
        "that runs its process next opens this journal\n"
    )
    assert "'actors show orders/o-8 --incarnation 1' shows the record it replaced" in done.stdout

    done = await cli("show", "orders/o-8", "--incarnation", "1")
    assert 0 == done.returncode, done.stderr
    assert done.stdout.startswith(
        "orders/o-8  ·  incarnation 1  ·  failed  (kept: a retry replaced it)\n"
        "  process       orders/:order_id\n"
        '  params        ["o-8"]\n'
        '  input         {"amount": 3}\n'
    )
    assert "o-8 declined" in done.stdout and "  current       incarnation 2\n" in done.stdout
    doc = json.loads((await cli("--json", "show", "orders/o-8", "--incarnation", "1")).stdout)
    assert (True, "failed", {"amount": 3}, 2) == (
        doc["kept"],
        doc["status"],
        doc["input"],
        doc["current_incarnation"],
    )
    current = json.loads((await cli("--json", "show", "orders/o-8", "--incarnation", "2")).stdout)
    assert ("running", 2, {"amount": 4}) == (
        current["status"],
        current["incarnation"],
        current["input"],
    )
    done = await cli("show", "orders/o-8", "--incarnation", "7")
    not_kept = "incarnation 7 of 'orders/o-8' is not kept (the current one is 2; kept: 1)"
    assert 3 == done.returncode and not_kept in done.stderr

    # Refusals, with the exit codes of a direct write.
    done = await cli("retry", "orders/o-9")
    assert 1 == done.returncode and "cannot retry 'orders/o-9': it completed" in done.stderr
    done = await cli("retry", "orders/o-8")
    assert 1 == done.returncode and "it is running" in done.stderr
    done = await cli("retry", "orders/nope")
    assert 3 == done.returncode and "no instance at 'orders/nope'" in done.stderr
    done = await cli("retry", "orders/o-9", "--input", "[1]")
    assert 2 == done.returncode and "--input takes a JSON object" in done.stderr

    # A parent, with its failed child reset.
    done = await cli("retry", "trips/t-2")
    assert 0 == done.returncode, done.stderr
    assert (
        "and reset its 1 failed descendant, which its new run starts afresh:\n"
        "  trips/t-2/legs/t-2/b\n"
    ) in done.stdout
    done = await cli("retry", "trips/t-2/legs/t-2/a")
    assert 1 == done.returncode and "retry 'trips/t-2' instead" in done.stderr

    # The next system runs the new incarnations.
    KEYS.clear()
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        assert 4 == (await system.get("orders/o-8").result())["amount"]
        assert ["charged t-2-a", "charged t-2-b"] == await system.get("trips/t-2").result()
    assert ["orders/o-8/2/0/charge/1", "trips/t-2/legs/t-2/b/2/0/charge/1"] == sorted(KEYS)


@pytest.mark.slow  # the command line runs in a second process
async def test_the_cli_retries_through_a_running_system(tmp_path):
    path = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(path), processes=PROCESSES) as system:
        await failed(system, order, "o-10", amount=3)
        await failed(system, order, "o-11")
        await failed(system, order, "o-12")
        doc = await trio.to_thread.run_sync(
            lambda: run_json(path, "retry", "orders/o-10", "--input", '{"amount": 6}')
        )
        assert (True, 2, {"incarnation": 1, "status": "failed"}) == (
            doc["through_system"],
            doc["incarnation"],
            doc["replaced"],
        )
        assert 6 == (await system.get("orders/o-10").result())["amount"]
        done = await trio.to_thread.run_sync(lambda: run_cli(path, "retry", "orders/o-11"))
        assert 0 == done.returncode, done.stderr
        assert f"through the running system (pid {os.getpid()}) as incarnation 2" in done.stdout
        assert 1 == (await system.get("orders/o-11").result())["amount"]
        # Refused by the command line before it asks (it completed)...
        done = await trio.to_thread.run_sync(lambda: run_cli(path, "retry", "orders/o-10"))
        assert 1 == done.returncode and "cannot retry 'orders/o-10': it completed" in done.stderr
        # ... or by the system, which checks the input against the process: bad usage.
        done = await trio.to_thread.run_sync(
            lambda: run_cli(path, "retry", "orders/o-12", "--input", '{"nope": 1}')
        )
        assert 2 == done.returncode and "input ['nope'] does not fit" in done.stderr
        assert 1 == system.get("orders/o-12").incarnation
