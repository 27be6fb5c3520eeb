"""The deterministic simulation (#28): the kept seeds and a sweep of the
project's workload (tests/simulation), the same writes for the same seed,
and `actors.testing.simulate` and `storage.SimulatedJournal` on their own.

The project's seeds run through ``python -m tests.simulation`` in a
subprocess, which fixes the hash seed (see its ``HASH_SEED``); that keeps
a seed's run the same here as on a developer's command line.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

import actors
from actors import Context, Retry, Signal, process
from actors.testing import Simulation, simulate
from storage import (
    CommitOutcomeUnknown,
    HostCrashed,
    InstanceRecord,
    JournalFaults,
    JournalFull,
    JournalUnavailable,
    SimulatedJournal,
    Txn,
    instance_id,
)

# The journal contract, run on the simulated journal by this module's
# make_journal (it must keep every promise the real journals keep).
from tests.journals.test_journal_contract import *
from tests.simulation import run_seed
from tests.simulation.run import WORKLOAD

ROOT = Path(__file__).resolve().parents[2]
SWEEP = range(1, 31)  # the seeds CI runs besides the kept ones


@pytest.fixture
def make_journal():
    shared = SimulatedJournal(random.Random(1), faults=JournalFaults(split=0.5))
    return lambda: shared


def _kept() -> list[tuple[str, str, str, str]]:
    """(seed, invariant, status, what); a seed ``N@K`` runs with K nodes,
    ``N/wV`` under version V of the workload (1 where it says none)."""
    kept = []
    for line in (ROOT / "tests" / "simulation" / "seeds.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            seed, invariant, status, what = line.split(maxsplit=3)
            assert status in ("open", "fixed"), line
            assert re.fullmatch(r"\d+(@\d+)?(/w\d+)?", seed), line
            kept.append((seed, invariant, status, what))
    return kept


KEPT = _kept()


def _parts(seed: str) -> tuple[int, int, int]:
    """(number, nodes, workload) of a kept seed's name."""
    found = re.fullmatch(r"(\d+)(?:@(\d+))?(?:/w(\d+))?", seed)
    assert found is not None, seed
    return int(found[1]), int(found[2] or 1), int(found[3] or 1)


def _name(number: int, nodes: int, workload: int) -> str:
    return f"{number}{f'@{nodes}' if nodes > 1 else ''}{f'/w{workload}' if workload > 1 else ''}"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.simulation", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def verdicts() -> dict[str, str]:
    """The last line of every kept seed and every seed of the sweep, from
    one run of the command line per number of nodes."""
    runs: dict[tuple[int, int], set[int]] = {(1, WORKLOAD): set(SWEEP)}
    for seed, *_ in KEPT:
        number, nodes, workload = _parts(seed)
        runs.setdefault((nodes, workload), set()).add(number)
    lines = {}
    for (nodes, workload), numbers in sorted(runs.items()):
        seeds = sorted(numbers)
        result = _cli(
            "--seeds",
            ",".join(map(str, seeds)),
            "--nodes",
            str(nodes),
            "--workload",
            str(workload),
            "--jobs",
            "2",
        )
        got = []
        for line in result.stdout.splitlines():
            found = re.match(r"seed (\d+) (ok [0-9a-f]{32}|FAILED \S+)$", line)
            if found:
                lines[_name(int(found[1]), nodes, workload)] = found[2]
                got.append(int(found[1]))
        assert sorted(got) == seeds, result.stdout[-2000:] + result.stderr[-2000:]
    return lines


@pytest.mark.parametrize(
    "seed, invariant, what",
    [
        pytest.param(
            seed,
            invariant,
            what,
            marks=[pytest.mark.xfail(reason=f"open: {invariant}: {what}", strict=False)]
            if status == "open"
            else [],
            id=f"seed-{seed}",
        )
        for seed, invariant, status, what in KEPT
    ],
)
def test_a_kept_seed_passes(verdicts, seed, invariant, what):
    assert verdicts[seed].startswith("ok "), f"seed {seed}: {verdicts[seed]} ({what})"


def test_the_sweep_finds_nothing_new(verdicts):
    known = {seed: invariant for seed, invariant, *_ in KEPT}
    new = {
        seed: verdicts[_name(seed, 1, WORKLOAD)]
        for seed in SWEEP
        if not verdicts[_name(seed, 1, WORKLOAD)].startswith("ok ")
        and verdicts[_name(seed, 1, WORKLOAD)] != f"FAILED {known.get(_name(seed, 1, WORKLOAD))}"
    }
    assert new == {}, (
        "seeds of the sweep failed that tests/simulation/seeds.txt does not list; "
        "run 'python -m tests.simulation --seed N' for each to see why"
    )


@pytest.mark.parametrize("seed", range(1, 21))
def test_a_seed_writes_the_same_bytes_twice_in_one_process(seed):
    first, second = run_seed(seed), run_seed(seed)
    assert first.report.digest == second.report.digest
    assert first.report.trace == second.report.trace
    assert first.line() == second.line()


def test_a_seed_writes_the_same_bytes_in_two_processes():
    lines = [
        _cli("--seed", "4", env={"PYTHONHASHSEED": hash_seed}).stdout.splitlines()[-1]
        for hash_seed in ("1", "2")
    ]
    assert re.fullmatch(r"seed 4 ok [0-9a-f]{32}", lines[0])
    assert lines[0] == lines[1]


def test_a_seed_writes_the_same_bytes_whatever_the_hash_seed():
    code = "from tests.simulation import run_seed; print(run_seed(4).report.digest)"
    digests = [
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            timeout=600,
            check=False,
        ).stdout.strip()
        for hash_seed in ("123", "999")
    ]
    assert digests[0] == digests[1]


def test_the_command_line_says_failed_and_exits_1():
    # A planted bug (a compensation whose run leaves no trace) must be
    # caught, named, and replayed with its trace from the seed alone.
    planted = {"ACTORS_SIMULATION_PLANT": "forget-compensation"}
    sweep = _cli("--seeds", "1-12", env=planted)
    assert sweep.returncode == 1
    failed = [line for line in sweep.stdout.splitlines() if " FAILED " in line]
    assert failed and all(line.endswith(" FAILED saga") for line in failed), sweep.stdout
    seed = failed[0].split()[1]
    result = _cli("--seed", seed, env=planted)
    assert result.stdout.splitlines()[-1] == f"seed {seed} FAILED saga"
    assert result.returncode == 1
    assert "last journal events" in result.stdout


@pytest.mark.slow
def test_a_seed_of_two_nodes_writes_the_same_bytes_twice():
    first, second = run_seed(5, nodes=2), run_seed(5, nodes=2)
    assert first.ok, first.explain()
    assert first.report.digest == second.report.digest
    assert first.report.trace == second.report.trace


def test_nodes_must_be_one_or_more():
    result = _cli("--seed", "1", "--nodes", "0")
    assert result.returncode == 2
    assert "1 or more" in result.stderr


# -- simulate on a user's processes ---------------------------------------------------

note = Signal("note")
handled: list[tuple[str, int]] = []


def record(text: str) -> str:
    step = actors.current_step()
    handled.append((step.key, step.attempt))
    return text.upper()


@process("inbox/:id")
async def inbox(ctx: Context, id: str) -> list[str]:
    got = []
    for _ in range(5):
        text = await ctx.wait(note)
        got.append(await ctx.step(record, text, retry=Retry(attempts=20, backoff=0.1)))
        await ctx.sleep(ctx.random() * 10)
    return got


class Notes:
    """A workload: five notes to one inbox, carrying on across crashes."""

    def __init__(self) -> None:
        self.sent = 0
        self.lives: list[int] = []

    async def __call__(self, sim: Simulation) -> None:
        self.lives.append(sim.life)
        try:
            await sim.system.start(inbox, "a")
            while self.sent < 5:  # keyed: a resend after a crash stores nothing
                await sim.system.send("inbox/a", note, f"n{self.sent}", key=f"n{self.sent}")
                self.sent += 1
                await trio.sleep(sim.random.random())
        except actors.ActorError:
            return  # the host died under this call, or the journal failed it
        handle = await sim.system.lookup("inbox/a")
        assert handle is not None
        assert await handle.result() == ["N0", "N1", "N2", "N3", "N4"]


def test_simulate_runs_a_users_workload_the_same_way_twice():
    reports = []
    for _ in range(2):
        handled.clear()
        reports.append((simulate([inbox], Notes(), seed=11, crashes=0), list(handled)))
    (first, steps), (second, steps_again) = reports
    assert first.ok, first.explain()
    assert (first.digest, first.trace, steps) == (second.digest, second.trace, steps_again)
    assert len(steps) == 5 and first.crashes == 0
    assert re.fullmatch(r"[0-9a-f]{32}", first.digest)


def test_simulate_survives_crashes_and_reports_them():
    crashed = []
    for seed in range(1, 40):
        workload = Notes()
        report = simulate([inbox], workload, seed=seed, crashes=3, crash_within=15)
        assert report.ok, report.explain()
        if report.crashes:
            crashed.append(seed)
            assert workload.lives[: report.crashes + 1] == list(range(report.crashes + 1))
            assert "host crashed" in "\n".join(report.trace)
    assert crashed, "no seed crashed the host"


def test_on_write_sees_each_written_transaction_once_across_crashes():
    written: list[Txn] = []
    before: list[int] = []  # transactions written when the watcher was first added

    class Watched(Notes):
        async def __call__(self, sim: Simulation) -> None:
            if not before:
                before.append(sim.journal.log.writes)
            sim.on_write(written.append)  # at every life: added once
            await super().__call__(sim)

    crashed = 0
    for seed in range(1, 15):
        written.clear()
        before.clear()
        report = simulate([inbox], Watched(), seed=seed, crashes=2, crash_within=15)
        assert report.ok, report.explain()
        assert len(written) == report.writes - before[0] > 0
        assert len({id(txn) for txn in written}) == len(written)
        crashed += report.crashes > 0
    assert crashed, "no seed crashed the host"


def test_simulate_reports_what_the_check_raises():
    async def check(sim: Simulation) -> None:
        raise AssertionError("an invariant broke")

    async def idle(sim: Simulation) -> None:
        await sim.system.start(inbox, "b")

    report = simulate([inbox], idle, seed=3, crashes=0, check=check)
    assert isinstance(report.failure, AssertionError)
    assert not report.ok
    assert "an invariant broke" in report.explain()


def test_simulate_seeds_uuid4_inside_and_puts_everything_back():
    import uuid

    run = trio._core._run
    before = (run._ALLOW_DETERMINISTIC_SCHEDULING, trio.to_thread.run_sync, uuid.uuid4)
    drawn: list[uuid.UUID] = []

    async def idle(sim: Simulation) -> None:
        drawn.append(uuid.uuid4())
        await sim.system.start(inbox, "c")

    simulate([inbox], idle, seed=5, crashes=0)
    simulate([inbox], idle, seed=5, crashes=0)
    assert drawn[0] == drawn[1]
    assert (run._ALLOW_DETERMINISTIC_SCHEDULING, trio.to_thread.run_sync, uuid.uuid4) == before
    assert uuid.uuid4() != drawn[0]


# -- the simulated journal ------------------------------------------------------------

X = instance_id("sim/x")


def _put(txn: Txn, status: str = "running") -> Txn:
    txn.put_instance(
        X, address="sim/x", process="sim/:id", status=status, record=InstanceRecord(params=["x"])
    )
    return txn


def _status(journal: SimulatedJournal) -> str | None:
    with journal.reader() as r:
        row = r.instance(X)
    return None if row is None else row.status


async def test_a_write_is_seen_once_its_batch_commits(autojump_clock):
    journal = SimulatedJournal(random.Random(0), faults=JournalFaults(latency=0.01))
    async with journal:
        ticket = journal.submit(_put(Txn()))
        assert _status(journal) is None  # in flight, as in LMDB's writer
        await ticket.wait()
        assert _status(journal) == "running"
        assert journal.log.commits == 1 and journal.log.writes == 1


async def test_a_crash_keeps_what_was_committed_and_nothing_else(autojump_clock):
    journal = SimulatedJournal(random.Random(0))
    async with journal:
        await journal.commit(_put(Txn()))
        held = journal.defer(Txn())  # held back: lost with the host
        held_txn = journal.defer(_put(Txn(), "suspended"))
        journal.crash()
        with pytest.raises(HostCrashed):
            await held_txn.wait()
        with pytest.raises(HostCrashed):
            journal.submit(Txn())
        assert held.done
    journal.recover()
    async with journal:
        assert _status(journal) == "running"


@pytest.mark.parametrize("after_write", [False, True])
async def test_a_crash_at_a_commit_keeps_it_only_once_written(autojump_clock, after_write):
    journal = SimulatedJournal(random.Random(0))
    crashed = []
    journal.on_crash = lambda: crashed.append(True)
    async with journal:
        journal.crash_at, journal.crash_after_write = journal.log.commits + 1, after_write
        with pytest.raises(HostCrashed):
            await journal.commit(_put(Txn()))
    assert crashed == [True]
    journal.recover()
    async with journal:
        assert _status(journal) == ("running" if after_write else None)


async def test_async_durability_acknowledges_what_a_crash_then_loses(autojump_clock):
    journal = SimulatedJournal(
        random.Random(0), durability="async", faults=JournalFaults(latency=1.0)
    )
    async with journal:
        t0 = trio.current_time()
        assert await journal.commit(_put(Txn())) == []
        assert trio.current_time() == t0  # queued is enough
        journal.crash()
    journal.recover()
    async with journal:
        assert _status(journal) is None


@pytest.mark.parametrize(
    "faults, error, written",
    [
        (JournalFaults(full=1.0), JournalFull, False),
        (JournalFaults(disk=1.0), JournalFull, False),
        (JournalFaults(unavailable=1.0), JournalUnavailable, False),
        (JournalFaults(unknown=1.0), CommitOutcomeUnknown, None),
    ],
)
async def test_faults_fail_a_commit_as_the_real_journals_do(autojump_clock, faults, error, written):
    journal = SimulatedJournal(random.Random(0), faults=faults)
    async with journal:
        with pytest.raises(error):
            await journal.commit(_put(Txn()))
        if written is not None:
            assert _status(journal) is None
        assert "commit 1" in "\n".join(journal.log.recent)


async def test_an_outage_fails_reads_too_until_it_ends(autojump_clock):
    journal = SimulatedJournal(random.Random(0), faults=JournalFaults(outage=1.0))
    async with journal:
        with pytest.raises(JournalUnavailable):
            await journal.commit(_put(Txn()))
        with pytest.raises(JournalUnavailable):
            _status(journal)
        journal.faults = journal.faults.quiet()
        await trio.sleep(JournalFaults().outage_seconds[1])
        await journal.commit(_put(Txn()))
        assert _status(journal) == "running"


def test_one_seed_one_digest():
    digests = []
    for _ in range(2):
        journal = SimulatedJournal(random.Random(7), faults=JournalFaults(split=0.5, full=0.3))
        trio.run(_twenty_appends, journal, clock=trio.testing.MockClock(autojump_threshold=0))
        digests.append(journal.log.hexdigest())
    assert digests[0] == digests[1]
    assert journal.log.commits > 1


async def _twenty_appends(journal: SimulatedJournal) -> None:
    async with journal:
        tickets = []
        for n in range(20):
            txn = Txn()
            txn.append_message(X, {"n": n})
            tickets.append(journal.submit(txn))
            if n % 3 == 0:
                await trio.sleep(0.0001)
        for ticket in tickets:
            with contextlib.suppress(JournalFull):
                await ticket.wait()


# -- the nodes of one simulated store ------------------------------------------------


async def test_nodes_share_the_store_and_give_each_instance_one_owner(autojump_clock):
    from storage import Conflict, simulated_nodes

    a, b = simulated_nodes(random.Random(3), ["a", "b"])
    noticed: list[bytes] = []
    iid = instance_id("box/1")
    async with a, b:
        b.on_mail(noticed.append)
        start = Txn()
        start.put_instance(
            iid,
            address="box/1",
            process="box/:id",
            status="running",
            record=InstanceRecord(params=["1"]),
        )
        await a.commit(start)
        assert await b.claim(iid) is None  # a made it and holds its lease
        epoch = await a.claim(iid)
        assert epoch is not None
        with b.reader() as r:
            assert r.instance(iid) is not None  # one store
        assert await b.orphans() == []
        mail = Txn()
        mail.append_message(iid, ["ping", None, 0.0])
        await b.commit(mail)
        assert noticed == []  # a owns it: a is told, not b
        stale = Txn()
        stale.fence(iid, epoch - 1)
        stale.put_log(iid, 0, 1, "stale")
        with pytest.raises(Conflict) as refused:
            await a.commit(stale)
        assert refused.value.reason == "epoch"
        a.crash("test")
        assert await b.orphans() == [iid]  # a's lease ended with it
        taken = await b.claim(iid)
        assert taken is not None and taken > epoch
        a.recover()
        await a.open()
        assert a.lease_term() == 2
        late = Txn()
        late.fence(iid, epoch)
        late.put_log(iid, 0, 1, "late")
        with pytest.raises(Conflict):
            await a.commit(late)  # fenced out: b owns it now
        told: list[bytes] = []
        a.on_mail(told.append)
        more = Txn()
        more.append_message(iid, ["ping", None, 0.0])
        await a.commit(more)
        assert noticed == [iid] and told == []  # b owns it now: b is told


async def test_a_lapsed_lease_loses_the_instances_and_their_notices_until_resumed(
    autojump_clock,
):
    from storage import Conflict, simulated_nodes

    a, b = simulated_nodes(random.Random(4), ["a", "b"])
    iid = instance_id("box/2")
    async with a, b:
        told: list[bytes] = []
        a.on_mail(told.append)
        start = Txn()
        start.put_instance(
            iid,
            address="box/2",
            process="box/:id",
            status="running",
            record=InstanceRecord(params=["2"]),
        )
        await a.commit(start)
        epoch = await a.claim(iid)
        assert epoch is not None
        a.lapse()
        assert a.lapsed and a.lease_term() == 1  # it has not noticed
        with pytest.raises(JournalUnavailable):
            await a.claim(iid)  # its lease's connection is gone
        with pytest.raises(JournalUnavailable):
            await a.orphans()
        assert await b.orphans() == [iid]
        taken = await b.claim(iid)
        assert taken is not None and taken > epoch
        mail = Txn()
        mail.append_message(iid, ["ping", None, 0.0])
        await b.commit(mail)
        assert told == []  # b owns it now; and a hears nothing while lapsed
        write = Txn()
        write.fence(iid, epoch)
        write.put_log(iid, 0, 1, "after the lapse")
        with pytest.raises(Conflict) as refused:
            await a.commit(write)  # its fence is stale: nothing written
        assert refused.value.reason == "epoch"
        assert a.cluster.stale == []
        unfenced = Txn()
        unfenced.put_log(iid, 0, 1, "no fence")
        await a.commit(unfenced)  # the journal takes it; the simulation records it
        assert a.cluster.stale == [
            f"node a wrote log to an instance node b owns (epoch {taken}), with no claim of its own"
        ]
        ours = instance_id("box/3")
        own = Txn()
        own.put_instance(
            ours,
            address="box/3",
            process="box/:id",
            status="running",
            record=InstanceRecord(params=["3"]),
        )
        own.append_message(ours, ["ping", None, 0.0])
        await a.commit(own)  # a new instance is its writer's (epoch 0)
        a.resume()
        assert not a.lapsed and a.lease_term() == 2
        assert told == [ours]  # its mail connection, back, tells of what it owns with mail
        assert await b.orphans() == []


def test_simulate_runs_a_users_workload_on_two_nodes_through_their_crashes():
    # One node's crash leaves its instances to the other (takeover), and the
    # workload, talking to either node, still sees its five notes handled.
    crashed = 0
    for seed in range(1, 6):
        handled.clear()
        report = simulate(
            [inbox], Notes(), seed=seed, crashes=2, crash_within=15, nodes=2, settle=60.0
        )
        assert report.ok, report.explain()
        crashed += report.crashes
        # Five steps, each under its own key (one run again after a crash
        # keeps its key), whichever node ran it.
        assert len({key for key, _ in handled}) == 5
    assert crashed, "no seed crashed a node"


def test_simulate_runs_a_users_workload_on_two_nodes_through_lapsed_leases(monkeypatch):
    # A node runs on while its lease has lapsed; the other takes its
    # instances over; nothing is written past a fence, nothing is lost.
    from storage import SimulatedNode

    lapsed = []
    real = SimulatedNode.lapse
    monkeypatch.setattr(SimulatedNode, "lapse", lambda self: (lapsed.append(self.node), real(self)))
    for seed in range(1, 6):
        handled.clear()
        report = simulate(
            [inbox],
            Notes(),
            seed=seed,
            crashes=0,
            nodes=2,
            settle=60.0,
            lapses=2,
            check=_no_stale_writes,
        )
        assert report.ok, report.explain()
        assert len({key for key, _ in handled}) == 5
    assert len(lapsed) == 10


async def _no_stale_writes(sim: Simulation) -> None:
    assert sim.stale_writes == []


@process("ticker/:id")
async def ticker(ctx: Context, id: str, *, count: int) -> int:
    for i in range(count):
        await ctx.sleep(1.0)
        await ctx.emit(i)
    return count


async def test_a_consumer_on_one_node_reads_what_an_instance_on_another_emits(autojump_clock):
    # Found by the simulation (seed 12@2 of workload 4): the consumer waited
    # for a status change here, which another node's emits never make.
    from storage import simulated_nodes

    a, b = simulated_nodes(random.Random(5), ["a", "b"])
    async with (
        actors.open_system(a, [ticker], control=False, node="a") as on_a,
        actors.open_system(b, [ticker], control=False, node="b") as on_b,
    ):
        await on_a.start(ticker, "t1", count=4)
        got = []
        with trio.fail_after(60):
            async with on_b.stream("ticker/t1", "reader") as values:
                async for value in values:
                    got.append(value)
        assert got == [0, 1, 2, 3]
