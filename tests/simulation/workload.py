"""The clients: a plan of operations drawn from the seed, and the driver
that runs it against each life of the host.

The plan is made once, before the run, from the workload's random source.
The driver runs its operations in order, each after a drawn pause, some
awaited and some in the background (so they race each other and the
host); a crash cancels whatever is in flight, whose outcome the clients
then never learn, and the next life carries on with the next operation.
Each operation records in the `World` what was tried and what was
acknowledged; that is all the checker trusts.
"""

from __future__ import annotations

import contextlib
import random
from contextlib import aclosing
from typing import Any

import attrs
import trio

import actors
from actors.testing import Simulation

from . import processes as p
from .operators import Operators, plan_operators
from .signals import Signals, plan_signals
from .world import World

#: Errors a client may meet while the journal fails or the host dies: the
#: request then counts as not acknowledged. Anything else is a bug.
EXPECTED = (actors.ActorError,)


@attrs.frozen
class Op:
    """One client operation: ``kind`` with ``args``, after ``pause`` seconds."""

    kind: str
    args: dict[str, Any]
    pause: float
    background: bool


_KINDS = [
    ("send", 24),
    ("ksend", 10),
    ("ask", 8),
    ("job", 14),
    ("job_race", 3),
    ("sws", 4),
    ("poke", 8),
    ("cancel", 7),
    ("parent", 6),
    ("queued", 8),
    ("jump", 3),
    ("result", 5),
]


def plan(
    rng: random.Random,
    *,
    tail: bool = True,
    features: bool = True,
    rated: bool = True,
    cleanups: bool = True,
    queued_mail: bool = True,
    operators: bool = False,
    signals: bool = False,
) -> tuple[list[str], list[Op]]:
    """The sinks to start and the operations to run, drawn from ``rng``
    (with the operations each later version adds after them, where its
    flag says so: `_tail`, `_features`, `_rated`, `_cleanups`,
    `_queued_mail`, `operators.plan_operators`, `signals.plan_signals`)."""
    sinks = [f"sink/s{i}" for i in range(rng.randint(1, 3))]
    count = rng.randint(25, 60)
    kinds = [k for k, _ in _KINDS]
    weights = [w for _, w in _KINDS]
    ops: list[Op] = []
    jobs: list[str] = []  # addresses of jobs and parents planned so far
    messages = 0
    for n in range(count):
        kind = rng.choices(kinds, weights)[0]
        args: dict[str, Any] = {}
        if kind in ("send", "ksend", "ask"):
            messages += 1
            args = {"address": rng.choice(sinks), "m": f"m{messages}"}
            if kind == "ask":
                args["timeout"] = rng.choice([0.5, 5.0, 60.0])
        elif kind in ("job", "job_race", "sws"):
            name = f"j{n}"
            jobs.append(f"job/{name}")
            args = {"id": name, "plan": _job_plan(rng, name, sinks)}
        elif kind == "parent":
            name = f"p{n}"
            strategy = rng.choice(list(p.PARENTS))
            jobs.append(f"parent-{strategy}/{name}")
            kids = [
                {
                    "restart": rng.choice(["transient", "transient", "permanent", "temporary"]),
                    "seconds": rng.choice([0.1, 1.0, 5.0]),
                    "crash": rng.choice([0, 0, 1, 2]),
                }
                for _ in range(rng.randint(1, 3))
            ]
            args = {
                "id": name,
                "strategy": strategy,
                "kids": kids,
                "wait": rng.choice([3.0, 30.0, 300.0]),
            }
        elif kind in ("poke", "cancel", "result"):
            if not jobs:
                continue
            args = {"address": rng.choice(jobs)}
        elif kind == "queued":
            args = {"id": f"q{n}", "seconds": rng.choice([0.05, 0.5, 2.0])}
        elif kind == "jump":
            args = {"seconds": rng.choice([1.0, 30.0, 600.0])}
        pause = rng.expovariate(2.0) if rng.random() < 0.8 else 0.0
        ops.append(Op(kind, args, pause, background=rng.random() < 0.5))
    drawn = rng.random()  # (what the later streams are drawn from)
    if tail:
        ops += _tail(random.Random(f"{drawn}:tail"), sinks)
    if features:
        ops += _features(random.Random(f"{drawn}:features"))
    if rated:
        ops += _rated(random.Random(f"{drawn}:rated"))
    if cleanups:
        jobs_planned = [op.args for op in ops if op.kind in ("job", "job_race", "sws")]
        ops += _cleanups(random.Random(f"{drawn}:cleanups"), jobs_planned)
    if queued_mail:
        ops += _queued_mail(random.Random(f"{drawn}:qmail"))
    if operators:
        ops += plan_operators(random.Random(f"{drawn}:operators"), Op)
    if signals:
        ops += plan_signals(random.Random(f"{drawn}:signals"), Op)
    return sinks, ops


def _queued_mail(rng: random.Random) -> list[Op]:
    """Workload 7: instances started on the queue and sent a message a
    moment later, often as the queue admits them (mail may activate an
    admitted instance before the queue's pump runs it)."""
    ops: list[Op] = []
    for n in range(rng.choice([0, 2, 4, 6])):
        args = {"id": f"b{n}", "lag": rng.choice([0.0, 0.0002, 0.001, 0.01])}
        ops.append(Op("qmail", args, rng.expovariate(2.0), background=rng.random() < 0.5))
    return ops


def _cleanups(rng: random.Random, jobs: list[dict[str, Any]]) -> list[Op]:
    """Workload 6: cleanups of finished instances while clients start
    some of the jobs again (a new incarnation where the old one was
    removed or cancelled; its steps' keys must not repeat the old ones')."""
    ops: list[Op] = []
    for n in range(rng.choice([0, 1, 2, 3])):
        args = {"older_than": rng.choice([0.0, 5.0, 120.0])}
        ops.append(Op("cleanup", args, rng.expovariate(0.5), background=rng.random() < 0.5))
        for job in rng.sample(jobs, min(len(jobs), rng.randint(0, 3))):
            # Its messages are new ones (a message id is handled once).
            plan = dict(job["plan"])
            for what in ("send", "ask"):
                if plan[what]:
                    plan[what] = [plan[what][0], f"{plan[what][1]}@{n}"]
            again = {"id": job["id"], "plan": plan}
            ops.append(Op("job", again, rng.expovariate(1.0), background=rng.random() < 0.5))
    return ops


def _rated(rng: random.Random) -> list[Op]:
    """Workload 5: bursts of starts on the queue with a rate limit, some
    in the background, so that they wait their turn across faults."""
    ops: list[Op] = []
    for n in range(rng.choice([0, 0, 3, 5, 8])):
        pause = rng.choice([0.0, 0.0, 0.5, rng.expovariate(0.2)])
        ops.append(Op("rated", {"id": f"r{n}"}, pause, background=rng.random() < 0.5))
    return ops


def _features(rng: random.Random) -> list[Op]:
    """Workload 4: streams with durable consumers, exports and a schedule."""
    ops: list[Op] = []
    if rng.random() < 0.5:
        ops.append(Op("schedule", {}, 0.0, background=False))
    for n in range(rng.randint(0, 3)):
        feed = f"feed/f{n}"
        ops.append(Op("feed", {"id": f"f{n}", "count": rng.randint(2, 8)}, 0.0, False))
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(["consume", "consume", "watch"])
            args: dict[str, Any] = {"address": feed}
            if kind == "consume":
                args["take"] = rng.randint(1, 4)
            ops.append(Op(kind, args, rng.expovariate(1.0), background=rng.random() < 0.5))
    return ops


def _tail(rng: random.Random, sinks: list[str]) -> list[Op]:
    """Operations added to the workload after seeds were kept: drawn from a
    stream of their own and run after the others, so that a kept seed
    replays the run it was kept for up to its tail."""
    ops: list[Op] = []
    for n in range(rng.randint(0, 4)):
        # A client starts a receiver while others send to it, each a moment
        # later, as the start's commit lands (commits take ~0.2 ms): the
        # creation race. Acknowledged messages must all be handled.
        sends = [(f"t{n}m{i}", rng.uniform(0.0, 0.003)) for i in range(rng.randint(1, 3))]
        args = {"id": f"t{n}", "sends": sends}
        ops.append(Op("sink_raced", args, rng.expovariate(2.0), background=rng.random() < 0.5))
    return ops


def _job_plan(rng: random.Random, name: str, sinks: list[str]) -> dict[str, Any]:
    return {
        "sleep": rng.choice([0, 0, 0.5, 10.0, 3600.0]),
        "child": rng.choice([0, 0, 0.2, 5.0]),
        "wait": rng.choice([0.1, 2.0, 60.0]),
        "send": [rng.choice(sinks), f"{name}-sent"] if rng.random() < 0.4 else None,
        "ask": [rng.choice(sinks), f"{name}-asked"] if rng.random() < 0.3 else None,
        "slow": rng.choice([0.01, 0.3]),
        "fail": rng.random() < 0.15,
    }


class Driver:
    """The workload `actors.testing.simulate` calls at each life of the host."""

    def __init__(self, world: World, sinks: list[str], ops: list[Op]) -> None:
        self.world = world
        self.sinks = sinks
        self.ops = ops
        self._readers: dict[str, trio.Lock] = {}  # one reader per stream consumer
        self.operators = Operators(world)  # workload 8's operations
        self.signals = Signals(world.signalled, world)  # workload 9's

    async def __call__(self, sim: Simulation) -> None:
        world = self.world
        world.sim = sim
        if world.rated is not None:
            sim.on_write(world.admitted)
        sim.on_write(world.removals)
        sim.on_write(world.sends)
        sim.on_write(world.signalled.written)
        await self._observe(sim)
        for address in self.sinks:  # idempotent: as a client makes sure of its receivers
            await self._start_quietly(sim, p.sink, address.split("/", 1)[1], {})
        async with trio.open_nursery() as nursery:
            while world.next_op < len(self.ops):
                op = self.ops[world.next_op]
                world.next_op += 1
                await trio.sleep(op.pause)
                if op.background:
                    nursery.start_soon(self._run, sim, op)
                else:
                    await self._run(sim, op)

    async def _observe(self, sim: Simulation) -> None:
        """Note every completed instance's result (see the check of results)."""

        def completed(r: Any) -> list[tuple[str, int, Any]]:
            return [
                (row.address, row.record.incarnation, row.record.result)
                for row in r.instances("completed")
            ]

        try:
            found = await sim.journal.read(completed)
        except actors.JournalUnavailable:
            return
        for address, incarnation, result in found:
            self._saw_result(sim, address, incarnation, result)

    def _saw_result(self, sim: Simulation, address: str, incarnation: int, result: Any) -> None:
        world = self.world
        before = world.results.setdefault((address, incarnation), result)
        if before != result and not world.lossy(sim):
            world.fail(
                "result-changed",
                f"{address} (incarnation {incarnation}) completed with {before!r}, "
                f"later {result!r}",
            )

    async def _run(self, sim: Simulation, op: Op) -> None:
        try:
            run = (
                getattr(self, f"_op_{op.kind}", None)
                or getattr(self.operators, f"op_{op.kind}", None)
                or getattr(self.signals, f"op_{op.kind}")
            )
            await run(sim, **op.args)
        except EXPECTED as exc:
            self.world.note(
                f"{op.kind} {op.args.get('address') or op.args.get('id')}: {type(exc).__name__}"
            )
        except ExceptionGroup as group:
            # A public call answers with its error, never a group of them
            # (a caller's 'except JournalUnavailable' would miss it).
            expected, rest = group.split(EXPECTED)
            if rest is not None or expected is None or any(j.crashed for j in sim.journals):
                raise
            kinds = sorted({type(exc).__name__ for exc in _leaves(expected)})
            self.world.fail(
                "error-group",
                f"{op.kind} {op.args} raised an ExceptionGroup of "
                f"{', '.join(kinds)} instead of the error itself",
            )

    async def _start(self, sim: Simulation, proc: Any, name: str, input: dict[str, Any]) -> None:
        handle = await sim.system.start(proc, name, **input)
        self.world.started[handle.id] = "start"

    # -- operations ------------------------------------------------------------------

    async def _op_send(self, sim: Simulation, address: str, m: str, key: str | None = None) -> None:
        world = self.world
        world.tried[m] = address
        payload = {"m": m}
        try:
            await sim.system.send(address, p.work, payload, key=key)
        except actors.NotDelivered:
            return
        finally:
            # A client reusing its dict: the receiver still sees what was sent.
            payload["m"] = "reused"
        world.acked[m] = address

    async def _op_ksend(self, sim: Simulation, address: str, m: str) -> None:
        # A client retrying one request under one key: stored once.
        for attempt in range(3):
            try:
                return await self._op_send(sim, address, m, key=m)
            except (actors.JournalUnavailable, actors.JournalFull):
                if attempt == 2:
                    raise
                await trio.sleep(0.5)

    async def _op_ask(self, sim: Simulation, address: str, m: str, timeout: float) -> None:
        world = self.world
        world.tried[m] = address
        try:
            reply = await sim.system.ask(address, p.work, {"m": m}, timeout=timeout)
        except actors.AskTimeout:
            world.acked[m] = address  # stored before the wait began: it is handled later
            return
        except actors.NotDelivered as exc:
            if exc.reason != "unknown":  # stored, and the instance ended without replying
                world.note(f"ask {m}: NotDelivered {exc.reason}")
            return
        world.acked[m] = address
        if reply != m:
            world.fail("ask-reply", f"ask {m} to {address} was answered {reply!r}")

    async def _op_job(self, sim: Simulation, id: str, plan: dict[str, Any]) -> None:
        self.world.plans[f"job/{id}"] = plan
        await self._start(sim, p.job, id, {"plan": plan})

    async def _op_job_race(self, sim: Simulation, id: str, plan: dict[str, Any]) -> None:
        # Two starts of one address at once: one incarnation, both acknowledged.
        self.world.plans[f"job/{id}"] = plan
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(self._start_quietly, sim, p.job, id, {"plan": plan})

    async def _start_quietly(
        self, sim: Simulation, proc: Any, name: str, input: dict[str, Any]
    ) -> None:
        try:
            await self._start(sim, proc, name, input)
        except EXPECTED as exc:
            self.world.note(f"start {name}: {type(exc).__name__}")

    async def _op_sws(self, sim: Simulation, id: str, plan: dict[str, Any]) -> None:
        self.world.plans[f"job/{id}"] = plan
        handle = await sim.system.signal_with_start(
            p.job, id, signal=p.poke, payload=None, plan=plan
        )
        self.world.started[handle.id] = "signal_with_start"

    async def _op_sink_raced(
        self, sim: Simulation, id: str, sends: list[tuple[str, float]]
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._start_quietly, sim, p.sink, id, {})
            for m, pause in sends:
                op = Op("send", {"address": f"sink/{id}", "m": m}, pause, False)
                nursery.start_soon(self._paused, sim, op)

    async def _paused(self, sim: Simulation, op: Op) -> None:
        await trio.sleep(op.pause)
        await self._run(sim, op)

    async def _op_feed(self, sim: Simulation, id: str, count: int) -> None:
        await self._start(sim, p.feed, id, {"count": count})

    async def _op_consume(self, sim: Simulation, address: str, take: int) -> None:
        # A durable consumer: up to ``take`` values, then it leaves the
        # block normally (its place is kept); a crash or a fault in between
        # leaves what it saw unconsumed.
        # One reader of the consumer at a time, as one consuming service.
        async with self._readers.setdefault(address, trio.Lock()):
            seen = self.world.consumed.setdefault(address, [])
            got: list[int] = []
            place = len(seen)
            seen.append((False, got))
            async with sim.system.stream(address, "c") as values:
                async for value in values:
                    got.append(value)
                    if len(got) >= take:
                        break
            seen[place] = (True, got)

    async def _op_watch(self, sim: Simulation, address: str) -> None:
        handle = await sim.system.lookup(address)
        if handle is None:
            return
        last = 0
        with trio.move_on_after(30):
            async with aclosing(handle.watch()) as values:
                async for exports in values:
                    if exports["done"] < last:  # (judged at the end: "async" may lose a publish)
                        self.world.backwards.append(
                            f"{address} published {exports} after done={last}"
                        )
                    last = exports["done"]

    async def _op_schedule(self, sim: Simulation) -> None:
        await sim.system.schedule("ticks", p.tick, every=p.TICK_EVERY, params=("ticks",))

    async def _op_poke(self, sim: Simulation, address: str) -> None:
        with contextlib.suppress(actors.NotDelivered):
            await sim.system.send(address, p.poke)

    async def _op_cancel(self, sim: Simulation, address: str) -> None:
        cancelled = await sim.system.cancel(address)
        self.world.note(f"cancel {address}: {cancelled}")
        if cancelled:  # which incarnation it cancelled (a start afresh may follow)
            returned = self.world.now()
            handle = await sim.system.lookup(address)
            if handle is not None and handle.status == "cancelled":
                self.world.cancels.setdefault(address, (returned, handle.incarnation))

    async def _op_parent(
        self, sim: Simulation, id: str, strategy: str, kids: list[dict[str, Any]], wait: float
    ) -> None:
        await self._start(sim, p.PARENTS[strategy], id, {"kids": kids, "wait": wait})

    async def _op_queued(self, sim: Simulation, id: str, seconds: float) -> None:
        handle = await sim.system.start(p.qjob, id, queue=p.QUEUE, seconds=seconds)
        self.world.started[handle.id] = "queued"

    async def _op_qmail(self, sim: Simulation, id: str, lag: float) -> None:
        handle = await sim.system.start(p.qbox, id, queue=p.QUEUE)
        self.world.started[handle.id] = "queued"
        await trio.sleep(lag)
        await sim.system.send(handle.id, p.qmail, id)
        self.world.mailed.add(handle.id)

    async def _op_cleanup(self, sim: Simulation, older_than: float) -> None:
        removed = await sim.system.cleanup(older_than)
        self.world.note(f"cleanup older than {older_than}: {removed} removed")

    async def _op_rated(self, sim: Simulation, id: str) -> None:
        handle = await sim.system.start(p.rjob, id, queue=p.RATED)
        self.world.started[handle.id] = "queued"

    async def _op_jump(self, sim: Simulation, seconds: float) -> None:
        sim.jump(seconds)

    async def _op_result(self, sim: Simulation, address: str) -> None:
        handle = await sim.system.lookup(address)
        if handle is None:
            return
        with trio.move_on_after(30):
            try:
                result = await handle.result()
            except (actors.ProcessFailed, actors.ProcessCancelled):
                return
            self._saw_result(sim, address, handle.incarnation, result)


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found
