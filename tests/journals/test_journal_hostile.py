"""The LMDB journal under hostile conditions: a full map and a full disk, a
bad transaction among good ones, sustained "async" load, a CPU-busy
neighbour, and other users of the host."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import trio

import actors
from actors import LimitExceeded, Signal, process
from storage import (
    MAX_ADDRESS_BYTES,
    EncodeError,
    InstanceRecord,
    Journal,
    JournalCorrupt,
    JournalDiskFull,
    JournalFull,
    LMDBJournal,
    Txn,
    instance_id,
)
from storage._journal import PUT_INSTANCE, STATUS_CODE
from storage._lmdb import ASYNC_WINDOW_TXNS
from tests.crash_kit import acked_ids, kill_after_acks
from tests.runtime_helpers import virtual_wall

ping = Signal("ping")


@process("hostile/:n")
async def echo(ctx, n):
    """Emits every ping's payload, four times the size: its own writes fill
    the journal faster than the sends do."""
    while True:
        value = await ctx.wait(ping)
        await ctx.emit({"i": value["i"], "pad": value["pad"] * 4})


@process("idle/:n")
async def idle(ctx, n):
    await ctx.wait(ping)


@process("sink/:n")
async def sink(ctx, n):
    while True:
        await ctx.wait(ping)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def _stream_when_complete(system, address: str, count: int) -> list:
    iid = instance_id(address)
    with trio.fail_after(600):
        while True:
            with system.journal.reader() as r:
                if r.stream_length(iid) >= count:
                    return [value for _, value in r.stream(iid, 0, count + 10)]
            await trio.sleep(0.05)


async def _suspended_with(handle, text: str) -> None:
    with trio.fail_after(600):
        while not (handle.status == "suspended" and text in (handle.last_error or "")):
            await trio.sleep(0.01)


# -- permissions ---------------------------------------------------------------


async def test_a_new_journal_is_private_to_its_owner_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        async with LMDBJournal(tmp_path / "deep" / "journal"):
            pass
    finally:
        os.umask(old)
    path = tmp_path / "deep" / "journal"
    modes = {name: _mode(path / name) for name in ("data.mdb", "lock.mdb", "owner.lock")}
    assert (0o700, {"data.mdb": 0o600, "lock.mdb": 0o600, "owner.lock": 0o600}) == (
        _mode(path),
        modes,
    )


async def test_opening_a_journal_others_can_read_warns_with_the_fix(tmp_path, caplog):
    path = tmp_path / "journal"
    async with LMDBJournal(path):
        pass
    os.chmod(path, 0o755)
    os.chmod(path / "data.mdb", 0o644)
    with caplog.at_level(logging.WARNING, logger="storage"):
        async with LMDBJournal(path):
            pass
        async with LMDBJournal(path, readonly=True):  # the CLI's way in
            pass
    warnings = [r.getMessage() for r in caplog.records if r.name == "storage"]
    assert 2 == len(warnings)
    assert f"{path} (mode 0755)" in warnings[0]
    assert f"{path / 'data.mdb'} (mode 0644)" in warnings[0]
    assert f"chmod 700 {path} && chmod 600 {path / 'data.mdb'}" in warnings[0]
    # Left as it was (it may be shared on purpose), and quiet once private.
    assert (0o755, 0o644) == (_mode(path), _mode(path / "data.mdb"))
    os.chmod(path, 0o700)
    os.chmod(path / "data.mdb", 0o600)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="storage"):
        async with LMDBJournal(path):
            pass
    assert [] == [r for r in caplog.records if r.name == "storage"]


# -- a full map --------------------------------------------------------------------


async def test_every_commit_that_finds_the_map_full_gets_journal_full(make_lmdb):
    iid = instance_id("a")
    committed: list[int] = []
    failures: list[BaseException] = []

    async def write(i: int) -> None:
        txn = Txn()
        txn.put_log(iid, 0, i, b"x" * (100, 1000, 3000, 20_000)[i % 4])
        try:
            await j.commit(txn)
            committed.append(i)
        except Exception as exc:  # noqa: BLE001 - every kind is checked below
            failures.append(exc)

    async with make_lmdb(map_size=1 << 20, max_map_size=1 << 20) as j:
        for round in range(8):  # rounds of concurrent writers: group commits
            async with trio.open_nursery() as n:
                for i in range(40 * round, 40 * round + 40):
                    n.start_soon(write, i)
    assert failures and committed
    assert [] == [f for f in failures if type(f) is not JournalFull]
    assert all("max_map_size=1048576" in str(f) for f in failures)
    async with make_lmdb(max_map_size=1 << 26) as j:
        with j.reader() as r:
            assert sorted(committed) == sorted(r.log(iid, 0))


async def test_a_full_map_suspends_the_writer_keeps_the_system_up_and_a_bigger_map_recovers_all(
    tmp_path, autojump_clock
):
    path = tmp_path / "journal"
    acked: list[int] = []
    full: list[BaseException] = []
    small = LMDBJournal(path, map_size=1 << 20, max_map_size=1 << 20)
    async with actors.open_system(small, processes=[echo, idle], now=virtual_wall) as system:
        handle = await system.start(echo, "a")
        for i in range(2000):
            try:
                await system.send("hostile/a", ping, {"i": i, "pad": "x" * 3000})
                acked.append(i)
            except JournalFull as exc:
                full.append(exc)
                if len(full) == 5:
                    break
        assert 5 == len(full)
        assert all(type(f) is JournalFull and "max_map_size=1048576" in str(f) for f in full)
        # The instance's own emit found the map full: suspended, not the system.
        await _suspended_with(handle, "JournalFull")
        # The system is up: it reads, answers queries and takes calls.
        assert ["hostile/a"] == [info.id async for info in system.query()]
        with pytest.raises(actors.NotDelivered):
            await system.send("hostile/nobody", ping, {"i": 0, "pad": ""})
    big = LMDBJournal(path, max_map_size=1 << 28)
    async with actors.open_system(big, processes=[echo, idle], now=virtual_wall) as system:
        values = await _stream_when_complete(system, "hostile/a", len(acked))
        assert acked == [v["i"] for v in values]
        await system.start(idle, "b")  # room again
        with trio.fail_after(60):
            while (
                system.get("hostile/a").status != "suspended" or system.get("hostile/a").last_error
            ):
                await trio.sleep(0.01)


_FULL_CHILD = """
import os, sys, trio, actors
from storage import JournalFull, LMDBJournal
from tests.journals.test_journal_hostile import echo, ping

async def main(path, acks):
    fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    small = LMDBJournal(path, map_size=1 << 20, max_map_size=1 << 20)
    async with actors.open_system(small, processes=[echo]) as system:
        for k in range(4):
            await system.start(echo, str(k))

        async def sender(k):
            for i in range(10**6):
                n = k * 10**6 + i
                while True:
                    try:
                        await system.send(f"hostile/{k}", ping, {"i": n, "pad": "x" * 2000})
                    except JournalFull:
                        os.write(fd, b"F %d\\n" % n)  # refused: not acknowledged
                        await trio.sleep(0.01)
                        continue
                    os.write(fd, b"S %d\\n" % n)
                    break

        async with trio.open_nursery() as nursery:
            for k in range(4):
                nursery.start_soon(sender, k)

trio.run(main, sys.argv[1], sys.argv[2])
"""


@pytest.mark.slow  # a real child process filling its map, SIGKILLed: ~5 s
async def test_a_sigkill_on_a_full_map_loses_nothing_acknowledged_and_repeats_nothing(tmp_path):
    path, acks = tmp_path / "journal", tmp_path / "acks"

    def refusals() -> int:
        text = acks.read_text() if acks.exists() else ""
        return sum(1 for line in text.split("\n") if line.startswith("F "))

    kill_after_acks(
        ["-c", _FULL_CHILD, str(path), str(acks)],
        stderr_path=tmp_path / "stderr",
        acked=refusals,  # killed once the map has been full for a while
        min_acks=40,
        start_timeout=120,
        delay=0.3,
        label="full-map child",
    )
    acked = acked_ids(acks)
    assert acked
    big = LMDBJournal(path, max_map_size=1 << 28)
    async with actors.open_system(big, processes=[echo]) as system:
        emitted: list[int] = []
        with trio.fail_after(120):
            for k in range(4):
                wanted = {n for n in acked if n // 10**6 == k}
                iid = instance_id(f"hostile/{k}")
                while True:
                    with system.journal.reader() as r:
                        values = [v["i"] for _, v in r.stream(iid, 0, 10**6)]
                    if wanted <= set(values):
                        break
                    await trio.sleep(0.05)
                emitted += values
    # No acknowledged message lost (above), none handled twice.
    assert len(emitted) == len(set(emitted))
    print(f"{len(acked)} acknowledged sends on a full map, all handled once after the SIGKILL")


async def test_a_stalled_instance_resumes_once_cleanup_makes_room(tmp_path, autojump_clock):
    # No reopen: space comes back inside the map, and the retry finds it.
    path = tmp_path / "journal"
    acked: list[int] = []
    journal = LMDBJournal(path, map_size=1 << 20, max_map_size=1 << 20)
    async with actors.open_system(journal, processes=[echo, idle], now=virtual_wall) as system:
        handle = await system.start(echo, "a")
        fillers = []
        for i in range(100):  # about a third of the map, in finished instances
            try:
                fillers.append(await system.start(idle, f"f{i}"))
                await system.send(f"idle/f{i}", ping, "x" * 3000)  # ends it
            except JournalFull:
                break
        for i in range(500):
            try:
                await system.send("hostile/a", ping, {"i": i, "pad": "x" * 1000})
                acked.append(i)
            except JournalFull:
                break
            await trio.sleep(0.01)
            if handle.last_error:
                break  # stalled: stop adding work it must redo
        await _suspended_with(handle, "JournalFull")
        for filler in fillers:
            with trio.fail_after(60):
                while filler.status != "completed":
                    await trio.sleep(0.01)
        await trio.sleep(1)
        assert len(fillers) == await system.cleanup(older_than=0.5)
        values = await _stream_when_complete(system, "hostile/a", len(acked))
        assert acked == [v["i"] for v in values]
        # Its error clears once it runs with room (a write refused while the
        # map was full may take one more retry round to go through).
        with trio.fail_after(60):
            while handle.last_error is not None:
                await trio.sleep(0.1)


def _mount_tmpfs(where, size: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)


@pytest.mark.slow  # a real filesystem filling up: ~2 s
@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="mounting a small tmpfs to fill needs root; run the suite as root to cover a full disk",
)
async def test_a_full_disk_gives_journal_disk_full_and_the_system_carries_on(tmp_path):
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    try:
        _mount_tmpfs(mnt, "2m")
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc}); needs CAP_SYS_ADMIN")
    try:
        path = mnt / "journal"
        acked: list[int] = []
        full: list[BaseException] = []
        journal = LMDBJournal(path, map_size=1 << 28)  # the disk, not the map, runs out
        async with actors.open_system(journal, processes=[echo, idle]) as system:
            handle = await system.start(echo, "a")
            for i in range(2000):
                try:
                    await system.send("hostile/a", ping, {"i": i, "pad": "x" * 6000})
                    acked.append(i)
                except JournalFull as exc:
                    full.append(exc)
                    if len(full) == 3:
                        break
            assert 3 == len(full)
            assert all(type(f) is JournalDiskFull for f in full), full
            assert all(f.path == str(path) and "df " in str(f) for f in full)
            with trio.fail_after(30):
                await _suspended_with(handle, "JournalDiskFull")
            # Space returns: the same calls work again, and the stalled
            # instance resumes by itself (its retry backs off from 1 s).
            subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
            await system.send("hostile/a", ping, {"i": -1, "pad": ""})
            acked.append(-1)
            with trio.fail_after(30):
                values = await _stream_when_complete(system, "hostile/a", len(acked))
            assert acked == [v["i"] for v in values]
        async with LMDBJournal(path) as journal, trio.open_nursery():
            with journal.reader() as r:
                stored = [v["i"] for _, v in r.stream(instance_id("hostile/a"), 0, 5000)]
            assert acked == stored
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# -- one bad transaction in a batch -------------------------------------------


async def test_a_transaction_lmdb_refuses_fails_alone_in_its_batch(make_lmdb):
    iid = instance_id("a")
    outcomes: dict[str, object] = {}

    async def commit(name: str, txn: Txn) -> None:
        try:
            outcomes[name] = await j.commit(txn)
        except Exception as exc:  # noqa: BLE001
            outcomes[name] = exc

    async with make_lmdb() as j:
        setup = Txn()
        setup.put_instance(iid, address="a", process="p", status="running", record=InstanceRecord())
        await j.commit(setup)
        async with trio.open_nursery() as n:
            for i in range(100):
                txn = Txn()
                txn.append_message(iid, i)
                n.start_soon(commit, f"ok{i}", txn)
            header = Txn()  # what a record header over its 2-byte length would be
            header.ops.append(
                (PUT_INSTANCE, instance_id("b"), STATUS_CODE["running"], "p", "b" * 70_000, b"\x80")
            )
            n.start_soon(commit, "header", header)
            key = Txn()  # a key over LMDB's 511 bytes
            key.set_cursor(iid, "c" * 600, 1)
            n.start_soon(commit, "key", key)
        assert isinstance(outcomes.pop("header"), EncodeError)
        assert isinstance(outcomes.pop("key"), EncodeError)
        assert [[i + 1] for i in range(100)] == sorted(outcomes[f"ok{i}"] for i in range(100))
        # Alone (the inline path), it fails the same way, and the next commit works.
        with pytest.raises(EncodeError, match="nothing of it was written"):
            await j.commit(key)
        after = Txn()
        after.append_message(iid, 100)
        assert [101] == await j.commit(after)
        with j.reader() as r:
            assert list(range(101)) == sorted(m for _, m in r.mailbox(iid))
            assert (None, {}) == (r.instance(instance_id("b")), r.cursors(iid))


def test_an_address_over_the_limit_is_refused_when_the_transaction_is_built():
    with pytest.raises(EncodeError, match=f"{MAX_ADDRESS_BYTES} \\(MAX_ADDRESS_BYTES\\)"):
        Txn().put_instance(
            instance_id("x"),
            address="x" * (MAX_ADDRESS_BYTES + 1),
            process="p",
            status="running",
            record=InstanceRecord(),
        )


async def test_a_70_kb_path_param_is_refused_at_the_call_and_the_batch_around_it_commits(
    opener,
):
    async with opener(idle) as system:
        await system.start(idle, "target")
        results: list[object] = []

        async def send(i: int) -> None:
            await system.send("idle/target", ping, i)
            results.append(i)

        async def bad_start() -> None:
            with pytest.raises(LimitExceeded, match=f"{MAX_ADDRESS_BYTES}"):
                await system.start(idle, "p" * 70_000)
            results.append("refused")

        async with trio.open_nursery() as n:
            for i in range(50):
                n.start_soon(send, i)
            n.start_soon(bad_start)
            for i in range(50, 100):
                n.start_soon(send, i)
        assert ["refused", *range(100)] == sorted(
            results, key=lambda x: -1 if x == "refused" else x
        )
        assert system.get("idle/" + "p" * 70_000) is None
        with system.journal.reader() as r:
            assert 1 == sum(1 for _ in r.instances())


# -- "async" durability under sustained load ----------------------------------------


@pytest.mark.slow  # real time: 16 writers for 3 s
async def test_async_durability_keeps_committing_and_bounds_its_window(tmp_path):
    journal = LMDBJournal(tmp_path / "journal", durability="async")
    async with actors.open_system(journal, processes=[idle, sink]) as system:
        await system.start(sink, "probe")
        started = [0]
        txnids: list[int] = []
        windows: list[int] = []
        send_times: list[float] = []

        async def starter(k: int) -> None:
            i = 0
            while True:
                await system.start(idle, f"{k}-{i}")
                started[0] += 1
                i += 1

        probed = trio.Event()

        async def prober() -> None:
            for i in range(10):
                await trio.sleep(0.25)
                t0 = time.perf_counter()
                await system.send("sink/probe", ping, i)  # waits for its commit
                send_times.append(time.perf_counter() - t0)
            probed.set()

        async with trio.open_nursery() as n:
            for k in range(16):
                n.start_soon(starter, k)
            n.start_soon(prober)
            # Sample for 3 s at least, and until the ten probes are through
            # (on a loaded machine a probe's commit may take longer than
            # its share of the 3 s; the bound on it is checked below).
            while len(txnids) < 30 or not probed.is_set():
                await trio.sleep(0.1)
                txnids.append(journal._env.info()["last_txnid"])
                windows.append(journal._uncommitted)
            n.cancel_scope.cancel()
        assert 10 == len(send_times)
    assert started[0] > 0
    # It commits all along: no second goes by without a commit.
    assert all(txnids[i + 10] > txnids[i] for i in range(len(txnids) - 10)), txnids
    # Queued and uncommitted: the acknowledged window, the starts waiting
    # past it, and what the instances those starts made submit of their own
    # (each at most once before the next commit).
    assert max(windows) <= 2 * ASYNC_WINDOW_TXNS + 16, windows
    assert max(send_times) < 5.0, send_times


_ASYNC_CHILD = """
import os, sys, time, trio, actors
from storage import LMDBJournal
from storage._lmdb import LMDBJournal as J
from tests.journals.test_journal_hostile import idle

if sys.argv[3] == "slow-disk":  # every commit takes 0.2 s more, as on a busy disk
    commit = J._commit_batch
    J._commit_batch = lambda self, *a: (time.sleep(0.2), commit(self, *a))[1]

async def main(path, acks):
    fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    async with actors.open_system(LMDBJournal(path, durability="async"), processes=[idle]) as s:
        async def starter(k):
            for i in range(10**9):
                await s.start(idle, str(k * 10**6 + i))
                os.write(fd, b"S %d\\n" % (k * 10**6 + i))
        async with trio.open_nursery() as n:
            for k in range(16):
                n.start_soon(starter, k)

trio.run(main, sys.argv[1], sys.argv[2])
"""


@pytest.mark.slow  # a real child process under load, SIGKILLed: ~5 s
@pytest.mark.parametrize("disk", ["fast-disk", "slow-disk"])
async def test_a_sigkill_under_async_load_loses_at_most_the_window(tmp_path, disk):
    path, acks = tmp_path / "journal", tmp_path / "acks"
    kill_after_acks(
        ["-c", _ASYNC_CHILD, str(path), str(acks), disk],
        stderr_path=tmp_path / "stderr",
        acked=lambda: len(acked_ids(acks)),
        min_acks=3000,
        start_timeout=60,
        delay=1.0,
        label="async child",
    )
    acked = acked_ids(acks)
    async with LMDBJournal(path) as journal:
        with journal.reader() as r:
            lost = [i for i in acked if r.instance(instance_id(f"idle/{i}")) is None]
    assert len(acked) >= 3000
    assert len(lost) <= ASYNC_WINDOW_TXNS, (len(lost), len(acked))


# -- a CPU-busy neighbour ----------------------------------------------------------
#
# A trio task that computes for 1 ms and then checkpoints keeps the GIL nearly
# always, yet drops it on every pass of the run loop, which restarts CPython's
# hand-over clock for a thread waiting for it: the journal's writer thread
# waited seconds to run a line (see storage/_handoff.py). It loses its
# race for the GIL when it runs on another core than the trio thread (on the
# same core the kernel lets it in as it wakes). Where the kernel puts it
# depends on what else the host runs: unplaced, the stall showed in 0-100%
# of runs as the host's load changed. So the test places the threads; then
# the code before the fix managed 1-12 sends in 3 s in every one of 29 runs,
# with and without other CPU-bound processes on the host.

SLOW = 0.05  # s: a send beside the busy task that takes longer is late
# Late time allowed in all. A starved writer is let through within
# NUDGE_AFTER + NUDGE_WAIT (15 ms) of each step it waits at; in 30 runs of
# this test on a 2-core machine beside one or two other CPU-bound processes
# (30,666 sends beside the sleep(0) task) the slowest took 83 ms and the
# most late in one run was 43 ms. The budget leaves room for one send
# delayed by a busy host (a thread waiting 100 ms for a core) besides what
# `_compute_and_checkpoint` sees the host take.
LATE_BUDGET = 0.05


@contextmanager
def _trio_thread_on_a_core_of_its_own() -> Iterator[None]:
    """Run this (the trio) thread on one core and the process's other
    threads on the others, as they are on an idle multi-core host; as they
    were afterwards. Where there is one core, or no affinity, nothing."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    if len(cpus) < 2 or not os.path.isdir("/proc/self/task"):
        yield
        return
    me = threading.get_native_id()
    saved = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpus[0]} if tid == me else set(cpus[1:]))
        except OSError:  # it ended meanwhile
            pass
    try:
        yield
    finally:
        for tid, cpus_before in saved.items():
            with suppress(OSError):
                os.sched_setaffinity(tid, cpus_before)


async def _compute_and_checkpoint(pause: float, stolen: list[float]) -> None:
    """Compute for 1 ms between checkpoints, forever. ``stolen[0]`` sums the
    time the host kept this (the trio) thread off its core while it
    computed: its wall time beyond its CPU time. A send waits that long too,
    and no journal can help it, so the test does not count it as late."""
    while True:
        wall, cpu = time.perf_counter(), time.thread_time()
        until = wall + 0.001
        while time.perf_counter() < until:
            pass
        stolen[0] += max(0.0, time.perf_counter() - wall - (time.thread_time() - cpu))
        await trio.sleep(pause)


async def send_beside_a_busy_task(
    journal: Journal, pause: float, seconds: float
) -> tuple[list[float], float]:
    """Send for ``seconds`` (a send still waiting then is cut short and
    counted with the time it had taken) beside a task that computes; the
    time each send took, and the time the host took from the trio thread."""
    times: list[float] = []
    stolen = [0.0]
    async with actors.open_system(journal, processes=[sink], control=False) as system:
        await system.start(sink, "target")
        with _trio_thread_on_a_core_of_its_own():
            async with trio.open_nursery() as n:
                n.start_soon(_compute_and_checkpoint, pause, stolen)
                with trio.move_on_after(seconds):
                    while True:
                        t0 = time.perf_counter()
                        try:
                            await system.send("sink/target", ping, len(times))
                        finally:
                            times.append(time.perf_counter() - t0)
                n.cancel_scope.cancel()
    return times, stolen[0]


@pytest.fixture
def memory_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory (tmpfs) where there is one: what is measured is
    the hand-over between threads, and a host's busy disk (fsyncs of 0.3 s
    were seen) would only add noise."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="busy-neighbour-") as path:
        yield Path(path)


@pytest.mark.slow  # real time: 3 s of sends (1 s with the mild neighbour)
@pytest.mark.parametrize("durability", ["sync", "async"])
@pytest.mark.parametrize("pause", [0, 0.001], ids=["sleep0", "sleep1ms"])
async def test_sends_return_promptly_beside_a_cpu_busy_task(memory_dir, pause, durability):
    # "async" acknowledges once queued but waits for its commit once the
    # window is full; with the writer starved that came after 1 s (the
    # window's age bound), and then sends took 1.6-9 s.
    times, stolen = await send_beside_a_busy_task(
        LMDBJournal(memory_dir / "journal", durability=durability),
        pause,
        seconds=3.0 if pause == 0 else 1.0,
    )
    check_prompt(times, stolen)


def check_prompt(times: list[float], stolen: float, budget: float = LATE_BUDGET) -> None:
    """The sends of `send_beside_a_busy_task` returned promptly: late by no
    more than ``budget`` in all, beyond what the host took."""
    late = sum(max(0.0, t - SLOW) for t in times)
    times.sort()
    # A string: pytest would cut a list's repr short after six items, and
    # the slowest sends are the last of the ten.
    shown = " ".join(f"{t:.3f}" for t in times[-10:])
    assert len(times) >= 50, (len(times), shown)
    # The bounds, kept: they leave room for a loaded 2-core machine.
    assert times[len(times) // 2] < 0.1, shown  # the median
    assert times[len(times) * 98 // 100] < 1.0, shown  # p98
    # Late beyond what a busy host took from every task alike.
    assert late - stolen < budget, (round(late, 3), round(stolen, 3), len(times), shown)


def test_journal_errors_are_the_runtimes_errors():
    assert (actors.JournalDiskFull, actors.JournalFull) == (JournalDiskFull, JournalFull)
    assert issubclass(JournalDiskFull, JournalFull)
    assert not issubclass(JournalFull, JournalCorrupt)
