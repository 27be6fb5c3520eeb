"""The control endpoint of a running system: its socket, and what it does
with requests good and bad (in this process; tests/tools/test_cli_control.py
drives it from the command line beside a system in another process)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import struct
import tempfile
from pathlib import Path

import pytest
import trio

import actors
from actors import Signal, process
from actors._system._control import MAX_REQUEST, SOCKET_NAME, RemoteError, request
from storage import LMDBJournal, MemoryJournal

go = Signal("go")


@process("waiters/:id")
async def waiter(ctx, id):
    return await ctx.wait(go)


@pytest.fixture
def directory():
    """A short path: a unix socket's address holds about 100 bytes."""
    with tempfile.TemporaryDirectory(prefix="ctl") as d:
        yield Path(d) / "journal"


async def _raw(directory: Path, data: bytes, *, half_close: bool = True) -> bytes:
    """Send ``data`` as it is; what comes back until the server closes."""
    stream = await trio.open_unix_socket(str(directory / SOCKET_NAME))
    async with stream:
        await stream.send_all(data)
        if half_close:
            await stream.send_eof()
        got = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some():
                got += chunk
    return got


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _reply(data: bytes) -> dict:
    (size,) = struct.unpack(">I", data[:4])
    assert size == len(data) - 4
    return json.loads(data[4:])


async def test_the_socket_is_the_owners_only_and_gone_on_close(directory):
    async with actors.open_system(LMDBJournal(directory), processes=[waiter]):
        mode = os.stat(directory / SOCKET_NAME).st_mode
        assert stat.S_ISSOCK(mode)
        assert 0o600 == stat.S_IMODE(mode)
        assert [] == [n for n in os.listdir(directory) if n.startswith(f".{SOCKET_NAME}")]
    assert not (directory / SOCKET_NAME).exists()


async def test_control_false_serves_nothing(directory):
    async with actors.open_system(LMDBJournal(directory), processes=[waiter], control=False):
        assert not (directory / SOCKET_NAME).exists()


async def test_a_journal_without_a_directory_serves_nothing():
    async with actors.open_system(MemoryJournal(), processes=[waiter]) as system:
        handle = await system.start(waiter, "w-1")
        await system.send("waiters/w-1", go, 1)
        assert 1 == await handle.result()


async def test_requests_map_onto_the_system(directory):
    async with actors.open_system(LMDBJournal(directory), processes=[waiter]) as system:
        handle = await system.start(waiter, "w-1")
        assert None is await request(
            directory, "send", address="waiters/w-1", signal="go", payload={"by": "ann"}
        )
        assert {"by": "ann"} == await handle.result()
        with pytest.raises(RemoteError) as info:
            await request(directory, "send", address="waiters/w-1", signal="go")
        assert ("NotDelivered", "completed") == (info.value.type, info.value.reason)
        assert "no live instance at 'waiters/w-1' (it completed" in str(info.value)

        await system.start(waiter, "w-2")
        assert True is await request(directory, "cancel", address="waiters/w-2")
        assert "cancelled" == system.get("waiters/w-2").status
        assert False is await request(directory, "cancel", address="waiters/w-2")
        assert False is await request(directory, "resume_compensation", address="waiters/w-1")
        assert False is await request(directory, "abandon_compensation", address="waiters/w-1")
        assert 0 == await request(directory, "cleanup", older_than=3600, statuses=["completed"])
        assert 2 == await request(
            directory, "cleanup", older_than=0, statuses=["completed", "cancelled"]
        )
        with pytest.raises(RemoteError) as info:
            await request(directory, "cleanup", older_than=0, statuses=["running"])
        assert "InvalidArguments" == info.value.type


BAD = [
    (b"", None),  # connected and left
    (b"\x00\x00", None),  # a truncated header
    (_frame(b"{}")[:-1], None),  # a truncated body
    (struct.pack(">I", MAX_REQUEST + 1), "over the"),
    (struct.pack(">I", 0xFFFFFFFF) + b"x" * 100, "over the"),
    (_frame(b"\xff\xfe garbage"), "not UTF-8 JSON"),
    (_frame(b"{not json"), "not UTF-8 JSON"),
    (_frame(b"[1, 2]"), "not an object"),
    (_frame(b"{}"), "unknown operation None"),
    (_frame(b'{"op": "drop_tables"}'), "unknown operation 'drop_tables'"),
    (_frame(b'{"op": ["send"]}'), "unknown operation ['send']"),
    (_frame(b'{"op": "send"}'), "'address' must be a string"),
    (_frame(b'{"op": "send", "address": 7, "signal": "go"}'), "'address' must be a string"),
    (_frame(b'{"op": "send", "address": "waiters/w-1", "signal": ""}'), "a Signal's name"),
    (_frame(b'{"op": "send", "address": "waiters/w-1", "signal": "\\u0000x"}'), "NUL"),
    (_frame(b'{"op": "cleanup", "older_than": "1d", "statuses": []}'), "number of seconds"),
    (_frame(b'{"op": "cleanup", "older_than": true, "statuses": []}'), "number of seconds"),
    (_frame(b'{"op": "cleanup", "older_than": 1, "statuses": "failed"}'), "list of strings"),
    (_frame(b'{"op": "cancel", "address": ""}'), "address"),
    (
        _frame(b'{"op": "send", "address": "\\ud800", "signal": "go", "payload": "\\udfff"}'),
        "is not valid Unicode",
    ),
    (
        _frame(b'{"op": "send", "address": "waiters/w-1", "signal": "go", "payload": "\\udfff"}'),
        "payload",
    ),
]


async def test_bad_requests_get_an_error_or_a_closed_connection_and_nothing_else(directory):
    async with actors.open_system(LMDBJournal(directory), processes=[waiter]) as system:
        handle = await system.start(waiter, "w-1")
        for data, error in BAD:
            got = await _raw(directory, data)
            if error is None:
                assert b"" == got, data
            else:
                reply = _reply(got)
                assert error in reply["error"]["message"], (data, reply)
                assert {"type", "message", "reason"} == set(reply["error"]), reply

        # Many at once: the system carries on, as does the endpoint (a client
        # past the listen backlog may be refused: its own affair).
        async def flood(data: bytes) -> None:
            with contextlib.suppress(trio.BrokenResourceError, OSError):
                await _raw(directory, data)

        async with trio.open_nursery() as nursery:
            for data, _ in BAD * 5:
                nursery.start_soon(flood, data)
        assert "suspended" == handle.status
        # A client that sends too much is told so before the connection closes.
        with pytest.raises(RemoteError, match=f"over the {MAX_REQUEST}-byte cap") as info:
            await request(
                directory, "send", address="waiters/w-1", signal="go", payload="x" * MAX_REQUEST
            )
        assert "BadRequest" == info.value.type
        await request(directory, "send", address="waiters/w-1", signal="go", payload=2)
        assert 2 == await handle.result()


async def test_a_client_that_sends_nothing_is_dropped_after_the_read_timeout(
    directory, autojump_clock
):
    async with actors.open_system(LMDBJournal(directory), processes=[waiter]) as system:
        handle = await system.start(waiter, "w-1")
        stream = await trio.open_unix_socket(str(directory / SOCKET_NAME))
        async with stream:
            await stream.send_all(struct.pack(">I", 10) + b"{")
            t0 = trio.current_time()
            assert b"" == await stream.receive_some()
            assert 10.0 == trio.current_time() - t0
        await request(directory, "send", address="waiters/w-1", signal="go", payload=3)
        assert 3 == await handle.result()


async def test_a_stale_socket_is_replaced_when_a_system_opens(directory):
    async with actors.open_system(LMDBJournal(directory), processes=[waiter]):
        pass
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(directory / SOCKET_NAME))  # bound, never listening: as a killed owner leaves it
    stale.close()
    with pytest.raises(actors.ActorError, match="no system serves"):
        await request(directory, "cancel", address="waiters/w-1")
    async with actors.open_system(LMDBJournal(directory), processes=[waiter]) as system:
        handle = await system.start(waiter, "w-1")
        await request(directory, "send", address="waiters/w-1", signal="go", payload=4)
        assert 4 == await handle.result()
    assert not (directory / SOCKET_NAME).exists()


async def test_a_long_journal_path_is_served_through_its_directory(tmp_path):
    directory = tmp_path / ("d" * 120) / "journal"
    async with actors.open_system(LMDBJournal(directory), processes=[waiter]) as system:
        handle = await system.start(waiter, "w-1")
        await request(directory, "send", address="waiters/w-1", signal="go", payload=5)
        assert 5 == await handle.result()
    assert not (directory / SOCKET_NAME).exists()


async def test_a_directory_the_socket_cannot_be_made_in_still_runs(directory, caplog):
    directory.mkdir(parents=True)
    (directory / f".{SOCKET_NAME}.{os.getpid()}").mkdir()  # in the way of the bind
    (directory / f".{SOCKET_NAME}.{os.getpid()}" / "x").touch()
    async with actors.open_system(LMDBJournal(directory), processes=[waiter]) as system:
        handle = await system.start(waiter, "w-1")
        await system.send("waiters/w-1", go, 6)
        assert 6 == await handle.result()
    assert any("no control endpoint" in r.getMessage() for r in caplog.records)
