"""A program for tests/whole/test_operators_crash.py: an operator repairs
instances with the public tools while sends and joins run, and is killed
with SIGKILL at any moment.

Usage: python tests/crash_child_operators.py JOURNAL JOURNAL2 SIDE ACKS WORK [finish]

It runs a system on the LMDB journal JOURNAL and two loops in it, each
carrying on from what ACKS says was acknowledged before (a kill cuts an
action short: the loop does it again, as an operator would, after looking
at what is there):

- orders, one after another, from the first not acknowledged as ended:
  ``order/<i>`` spawns its child ``pay/<i>`` (at ``order/<i>/pay/<i>``,
  whose step charges ``charge/<i>``),
  gets mail ``o<i>.1`` (an item), ``o<i>.2`` (a poison message),
  ``o<i>.3`` (an item), then a cleanup runs (``pay/<i>`` is done, its
  parent waits: it must stay), then ``go``: the order joins its child,
  takes ``o<i>.1``, then fails on ``o<i>.2``. The operator drops the poison
  message (`ActorSystem.poison`, `ActorSystem.drop_message`), retries the
  order (the taken ``o<i>.1`` is put back, the unread ``o<i>.3`` carried),
  sends ``o<i>.4`` (the last item) and reads its result. Then it forks the
  order to ``order/<i>x`` (no mail copied: that one gets ``o<i>x.5``
  only). Every third order is exported while it is failed (``python -m
  actors export``), imported into JOURNAL2 (`actors.testing.import_history`)
  and repaired there the same way, with ``o<i>.9`` as its last item.
- sends and joins: ``mom/<j>`` spawns ``kid/<j>``, sleeps, joins it;
  ``box/<j>`` takes one message ``b<j>``.

ACKS gets one line per acknowledged action, each with a single write() in
O_APPEND: ``S <message>`` once a send returned, ``D <message>`` once a drop
did, ``A <order> <what> ...`` once an operator action did. SIDE gets one
line per step execution, the side effect whose repetition the test checks:
``K <logical step> <idempotency key>`` for a charge, ``E <handler>
<idempotency key> <messages>`` for the step that records, before a process
returns, the messages it handled (``<address>@<incarnation>/<journal>``).
WORK holds the exported files. With ``finish``, the program ends the order
and the sends it is at, and exits.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import attrs
import trio

import actors
from actors import Context, Signal, process
from actors.testing import import_history
from storage import LMDBJournal

ITEM = Signal("item")
GO = Signal("go")
HELLO = Signal("hello")
# A kill between a step's side effect and its recorded outcome spends a
# crash attempt; five rounds of kills must not park a step.
AGAIN = actors.Retry(attempts=1, crashes=20)
IMPORT_EVERY = 3
SIDE = ""


def _side(line: str) -> None:
    fd = os.open(SIDE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def charge(logical: str) -> str:
    """The payment: its side effect is the line naming its key."""
    _side(f"K {logical} {actors.current_step().key}\n")
    return f"charged {logical}"


def handled(where: str, got: list[str]) -> None:
    """What the run handled, written before the process returns."""
    key = actors.current_step().key
    address, incarnation, _run, _name, _occurrence = key.rsplit("/", 4)
    _side(f"E {address}@{incarnation}/{where} {key} {','.join(got)}\n")


@process("pay/:id")
async def pay(ctx: Context, id: str) -> str:
    return await ctx.step(charge, f"charge/{id}", retry=AGAIN)


@process("order/:id")
async def order(ctx: Context, id: str, *, where: str = "j1") -> list[str]:
    payment = await ctx.spawn(pay, id)
    await ctx.receive(GO)
    await ctx.join(payment)
    got: list[str] = []
    while True:
        _, item = await ctx.receive(ITEM)
        if item["poison"]:
            raise RuntimeError(f"cannot handle {item['n']}")
        got.append(item["n"])
        if item["last"]:
            break
    await ctx.step(handled, where, got, retry=AGAIN)
    return got


@process("kid/:id")
async def kid(ctx: Context, id: str) -> str:
    await ctx.step(charge, f"double/{id}", retry=AGAIN)
    return str(2 * int(id))


@process("mom/:id")
async def mom(ctx: Context, id: str) -> str:
    child = await ctx.spawn(kid, id)
    await ctx.sleep(0.05)  # the kid ends first: a cleanup meanwhile must keep it
    result: str = await ctx.join(child)
    await ctx.step(handled, "j1", [result], retry=AGAIN)
    return result


@process("box/:id")
async def box(ctx: Context, id: str) -> None:
    _, payload = await ctx.receive(HELLO)
    await ctx.step(handled, "j1", [payload["n"]], retry=AGAIN)


PROCESSES = [pay, order, kid, mom, box]


@attrs.define
class Acks:
    """The acknowledgement file: what earlier rounds acknowledged, and the
    appending of new lines (one write() each)."""

    fd: int
    lines: set[str]

    @classmethod
    def open(cls, path: str) -> Acks:
        lines: set[str] = set()
        if os.path.exists(path):
            with open(path) as f:
                lines = set(f.read().split("\n")[:-1])  # complete lines only
        return cls(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), lines)

    def has(self, line: str) -> bool:
        """Whether ``line`` was acknowledged (with or without figures after it)."""
        return line in self.lines or any(x.startswith(f"{line} ") for x in self.lines)

    def ack(self, line: str) -> None:
        os.write(self.fd, f"{line}\n".encode())
        self.lines.add(line)


def handlers(side: str) -> set[str]:
    """The handlers (``<address>@<incarnation>/<journal>``) that recorded what they handled."""
    if not os.path.exists(side):
        return set()
    with open(side) as f:
        return {line.split()[1] for line in f.read().split("\n")[:-1] if line.startswith("E ")}


def charges(side: str, logical: str) -> int:
    """How often the step ``logical`` has run (under any key)."""
    with open(side) as f:
        return sum(line.startswith(f"K {logical} ") for line in f.read().split("\n")[:-1])


def ended(done: set[str], address: str) -> bool:
    return any(h.startswith(f"{address}@") for h in done)


async def send(system: actors.ActorSystem, acks: Acks, address: str, n: str, **how: Any) -> None:
    """Send item ``n`` (keyed by it: a send done again is taken once by
    the incarnation), unless acknowledged before."""
    if not acks.has(f"S {n}"):
        if how.get("signal") is GO:
            await system.send(address, GO, None, key=n)
        else:
            payload = {"n": n, "poison": how.get("poison", False), "last": how.get("last", False)}
            await system.send(address, ITEM, payload, key=n)
        acks.ack(f"S {n}")


async def repair(
    system: actors.ActorSystem, acks: Acks, i: int, tag: str, input: dict[str, Any] | None
) -> None:
    """Drop the failed order's poison message, then retry it."""
    address, poison = f"order/{i}", f"o{i}.2"
    if not acks.has(f"D{tag} {poison}"):
        letters = await system.dropped(address)
        if not any(d.message.payload["n"] == poison for d in letters):  # not done before a kill
            message = await system.poison(address)
            assert message is not None and message.payload["n"] == poison, message
            await system.drop_message(address, message.id, incarnation=message.incarnation)
        acks.ack(f"D{tag} {poison}")
    if not acks.has(f"A {i} retried{tag}"):
        handle = await system.lookup(address)
        assert handle is not None, address
        if handle.incarnation == 1:  # else a retry committed before a kill
            await system.retry(address, input=input)
        acks.ack(f"A {i} retried{tag}")


async def export_import(i: int, journal: str, journal2: str, work: str) -> None:
    """Export the failed ``order/<i>`` (with its child) with the command
    line, beside the running system, and import it into JOURNAL2."""
    path = os.path.join(work, f"order-{i}.json")
    command = [sys.executable, "-m", "actors", "--journal", journal, "export", f"order/{i}"]
    done = await trio.run_process([*command, "--output", path], capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    with contextlib.suppress(actors.AlreadyStarted):  # imported before a kill
        await import_history(path, LMDBJournal(journal2))


async def run_order(
    system: actors.ActorSystem, acks: Acks, i: int, paths: tuple[str, str, str, str]
) -> None:
    """One order through the operator's tools (see the module docstring)."""
    journal, journal2, side, work = paths
    address = f"order/{i}"

    def n(k: int) -> str:
        return f"o{i}.{k}"

    if not acks.has(f"A {i} started"):
        await system.start(order, str(i))
        acks.ack(f"A {i} started")
    await send(system, acks, address, n(1))
    await send(system, acks, address, n(2), poison=True)
    await send(system, acks, address, n(3))
    if not acks.has(f"A {i} cleaned"):
        while (payment := await system.lookup(f"order/{i}/pay/{i}")) is None:
            await trio.sleep(0.01)  # the order spawns it as it starts
        await payment.result()  # done, while its parent waits for go
        removed = await system.cleanup(older_than=0)
        acks.ack(f"A {i} cleaned {removed}")
    await send(system, acks, address, f"o{i}.go", signal=GO)
    if not acks.has(f"A {i} failed"):
        handle = await system.lookup(address)
        assert handle is not None
        try:
            await handle.result()
        except actors.ProcessFailed:
            pass
        else:
            raise AssertionError(f"{address} handled its poison message")
        acks.ack(f"A {i} failed")
    imported = i % IMPORT_EVERY == 0
    if imported and not acks.has(f"A {i} imported"):
        await export_import(i, journal, journal2, work)
        acks.ack(f"A {i} imported")
    await repair(system, acks, i, "", None)
    await send(system, acks, address, n(4), last=True)
    if not acks.has(f"A {i} completed"):
        handle = await system.lookup(address)
        assert handle is not None
        got = await handle.result()
        assert got == [n(1), n(3), n(4)], got  # the taken one put back, the unread one kept
        acks.ack(f"A {i} completed")
    copy = f"order/{i}x"
    if not acks.has(f"A {i} forked"):
        if await system.lookup(copy) is None:  # else forked before a kill
            await system.fork(address, from_effect=0, to=copy)
        assert [] == await system.mail(copy)  # no mail copied
        acks.ack(f"A {i} forked")
    await send(system, acks, copy, f"o{i}x.go", signal=GO)
    await send(system, acks, copy, f"o{i}x.5", last=True)
    if not acks.has(f"A {i} copy-completed"):
        handle = await system.lookup(copy)
        assert handle is not None
        got = await handle.result()
        assert got == [f"o{i}x.5"], got
        acks.ack(f"A {i} copy-completed")
    if imported and not acks.has(f"A {i} resumed2"):
        charged = charges(side, f"charge/{i}")
        async with actors.open_system(LMDBJournal(journal2), processes=PROCESSES) as other:
            await repair(other, acks, i, "2", {"where": "j2"})
            await send(other, acks, address, n(9), last=True)
            handle = await other.lookup(address)
            assert handle is not None
            got = await handle.result()
            assert got == [n(1), n(3), n(9)], got
        # The imported order's payment completed before the export: its
        # retry there meets the recorded result, the charge runs no more.
        assert charges(side, f"charge/{i}") == charged, f"order/{i} was charged again"
        acks.ack(f"A {i} resumed2")
    acks.ack(f"A {i} ended")


async def sends_and_joins(
    system: actors.ActorSystem, acks: Acks, side: str, first: int, last: int | None
) -> None:
    """Moms joining kids and boxes taking a message, from ``first`` on."""
    j = first
    while last is None or j <= last:
        done = handlers(side)  # ended (and maybe cleaned up since): not started again
        if not ended(done, f"mom/{j}"):
            await system.start(mom, str(j))
        if not ended(done, f"box/{j}"):
            await system.start(box, str(j))
            await system.send(f"box/{j}", HELLO, {"n": f"b{j}"}, key=f"b{j}")
        acks.ack(f"S b{j}")
        j += 1
        await trio.sleep(0.02)


def first_unended(acks: Acks) -> int:
    i = 0
    while acks.has(f"A {i} ended"):
        i += 1
    return i


def first_unsent(acks: Acks) -> int:
    j = 0
    while acks.has(f"S b{j}"):
        j += 1
    return j


async def main(
    journal: str, journal2: str, side: str, acks_path: str, work: str, finish: bool
) -> None:
    acks = Acks.open(acks_path)
    paths = (journal, journal2, side, work)
    async with (
        actors.open_system(LMDBJournal(journal), processes=PROCESSES) as system,
        trio.open_nursery() as nursery,
    ):
        first = first_unsent(acks)
        nursery.start_soon(sends_and_joins, system, acks, side, first, first if finish else None)
        i = first_unended(acks)
        while True:
            await run_order(system, acks, i, paths)
            if finish:
                break
            i += 1


if __name__ == "__main__":
    SIDE = sys.argv[3]
    trio.run(main, *sys.argv[1:6], sys.argv[6:] == ["finish"])
