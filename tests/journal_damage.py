"""A small journal with one instance of each kind of record, ways to damage
one record of it, and a check that the system copes: the fuzzer in
tests/journals/test_fuzz_journal.py draws (record, mutation) pairs and runs `check`.

The journal holds, after `build`:

- ``fz/waiter/w``: waits for ``a`` then ``b``; a ``b`` is unread in its mailbox;
- ``fz/sleeper/s``: a step done, then a one-hour durable timer;
- ``fz/emitter/e``: emitted 0..4, consumer ``c`` read two of them (cursor 2),
  then waits for ``stop``;
- ``fz/parent/p``: calls child ``fz/parent/p/fz/child/k``, which waits for ``go``.

Every instance has a log; the counters hold mail and stream numbers.
"""

from __future__ import annotations

import io
import os
import shutil
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import trio
import trio.testing

import actors
from actors import Context, Signal, process
from actors._tools._cli import main as cli_main
from storage import JournalCorrupt, LMDBJournal, MemoryJournal, instance_id
from storage._lmdb._layout import _DBS
from tests.runtime_helpers import virtual_wall

a, b, go, stop = Signal("a"), Signal("b"), Signal("go"), Signal("stop")


def _bump(x: int) -> int:
    return x + 1


@process("fz/waiter/:n")
async def waiter(ctx: Context, n: str) -> list[Any]:
    first = await ctx.wait(a)
    second = await ctx.wait(b)
    return [first, second]


@process("fz/sleeper/:n")
async def sleeper(ctx: Context, n: str) -> int:
    x = await ctx.step(_bump, 1)
    await ctx.sleep(3600)
    return x


@process("fz/emitter/:n")
async def emitter(ctx: Context, n: str) -> str:
    for i in range(5):
        await ctx.emit({"i": i})
    await ctx.wait(stop)
    return "stopped"


@process("fz/child/:n")
async def child(ctx: Context, n: str) -> str:
    return f"child {await ctx.wait(go)}"


@process("fz/parent/:n")
async def parent(ctx: Context, n: str) -> str:
    got = await ctx.call(child, "k")
    return f"parent of {got}"


PROCESSES = [waiter, sleeper, emitter, child, parent]
WAITER, SLEEPER, EMITTER, PARENT = "fz/waiter/w", "fz/sleeper/s", "fz/emitter/e", "fz/parent/p"
CHILD = "fz/parent/p/fz/child/k"
ADDRESSES = [WAITER, SLEEPER, EMITTER, PARENT, CHILD]
DATABASES = tuple(name for name in _DBS if name != "meta")  # what an instance owns
MAP_SIZE = 1 << 24


def open_system(where: Path | MemoryJournal):
    """A system on the LMDB journal at a path, or on a `MemoryJournal`."""
    journal = where if isinstance(where, MemoryJournal) else LMDBJournal(where, map_size=MAP_SIZE)
    return actors.open_system(journal, processes=PROCESSES, now=virtual_wall, passivate_after=0)


async def _build(where: Path | MemoryJournal) -> None:
    async with open_system(where) as system:
        await system.start(waiter, "w")
        await system.send(WAITER, b, "b1")  # unread: the waiter waits for a first
        await system.start(sleeper, "s")
        await system.start(emitter, "e")
        await system.start(parent, "p")
        with trio.fail_after(60):
            while len(await _stream_values(system, "probe", 5)) < 5:
                await trio.sleep(1)
            async with system.stream(EMITTER, "c") as s:
                async for value in s:
                    if value["i"] == 1:
                        break
            while system.get(CHILD) is None:
                await trio.sleep(1)
            while system.get(SLEEPER).status != "suspended":
                await trio.sleep(1)


async def _stream_values(system, consumer: str, count: int) -> list[Any]:
    """The first ``count`` values a fresh consumer reads (fewer if the stream ends)."""
    values = []
    async with system.stream(EMITTER, consumer) as s:
        async for value in s:
            values.append(value)
            if len(values) == count:
                break
    return values


def build(where: Path | MemoryJournal) -> None:
    trio.run(_build, where, clock=trio.testing.MockClock(autojump_threshold=0))


def records(path: Path) -> list[tuple[str, bytes]]:
    """Every (database, key) the journal holds, in a stable order."""
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    try:
        found = []
        for name in DATABASES:
            with env.begin(db=env.open_db(name.encode(), create=False)) as txn:
                found.extend((name, key) for key in txn.cursor().iternext(values=False))
        return found
    finally:
        env.close()


# -- damage ------------------------------------------------------------------------------

MUTATIONS = ("flip", "truncate", "reshape", "delete", "delete_counter")


def damage(path: Path, database: str, key: bytes, how: str, arg: Any) -> str:
    """Apply mutation ``how`` to one record; returns a description.

    ``arg`` parameterises it: the byte offset and xor mask for ``flip``, the
    kept length for ``truncate``, the msgpack value for ``reshape`` (a
    ``("key", bytes)`` pair reshapes the key instead of the value). A
    ``delete_counter`` deletes the counter of the record's instance that
    its kind depends on, whatever the database (mail and stream numbers).
    """
    env = lmdb.open(str(path), max_dbs=16, map_size=MAP_SIZE)
    try:
        db, counters = env.open_db(database.encode()), env.open_db(b"counters")
        with env.begin(write=True, db=db) as txn:
            value = txn.get(key)
            assert value is not None
            if how == "flip":
                offset, mask = arg
                if not value:
                    return "flip of an empty value: nothing to flip"
                offset %= len(value)
                value = value[:offset] + bytes([value[offset] ^ mask]) + value[offset + 1 :]
                txn.put(key, value)
            elif how == "truncate":
                txn.put(key, value[: arg % max(1, len(value))])
            elif how == "reshape":
                if isinstance(arg, tuple) and arg[0] == "key":
                    txn.delete(key)
                    txn.put(arg[1], value)
                else:
                    txn.put(key, msgpack.packb(arg, use_bin_type=True))
            elif how == "delete":
                txn.delete(key)
            elif how == "delete_counter":
                iid = instance_of(database, key)
                for kind in (b"m", b"s"):
                    txn.delete(iid + kind, db=counters)
            else:
                raise ValueError(how)
        return f"{how} {database} {key.hex()} {arg!r}"
    finally:
        env.close()


# -- the check ---------------------------------------------------------------------------


def instance_of(database: str, key: bytes) -> bytes:
    """The id of the instance a record belongs to."""
    if database == "status":
        return key[1:17]
    if database == "timers":
        return key[8:24]
    return key[:16]


def show(path: Path, address: str) -> tuple[int, str, str]:
    """``python -m actors show`` in-process: (exit code, stdout, stderr)."""
    return cli(path, "show", address)


def cli(path: Path, *args: str) -> tuple[int, str, str]:
    """``python -m actors ARGS`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli_main(["--journal", str(path), *args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - reported as a traceback, which fails the check
            err.write(traceback.format_exc())
            code = -1
    return code, out.getvalue(), err.getvalue()


def _index(value: Any) -> Any:
    """The number an emitted value carries (a reshaped value is its own)."""
    return value["i"] if isinstance(value, dict) and "i" in value else value


async def _finish(system, address: str) -> Any:
    """Drive the instance at ``address`` to its end and return what it gives."""
    if address == WAITER:
        await system.send(WAITER, a, "a1")
        return await system.get(WAITER).result()
    if address == SLEEPER:
        return await system.get(SLEEPER).result()
    if address == EMITTER:
        resumed = []
        async with system.stream(EMITTER, "c") as s:
            async for value in s:
                resumed.append(_index(value))
                if len(resumed) == 3:  # indexes 2, 3 and 4
                    break
        fresh = [_index(v) for v in await _stream_values(system, "fresh", 5)]
        await system.send(EMITTER, stop)
        return [resumed, fresh, await system.get(EMITTER).result()]
    child_handle = system.get(CHILD)
    if child_handle is not None and child_handle.status in ("running", "suspended"):
        await system.send(CHILD, go, "g")
    return await system.get(address).result()


EXPECTED = {
    WAITER: ["a1", "b1"],
    SLEEPER: 2,
    EMITTER: [[2, 3, 4], [0, 1, 2, 3, 4], "stopped"],
    CHILD: "child g",
    PARENT: "parent of child g",
}
# Which instances a damaged one drags along: finishing the parent needs its child.
_DEPENDS = {PARENT: {CHILD}, CHILD: {PARENT}}


async def _check(where: Path | MemoryJournal, damaged: str | None) -> dict[str, str]:
    """Open the damaged journal and finish every instance; returns how each ended."""
    outcomes: dict[str, str] = {}
    hurt = {damaged} | _DEPENDS.get(damaged, set()) if damaged else set()
    async with open_system(where) as system:
        for address in ADDRESSES:
            if address in hurt:
                continue
            with trio.fail_after(7200):
                got = await _finish(system, address)
            assert EXPECTED[address] == got, address
            outcomes[address] = "ok"
        for address in sorted(hurt):
            outcomes[address] = await _finish_damaged(system, address)
    return outcomes


async def _finish_damaged(system, address: str) -> str:
    """A damaged instance is fine, or ends or fails in a way its calls
    report, or is corrupt with every call naming the database and key."""
    if system.get(address) is None:
        return "gone"  # its record was deleted: calls say there is no such instance
    with trio.move_on_after(7200):
        try:
            got = await _finish(system, address)
        except JournalCorrupt as exc:
            assert exc.database in DATABASES, exc
            assert isinstance(exc.key, bytes) and exc.key.hex() in str(exc), exc
            return "corrupt"
        except actors.ActorError as exc:
            return type(exc).__name__
        return "ok" if got == EXPECTED[address] else "different"
    # Waiting for what was lost (a deleted message or timer), or parked with
    # the error that stopped it (a log entry that no longer matches the code).
    return "suspended with an error" if system.get(address).last_error else "stuck"


def check_memory(journal: MemoryJournal, damaged: str) -> dict[str, str]:
    """`check` for a damaged `MemoryJournal` (which has no command line)."""
    return trio.run(_check, journal, damaged, clock=trio.testing.MockClock(autojump_threshold=0))


def check(path: Path, database: str, key: bytes) -> dict[str, str]:
    """Run the system on the damaged journal at ``path`` and `show` every
    instance; raises AssertionError when something crashed."""
    owner = instance_of(database, key)
    damaged = next((a for a in ADDRESSES if iid(a) == owner), None)
    outcomes = trio.run(_check, path, damaged, clock=trio.testing.MockClock(autojump_threshold=0))
    for address in ADDRESSES:
        code, out, err = show(path, address)
        assert "Traceback" not in err + out, (address, err)
        assert code in (0, 3, 5), (address, code, err)
    code, out, err = cli(path, "list")
    assert (0, "") == (code, err), err
    return outcomes


def iid(address: str) -> bytes:
    return instance_id(address)


def copy_journal(source: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    for name in ("data.mdb",):
        shutil.copyfile(source / name, target / name)
