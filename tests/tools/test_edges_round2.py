"""Edges found in a second round of review: the web inspector's Host check
on every bind address, arguments refused at the call with our own errors,
a read nested in a read, and an offline CLI write racing ``open_system``.

Each test names what it guards. Those that run a subprocess or wait on real
time are marked slow and say why.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import trio

import actors
from actors import OneForAll, OneForOne, RestForOne, Signal, process
from actors._system._control import SOCKET_NAME
from actors._tools._cli._access import writing
from actors.errors import InvalidArguments
from storage import JournalLocked, LMDBJournal, MemoryJournal, instance_id
from storage._lmdb import _journal as lmdb_journal

ROOT = Path(__file__).resolve().parents[2]

go = Signal("go")


@process("waiters/:id")
async def waiter(ctx, id):
    return await ctx.wait(go)


@process("quick/:id")
async def quick(ctx, id):
    return f"done {id}"


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


# -- (7) the web inspector checks Host on every bind address ---------------------------


def _get(host: str, port: int, host_header: str) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest("GET", "/", skip_host=True)
        conn.putheader("Host", host_header)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def _loopback_v6() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def web_journal(tmp_path_factory):
    path = tmp_path_factory.mktemp("web") / "journal"

    async def build() -> None:
        async with actors.open_system(LMDBJournal(path), processes=[quick]) as system:
            await (await system.start(quick, "q-1")).result()

    trio.run(build)
    return path


@pytest.mark.slow  # a server in a subprocess, on real time
@pytest.mark.parametrize("bind", ["127.0.0.2", "::1"])
def test_web_refuses_other_host_names_on_every_loopback_bind(web_journal, bind):
    # A page elsewhere that points its own name at the bound address (DNS
    # rebinding) must not read the journal, whichever loopback address it is.
    pytest.importorskip("hypercorn", reason="install the 'web' extra")
    if bind == "::1" and not _loopback_v6():
        pytest.skip("no IPv6 loopback here")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actors",
            "web",
            "--journal",
            str(web_journal),
            "--host",
            bind,
            "--port",
            "0",
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = server.stdout.readline()
        match = re.search(r"read-only at http://(.+):(\d+)/$", first)
        assert match, first + server.stderr.read()
        port = int(match[2])
        literal = f"[{bind}]" if ":" in bind else bind
        assert 400 == _get(bind, port, "evil.example")
        assert 400 == _get(bind, port, f"evil.example:{port}")
        assert 200 == _get(bind, port, f"{literal}:{port}")
        assert 200 == _get(bind, port, f"localhost:{port}")
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert 0 == server.returncode, err
    assert "WARNING" not in err  # a loopback address: nothing to warn of


def test_web_host_names_for_each_kind_of_bind():
    pytest.importorskip("starlette", reason="install the 'web' extra")
    from actors._tools._web._app import host_allowed
    from actors._tools._web._serve import host_names

    for bind in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        names = host_names(bind, [])
        assert "localhost" in names
        assert not host_allowed("evil.example", names)
        assert not host_allowed("evil.example:8080", names)
        assert host_allowed("127.0.0.2:8080", names)
        assert host_allowed("[::1]:8080", names)
    # Bound beyond this machine: still only addresses, this machine's own
    # names, and the names asked for with --allow-host.
    names = host_names("0.0.0.0", ["Inspector.Example"])
    assert host_allowed("192.0.2.7:8080", names)
    assert host_allowed(socket.gethostname(), names)
    assert host_allowed("inspector.example:8080", names)
    assert not host_allowed("evil.example", names)
    assert not host_allowed("", names)
    assert not host_allowed("[not-an-address]", names)


# -- (8) arguments refused at the call ----------------------------------------------------


@pytest.mark.parametrize("strategy", [OneForOne, OneForAll, RestForOne])
def test_a_restart_window_that_is_not_a_duration_is_refused(strategy):
    for bad in (math.nan, math.inf, 0, -1, "5", None):
        with pytest.raises(InvalidArguments, match=r"within"):
            strategy(within=bad)
    assert 2.5 == strategy(within=2.5).within


@pytest.mark.parametrize("strategy", [OneForOne, OneForAll, RestForOne])
def test_a_restart_count_that_is_not_a_count_is_refused(strategy):
    with pytest.raises(InvalidArguments, match=r"max_restarts.*0 or more"):
        strategy(max_restarts=-1)
    for bad in ("3", 2.0, True, None):
        with pytest.raises(InvalidArguments, match=r"max_restarts"):
            strategy(max_restarts=bad)
    assert 0 == strategy(max_restarts=0).max_restarts
    # The repr is what restart logs print: it keeps the numbers as given.
    assert "OneForOne(max_restarts=2, within=60)" == repr(OneForOne(max_restarts=2, within=60))


def test_check_many_takes_iterables_only():
    from actors._kernel._checks import check_many

    assert [1, 2] == check_many(iter([1, 2]), "f(xs=...)", "ints")
    assert [] == check_many((), "f(xs=...)", "ints")
    for bad in (5, None, "abc", b"abc"):
        with pytest.raises(InvalidArguments, match=r"f\(xs=\.\.\.\) takes .*ints"):
            check_many(bad, "f(xs=...)", "ints")


async def test_send_many_and_cleanup_refuse_what_is_not_a_collection():
    async with actors.open_system(MemoryJournal(), processes=[waiter]) as system:
        with pytest.raises(InvalidArguments, match=r"send_many takes .*\(address, "):
            await system.send_many(5)  # type: ignore[arg-type]
        for bad in (5, "completed"):
            with pytest.raises(InvalidArguments, match=r"cleanup\(statuses=\.\.\.\) takes"):
                await system.cleanup(0, statuses=bad)  # type: ignore[arg-type]
        assert 0 == await system.cleanup(0, statuses=["completed"])


@pytest.fixture
def directory():
    """A short path: a unix socket's address holds about 100 bytes."""
    with tempfile.TemporaryDirectory(prefix="ctl") as d:
        yield Path(d) / "journal"


async def _raw(directory: Path, body: bytes) -> bytes:
    stream = await trio.open_unix_socket(str(directory / SOCKET_NAME))
    async with stream:
        await stream.send_all(struct.pack(">I", len(body)) + body)
        await stream.send_eof()
        got = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some():
                got += chunk
    return got


async def test_deeply_nested_json_on_the_control_socket_is_a_bad_request(directory):
    def send(depth: int) -> bytes:
        payload = "[" * depth + "]" * depth
        body = f'{{"op": "send", "address": "waiters/w-1", "signal": "go", "payload": {payload}}}'
        return body.encode()

    async with actors.open_system(LMDBJournal(directory), processes=[waiter]) as system:
        handle = await system.start(waiter, "w-1")
        for depth in (100_000, 5_000):
            got = await _raw(directory, send(depth))
            assert got, f"depth {depth}: the connection was dropped without an answer"
            assert "BadRequest" == json.loads(got[4:])["error"]["type"]
        from actors._system._control import MAX_DEPTH

        for depth in (MAX_DEPTH + 1, 5_000, 100_000):
            error = json.loads((await _raw(directory, send(depth)))[4:])["error"]
            assert "BadRequest" == error["type"], error
            assert f"at most {MAX_DEPTH} levels" in error["message"], error
        assert "suspended" == handle.status  # nothing reached the system
        # Within the limit it is an ordinary request (the outer object is a level).
        assert {"ok": None} == json.loads((await _raw(directory, send(MAX_DEPTH - 1)))[4:])
        value = await handle.result()
        for _ in range(MAX_DEPTH - 2):
            (value,) = value
        assert [] == value


# -- (10) a read nested in a read -----------------------------------------------------------


@pytest.mark.slow  # a subprocess: a deadlock there cannot hang this test run
def test_system_get_inside_journal_read_does_not_deadlock(tmp_path):
    code = textwrap.dedent(f"""
        import trio, actors
        from storage import LMDBJournal, instance_id
        from tests.tools.test_edges_round2 import quick

        async def main():
            journal = LMDBJournal({str(tmp_path / "journal")!r})
            async with actors.open_system(journal, processes=[quick]) as system:
                await (await system.start(quick, "q-1")).result()

                def nested(r):
                    # An address the system has not in memory is read from the journal.
                    handle = system.get("quick/q-1")
                    status = r.instance(instance_id("quick/q-1")).status
                    return status, handle.status, system.get("quick/nope")

                print(await journal.read(nested))

        trio.run(main)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 0 == done.returncode, done.stderr
    assert "('completed', 'completed', None)\n" == done.stdout


@pytest.mark.parametrize("backend", ["memory", "lmdb"])
async def test_a_nested_read_works_on_each_local_journal(tmp_path, backend):
    iid = instance_id("quick/q-1")
    journal = MemoryJournal() if backend == "memory" else LMDBJournal(tmp_path / "journal")
    async with actors.open_system(journal, processes=[quick]) as system:
        await (await system.start(quick, "q-1")).result()

        def nested() -> tuple[str, str]:
            with journal.reader() as outer, journal.reader() as inner:
                return outer.instance(iid).status, inner.instance(iid).status

        with trio.fail_after(10):  # in a thread: a deadlock times out, never hangs
            got = await trio.to_thread.run_sync(nested, abandon_on_cancel=True)
        assert ("completed", "completed") == got
        assert None is await journal.read(lambda r: system.get("quick/nope"))


# -- (11) an offline CLI write racing open_system ----------------------------------------


async def _make(path: Path) -> None:
    async with LMDBJournal(path):
        pass


@pytest.mark.slow  # a write held for half a second of real time
async def test_open_system_waits_for_a_command_line_write_to_finish(tmp_path):
    path = tmp_path / "journal"
    await _make(path)
    held = trio.Event()

    async def cli_write() -> None:
        async with writing(path):  # what 'actors send' holds while no system runs
            held.set()
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cli_write)
        await held.wait()
        t0 = time.monotonic()
        async with actors.open_system(LMDBJournal(path), processes=[quick]) as system:
            waited = time.monotonic() - t0
            assert "done q-1" == await (await system.start(quick, "q-1")).result()
    assert 0.3 < waited < lmdb_journal.LOCK_WAIT


async def test_a_second_system_is_refused_at_once_with_the_same_error(tmp_path):
    path = tmp_path / "journal"
    async with LMDBJournal(path):
        for opener in (lambda: LMDBJournal(path).open(), lambda: writing(path).__aenter__()):
            t0 = time.monotonic()
            with pytest.raises(JournalLocked, match="owned by another open system") as info:
                await opener()
            assert time.monotonic() - t0 < 1.0  # no waiting for a system's lock
            assert os.getpid() == info.value.pid


@pytest.mark.slow  # the wait is real time (0.3 s here)
async def test_a_command_line_write_that_does_not_end_is_refused_after_the_wait(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(lmdb_journal, "LOCK_WAIT", 0.3)
    path = tmp_path / "journal"
    await _make(path)
    async with writing(path):
        t0 = time.monotonic()
        with pytest.raises(JournalLocked, match="command-line write") as info:
            await LMDBJournal(path).open()
        assert 0.3 <= time.monotonic() - t0 < 2.0
        assert os.getpid() == info.value.pid
    async with LMDBJournal(path):  # and free once it ends
        pass


@pytest.mark.slow  # a write held for 0.3 s of real time
async def test_a_command_line_write_waits_for_another(tmp_path):
    path = tmp_path / "journal"
    await _make(path)
    order = []
    entered = trio.Event()

    async def first() -> None:
        async with writing(path):
            order.append("first in")
            entered.set()
            await trio.sleep(0.3)
            order.append("first out")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await entered.wait()
        async with writing(path):
            order.append("second in")
    assert ["first in", "first out", "second in"] == order


@pytest.mark.slow  # a subprocess holds the lock for a second of real time
def test_open_system_waits_for_a_command_line_write_in_another_process(tmp_path):
    path = tmp_path / "journal"
    trio.run(_make, path)
    code = textwrap.dedent(f"""
        import time, trio
        from actors._tools._cli._access import writing

        async def main():
            async with writing({str(path)!r}):
                print("held", flush=True)
                time.sleep(1.0)  # a slow write, holding the lock

        trio.run(main)
    """)
    holder = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert "held\n" == holder.stdout.readline()

        async def main() -> str:
            async with actors.open_system(LMDBJournal(path), processes=[quick]) as system:
                return await (await system.start(quick, "q-1")).result()

        assert "done q-1" == trio.run(main)
    finally:
        assert 0 == holder.wait(timeout=30)
