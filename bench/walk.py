"""The calls each hot flow makes through the runtime: ``python -m bench walk``.

``python -m bench walk [--runs N] [--modules] [--calls] [--time N]``

Runs an LMDB system in a temporary directory and traces (``sys.setprofile``,
in the trio thread: the journal's writer thread is not counted) three flows:

- ``send -> wait``: one ``system.send`` to an instance waiting in
  ``ctx.receive``, until that receive has returned in the process;
- ``send -> parked again``: the same send, on until the receiver has
  parked again: its next ``ctx.receive`` registered, and the flush that
  writes the take (which rides on the instance's next commit);
- ``start -> result``: one ``system.start`` of a 1-step process, until its
  ``result()`` has returned;
- ``ask``: one ``system.ask`` to an instance that answers with
  ``ctx.reply``, until the answer is back.

For each: the Python calls made in our packages (``actors/``, ``storage/``),
the modules they ran in, and the *zig-zags*: returns into one of our modules
that the flow had already left for another (a call that comes back to a
module it passed through, the sign of a part reaching back into its
caller). The fewest over the runs is printed (a thread's timing moves a
flow by a few calls). A measure of the shape of the code, not of its speed:
compare it before and after a change of structure (docs/design.md keeps the
table). ``--time N`` also runs each flow N times under cProfile and says
where its CPU time went, by room (`ROOMS`) and by function: a profile of
the shape the counts describe (cProfile's own cost inflates every call
alike, so read the shares, not the microseconds).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import attrs
import trio

import actors
from storage import LMDBJournal

GO = actors.Signal("go")
REQUEST = actors.Signal("request")

# Set by the receiver when its receive has returned: the end of a send's walk.
_taken: list[trio.Event] = []
# While a send is walked, what the receiver calls the moment its receive has
# returned: it notes where in the trace "send -> wait" ends (see `_traced`).
_returned: list[Callable[[], None]] = []


@actors.process("walk/receiver/:id")
async def receiver(ctx: actors.Context, id: str) -> None:
    while True:
        await ctx.receive(GO)
        if _returned:
            _returned[0]()
        if _taken:
            _taken.pop().set()


@actors.process("walk/one/:id")
async def one_step(ctx: actors.Context, id: str) -> int:
    return await ctx.step(lambda: 1, name="one")


@actors.process("walk/server/:id")
async def server(ctx: actors.Context, id: str) -> None:
    while True:
        _, payload = await ctx.receive(REQUEST)
        await ctx.reply(payload)


@attrs.frozen(order=True)
class Walk:
    """What one flow cost: our calls, our modules, and the zig-zags among
    them; then every call and module (trio's and the standard library's too)."""

    calls: int
    modules: int
    zigzags: int
    all_calls: int
    all_modules: int
    # Our calls per module, most first (not compared: the fewest walk is the one shown).
    by_module: tuple[tuple[str, int], ...] = attrs.field(default=(), eq=False, order=False)
    # Every call of ours in order, ``module:function`` (``--calls`` prints them).
    sequence: tuple[str, ...] = attrs.field(default=(), eq=False, order=False)

    def __str__(self) -> str:
        return (
            f"{self.calls} calls in {self.modules} modules, {self.zigzags} returns to a module "
            f"already left (all code: {self.all_calls} calls in {self.all_modules} modules)"
        )


def _ours(filename: str) -> bool:
    return "/actors/" in filename or "/storage/" in filename


def _zigzags(events: list[tuple[str, str]]) -> int:
    """Returns into a module the flow had left for another one of ours: with
    the stack of our frames, a return whose caller's module differs from the
    callee's, and was entered before (seen on the stack under another)."""
    stack: list[str] = []
    count = 0
    for event, module in events:
        if event == "call":
            stack.append(module)
        elif stack:
            left = stack.pop()
            if stack and stack[-1] != left and stack[-1] in stack[:-1]:
                count += 1
    return count


async def _traced(run: Callable[[], Awaitable[Any]]) -> tuple[Walk, Walk | None]:
    """Walk ``run``; and, if the receiver's receive returned in it, the walk
    only as far as that (``run`` goes on until the receiver has parked
    again: its next receive, and the flush that writes the take)."""
    events: list[tuple[str, str]] = []
    files: list[str] = []
    sequence: list[str] = []
    ends: list[tuple[int, int, int]] = []
    _returned.append(lambda: ends.append((len(events), len(files), len(sequence))))

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = frame.f_code.co_filename
            files.append(name)
            if _ours(name):
                events.append(("call", name))
                sequence.append(f"{_short(name)}:{frame.f_code.co_name}")
        elif event == "return" and _ours(frame.f_code.co_filename):
            events.append(("return", frame.f_code.co_filename))

    sys.setprofile(profile)
    try:
        await run()
    finally:
        sys.setprofile(None)
        _returned.clear()
    if not ends:
        return _walk(events, files, sequence), None
    cut_events, cut_files, cut_sequence = ends[0]
    return _walk(events, files, sequence), _walk(
        events[:cut_events], files[:cut_files], sequence[:cut_sequence]
    )


def _walk(events: list[tuple[str, str]], files: list[str], sequence: list[str]) -> Walk:
    ours = [module for event, module in events if event == "call"]
    by_module = tuple(Counter(_short(module) for module in ours).most_common())
    return Walk(
        len(ours),
        len(set(ours)),
        _zigzags(events),
        len(files),
        len(set(files)),
        by_module,
        tuple(sequence),
    )


# Where a profiled function's time is counted: the first of these its file's
# path holds (the rest is Python's builtins and the standard library).
ROOMS = (
    ("/actors/_kernel/", "actors: kernel"),
    ("/actors/_features/", "actors: features"),
    ("/actors/_actor/", "actors: actor"),
    ("/actors/_system/", "actors: system"),
    ("/storage/", "storage"),
    ("/trio/", "trio"),
    ("/msgpack/", "msgpack"),
)


@attrs.frozen
class Profile:
    """Where ``runs`` runs of one flow spent their time in the trio thread
    (cProfile's own time of each function: an inline commit's sync to disk
    counts in LMDB's; the wait for I/O, ``epoll.poll``, apart)."""

    runs: int
    by_room: tuple[tuple[str, float], ...]  # (room, seconds), most first
    top: tuple[tuple[str, float], ...]  # (module:function, seconds), most first
    waiting: float  # seconds in the I/O wait (the writer thread, the timers)

    def lines(self) -> list[str]:
        total = sum(seconds for _, seconds in self.by_room)
        each = 1e6 / self.runs
        lines = [f"  {total * each:.1f} us a run (profiled), {self.waiting * each:.1f} us waiting"]
        lines += [
            f"    {seconds / total:6.1%}  {seconds * each:6.1f} us  {room}"
            for room, seconds in self.by_room
        ]
        lines += [
            f"    {seconds / total:6.1%}  {seconds * each:6.1f} us  {name}"
            for name, seconds in self.top
        ]
        return lines


async def _profiled(run: Callable[[], Awaitable[Any]], runs: int) -> Profile:
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        for _ in range(runs):
            await run()
    finally:
        profiler.disable()
    return fold(profiler, runs)


def fold(profiler: cProfile.Profile, runs: int) -> Profile:
    """``profiler``'s own time of each function, by room and by function,
    for ``runs`` operations."""
    rooms: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    waiting = 0.0
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, _, name), (_, _, own, *_) in stats.items():
        if "epoll" in name:
            waiting += own
            continue
        if "of 'Transaction'" in name or "of 'Environment'" in name:
            room = "lmdb (the commit and its sync)"
        else:
            room = next((room for part, room in ROOMS if part in filename), "builtins, stdlib")
        rooms[room] += own
        functions[f"{_short(filename)}:{name}"] += own
    return Profile(runs, tuple(rooms.most_common()), tuple(functions.most_common(12)), waiting)


def _short(filename: str) -> str:
    """``actors/_actor/_instance.py`` for a file of our packages."""
    for package in ("/actors/", "/storage/"):
        if package in filename:
            return package[1:] + filename.rsplit(package, 1)[1]
    return filename


async def measure(runs: int, timed: int = 0) -> dict[str, tuple[Walk, Profile | None]]:
    """The fewest of ``runs`` walks of each flow, by name, and (``timed``
    runs of each) its profile."""
    with tempfile.TemporaryDirectory() as directory:
        async with actors.open_system(
            LMDBJournal(directory), processes=[receiver, one_step, server]
        ) as system:
            await system.start(receiver, "r")
            await system.start(server, "s")
            counter = iter(range(1_000_000))

            async def send() -> None:
                taken = trio.Event()
                _taken.append(taken)
                await system.send("walk/receiver/r", GO, 1)
                await taken.wait()

            async def start() -> None:
                handle = await system.start(one_step, f"p{next(counter)}")
                await handle.result()

            async def ask() -> None:
                await system.ask("walk/server/s", REQUEST, 1)

            flows = {"send": send, "start -> result": start, "ask": ask}
            for run in flows.values():  # warm: imports, caches, the first waits
                for _ in range(20):
                    await run()
            found: dict[str, tuple[Walk, Profile | None]] = {}
            for name, run in flows.items():
                # (the fewest by the whole walk; the send's walk to the
                # receive's return is the beginning of the same run's)
                whole, to_return = min(
                    [await _traced(run) for _ in range(runs)], key=lambda walks: walks[0]
                )
                profile = await _profiled(run, timed) if timed else None
                if to_return is None:
                    found[name] = (whole, profile)
                else:
                    found["send -> wait"] = (to_return, None)
                    found["send -> parked again"] = (whole, profile)
            return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench walk", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--runs", type=int, default=5, help="walks of each flow (the fewest is shown)"
    )
    parser.add_argument(
        "--modules", action="store_true", help="also print each flow's calls per module"
    )
    parser.add_argument(
        "--calls", action="store_true", help="also print each flow's calls in order"
    )
    parser.add_argument(
        "--time",
        type=int,
        default=0,
        metavar="N",
        help="also profile N runs of each flow: its CPU time by room and by function",
    )
    options = parser.parse_args(argv)
    for name, (walk, profile) in trio.run(measure, options.runs, options.time).items():
        print(f"{name}: {walk}")
        if profile is not None:
            print("\n".join(profile.lines()))
        if options.modules:
            for module, calls in walk.by_module:
                print(f"    {calls:4d}  {module}")
        if options.calls:
            for call in walk.sequence:
                print(f"    {call}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
