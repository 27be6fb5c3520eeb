"""The processes the simulation runs, and their step functions.

Every step function appends a `Run` to the world's ledger as it starts
(its work, idempotency key and attempt), then fails or hangs as the seed
says for that key and attempt, so retries, timeouts and compensations run
the same way on every replay of a seed.

- ``sink/:id``: lives for ever; takes ``work`` messages (sent, keyed or
  asked), handles each with one step (ledger tag ``W``, the message id),
  replies, and continues as new every few messages.
- ``job/:id``: a step with a compensation (``A``, undone by ``U``), maybe a
  durable timer, maybe an awaited child (``helper``), a race of a ``poke``
  against a timer, maybe a durable send and an ask to a sink, a step that
  may hang past its timeout (``B``, behind a patch), a recorded uuid; it
  may then fail on purpose, which runs the compensation.
- ``parent-one/:id``, ``parent-all/:id``, ``parent-rest/:id``: spawn
  ``kid`` children under each supervision strategy and wait for each
  kid's ``done`` (sent with ``ctx.send``) or a timeout; kids may crash a
  run or two (supervised restarts).
- ``qjob/:id``: started on a queue of concurrency 2; one async step that
  counts how many run at once.
- ``feed/:id`` (workload 4): emits its values for durable consumers and
  publishes its progress for watchers, a step before each;
- ``tick/:name/:at`` (workload 4): started by a schedule at each tick.
- ``rjob/:id`` (workload 5): started on a queue with a rate limit
  (`RATED`); one step.
- ``qbox/:id`` (workload 7): started on `QUEUE` and sent one ``qmail`` a
  moment later, often as the queue admits it; it returns what it took
  (``"late"`` if nothing came within `QBOX_WAIT`).
- ``inbox/:id`` (workload 8): lives for ever; holds its mail for a while
  (a durable timer) before each take, so that operators find unread
  messages to read and drop; handles each with one step (ledger tag ``I``,
  the message id); a message marked ``boom`` fails its first incarnation
  after the step (to be retried, forked); three effects a message after
  the first (`INBOX_HEAD`), so a fork at ``INBOX_HEAD + 3 * j`` keeps ``j``
  whole messages.
- ``joiner/:id`` (workload 8): spawns ``leafj`` children, waits while they
  end (and cleanups run), then joins each and returns their results.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import trio

import actors
from actors import (
    Context,
    OneForAll,
    OneForOne,
    Queue,
    RestForOne,
    Retry,
    Signal,
    process,
)

from .world import current

work = Signal("work")
poke = Signal("poke")
done = Signal("done")
qmail = Signal("qmail")

#: Enough attempts for the failures the seed injects (at most three per
#: step), and a crash budget larger than the crashes and lease losses a
#: seed can put in one step (past it the instance would be parked stuck).
RETRY = Retry(attempts=12, backoff=0.05, max_backoff=2.0, crashes=12)
QUEUE = Queue("sim", concurrency=2)
#: Workload 5: at most 2 starts in any 5 virtual seconds (a burst of starts
#: waits its turn; the checker reads the admissions from the written
#: transactions).
RATED = Queue("simr", rate=(2, 5.0))
SINK_RUNS = 4  # messages a sink handles per run before it continues as new


class Flaky(RuntimeError):
    """A step attempt failed on purpose (the seed said so)."""


class Boom(RuntimeError):
    """A process failed on purpose."""


def _ran(tag: str, ident: str) -> tuple[str, int]:
    info = actors.current_step()
    world = current()
    world.ran(tag, ident, info.key, info.attempt)
    return info.key, info.attempt


def effect(tag: str, ident: str) -> str:
    """A side effect: one ledger entry, and a failure if the seed says so."""
    key, attempt = _ran(tag, ident)
    if current().flaky(key, attempt):
        raise Flaky(f"{tag} {ident} attempt {attempt} fails on purpose")
    return f"{tag}:{ident}"


#: A bug planted on purpose (tests/whole/test_simulation.py shows the checker
#: catches it): "forget-compensation" runs compensations without their entry.
PLANTED = os.environ.get("ACTORS_SIMULATION_PLANT")


def undo(tag: str, ident: str) -> str:
    """The compensation of `effect`: a ledger entry tagged ``U``."""
    if PLANTED != "forget-compensation":
        _ran("U", ident)
    return f"U:{ident}"


async def slow(tag: str, ident: str, seconds: float) -> str:
    """A side effect that takes ``seconds``, or hangs (20 times longer) if
    the seed says so: past the step's timeout."""
    key, attempt = _ran(tag, ident)
    hangs = current().flaky(key, attempt, "hang")
    await trio.sleep(seconds * (20 if hangs else 1))
    return f"{tag}:{ident}"


async def queued_work(ident: str, seconds: float) -> str:
    """A queued instance's work: counts the queued steps running at once."""
    world = current()
    _ran("Q", ident)
    # Instances, not executions: on two nodes, one whose node's lease lapsed
    # may still run its step while the node that took it over runs it again
    # (README's limits); that is one instance holding one slot.
    running = world.queue_running
    running[ident] = running.get(ident, 0) + 1
    world.queue_most = max(world.queue_most, len(running))
    try:
        await trio.sleep(seconds)
    finally:
        running[ident] -= 1
        if not running[ident]:
            del running[ident]
    return f"Q:{ident}"


@process("sink/:id")
async def sink(ctx: Context, id: str, *, runs: int = SINK_RUNS) -> None:
    for _ in range(runs):
        _signal, payload = await ctx.receive(work)
        await ctx.step(effect, "W", payload["m"], name="handle", retry=RETRY, thread=False)
        await ctx.reply(payload["m"])  # a recorded no-op for a message that was sent
    await ctx.continue_as_new(runs=runs)


@process("helper/:id")
async def helper(ctx: Context, id: str, *, seconds: float) -> str:
    await ctx.sleep(seconds)
    value: str = await ctx.step(effect, "H", ctx.id, name="h", retry=RETRY)
    return value


@process("job/:id")
async def job(ctx: Context, id: str, *, plan: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["a"] = await ctx.step(effect, "A", ctx.id, name="a", retry=RETRY, compensate=undo)
    if plan["sleep"]:
        await ctx.sleep(plan["sleep"])
    if plan["child"]:
        out["child"] = await ctx.call(helper, "h", seconds=plan["child"])
    which, _ = await ctx.first(poke=ctx.wait(poke), late=ctx.sleep(plan["wait"]))
    out["which"] = which
    if plan["send"]:
        address, message = plan["send"]
        try:
            await ctx.send(address, work, {"m": message}, key=message)
            out["sent"] = True
        except actors.NotDelivered:
            out["sent"] = False
    if plan["ask"]:
        address, message = plan["ask"]
        try:
            out["reply"] = await ctx.ask(address, work, {"m": message}, timeout=60)
        except (actors.NotDelivered, actors.AskTimeout) as exc:
            out["reply"] = type(exc).__name__
    if ctx.patched("slow-b"):
        out["b"] = await ctx.step(
            slow, "B", ctx.id, plan["slow"], name="b", retry=RETRY, timeout=plan["slow"] * 5
        )
    out["u"] = ctx.uuid().hex
    out["r"] = round(ctx.random(), 6)
    if plan["fail"]:
        raise Boom(f"{ctx.id} fails on purpose (its compensation runs)")
    return out


@process("kid/:id")
async def kid(ctx: Context, id: str, *, seconds: float, crash: int) -> str:
    await ctx.sleep(seconds)
    value: str = await ctx.step(effect, "K", ctx.id, name="k", retry=RETRY)
    if ctx.run < crash:
        raise Boom(f"{ctx.id} crashes in run {ctx.run} (a supervised restart follows)")
    parent = ctx.id.rsplit("/kid/", 1)[0]
    with contextlib.suppress(actors.NotDelivered):  # the parent ended first
        await ctx.send(parent, done, {"kid": ctx.id})
    return value


async def _parent(ctx: Context, kids: list[dict[str, Any]], wait: float) -> list[str]:
    for i, spec in enumerate(kids):
        await ctx.spawn(
            kid, f"k{i}", restart=spec["restart"], seconds=spec["seconds"], crash=spec["crash"]
        )
    got: set[str] = set()
    while len(got) < len(kids):
        which, value = await ctx.first(done=ctx.receive(done), late=ctx.sleep(wait))
        if which == "late":
            break
        got.add(value[1]["kid"])
    return sorted(got)


@process("parent-one/:id", supervision=OneForOne(max_restarts=3, within=60))
async def parent_one(
    ctx: Context, id: str, *, kids: list[dict[str, Any]], wait: float
) -> list[str]:
    return await _parent(ctx, kids, wait)


@process("parent-all/:id", supervision=OneForAll(max_restarts=3, within=60))
async def parent_all(
    ctx: Context, id: str, *, kids: list[dict[str, Any]], wait: float
) -> list[str]:
    return await _parent(ctx, kids, wait)


@process("parent-rest/:id", supervision=RestForOne(max_restarts=3, within=60))
async def parent_rest(
    ctx: Context, id: str, *, kids: list[dict[str, Any]], wait: float
) -> list[str]:
    return await _parent(ctx, kids, wait)


@process("qjob/:id")
async def qjob(ctx: Context, id: str, *, seconds: float) -> str:
    value: str = await ctx.step(queued_work, ctx.id, seconds, name="q", retry=RETRY)
    return value


@process("rjob/:id")
async def rjob(ctx: Context, id: str) -> str:
    value: str = await ctx.step(effect, "R", ctx.id, name="r", retry=RETRY)
    return value


@process("feed/:id")
async def feed(ctx: Context, id: str, *, count: int) -> int:
    """Emits ``0 .. count - 1`` for durable consumers, and publishes how many."""
    for i in range(count):
        # At most once: a crash spends one of RETRY's attempts (the other
        # steps run again outside it, within its crash budget).
        await ctx.step(effect, "F", f"{ctx.id}:{i}", name="f", retry=RETRY, at_most_once=True)
        await ctx.emit(i)
        await ctx.publish({"done": i + 1})
        await ctx.sleep(0.5)
    return count


@process("tick/:name/:at")
async def tick(ctx: Context, name: str, at: str) -> str:
    """A schedule's tick (its address ends with the tick's time)."""
    value: str = await ctx.step(effect, "T", ctx.id, name="t", retry=RETRY)
    return value


PARENTS = {"one": parent_one, "all": parent_all, "rest": parent_rest}


@process("qbox/:id")
async def qbox(ctx: Context, id: str) -> Any:
    # (Not for ever: one whose message was never acknowledged frees its
    # queue slot, as a real one would time out.)
    which, got = await ctx.first(msg=ctx.receive(qmail), late=ctx.sleep(QBOX_WAIT))
    return got[1] if which == "msg" else "late"


def incarnation() -> int:
    """The incarnation of the step's instance (a recorded step: its replay
    gives the incarnation that ran it)."""
    return int(actors.current_step().key.split("/")[-4])


@process("inbox/:id")
async def inbox(ctx: Context, id: str, *, hold: float) -> None:
    # (INBOX_HEAD effects before the loop, three in each turn)
    first = await ctx.step(incarnation, name="incarnation", thread=False)
    while True:
        await ctx.sleep(hold)
        _signal, payload = await ctx.receive(work)
        await ctx.step(effect, "I", payload["m"], name="handle", retry=RETRY, thread=False)
        if payload.get("boom") and first == 1:
            raise Boom(f"{ctx.id} fails on purpose at {payload['m']} (retry or fork it)")


@process("leafj/:id")
async def leafj(ctx: Context, id: str, *, seconds: float) -> str:
    await ctx.sleep(seconds)
    value: str = await ctx.step(effect, "L", ctx.id, name="l", retry=RETRY)
    return value


@process("joiner/:id")
async def joiner(ctx: Context, id: str, *, kids: list[float], wait: float) -> list[str]:
    children = [await ctx.spawn(leafj, f"l{i}", seconds=s) for i, s in enumerate(kids)]
    await ctx.sleep(wait)  # the children end meanwhile: cleanups must leave them
    return [await ctx.join(child) for child in children]


PROCESSES = [sink, helper, job, kid, parent_one, parent_all, parent_rest, qjob, feed, tick]
#: What workload 5 registers besides (earlier versions run without it, as
#: they were kept).
PROCESSES_5 = [rjob]
PROCESSES_7 = [qbox]
PROCESSES_8 = [inbox, leafj, joiner]
INBOX_HEAD = 1  # effects an inbox makes before its loop
QBOX_WAIT = 1800.0  # virtual seconds
#: The schedule's interval (virtual seconds): a few ticks while the run
#: settles, which may overlap a crash or a fault.
TICK_EVERY = 900.0
#: Processes whose instances may stay live for ever (waiting for mail).
LONG_LIVED = {"sink/:id", "inbox/:id"}
