"""The world outside the journal: what clients were told, and what step
functions really did.

The checker compares the journal with this model, never the journal with
itself. Clients record what they tried and what was acknowledged; every
step function appends one `Run` to the side-effect ledger when it runs (an
attempt, with its idempotency key), so the checker counts real executions.
One `World` serves one seed; `current()` finds it from the step functions.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
import trio

from actors.testing import Simulation
from storage import LogEntry, Txn, decode, instance_id
from storage._states import DELETE_STATE, PUT_STATE
from storage._txn import APPEND_MESSAGE, DELETE_INSTANCE, PUT_LOG

from .signals import Signalled

#: The payload key naming the sender of an unkeyed ``ctx.send`` whose
#: deliveries the checker counts (``sent-twice``): each such sender sends
#: one message per send effect.
SENT_BY = "kid"


class InvariantBroken(AssertionError):
    """An invariant of the runtime did not hold; ``name`` says which."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail


@attrs.frozen
class Run:
    """One execution of a step's side effect (one attempt)."""

    tag: str  # what kind of work: W (a message handled), A, B, H, K, Q, U (an undo)
    ident: str  # which work: a message id, an instance's address
    key: str  # the step's idempotency key
    attempt: int
    life: int
    at: float

    @property
    def address(self) -> str:
        """The address of the instance the step belongs to (from its key:
        ``<address>/<incarnation>/<run>/<name>/<occurrence>[/compensate]``)."""
        parts = self.key.split("/")
        if parts[-1] == "compensate":
            parts.pop()
        return "/".join(parts[:-4])

    @property
    def incarnation(self) -> int:
        parts = self.key.split("/")
        if parts[-1] == "compensate":
            parts.pop()
        return int(parts[-4])


@attrs.define
class Operated:
    """Workload 8: what operators did to instances and what they were told
    (see `operators`)."""

    #: message id -> inbox address, for every message a client tried to send
    tried: dict[str, str] = attrs.Factory(dict)
    #: message id -> inbox address, for messages whose send was acknowledged
    acked: dict[str, str] = attrs.Factory(dict)
    #: message id -> when the drop that returned it returned
    dropped: dict[str, float] = attrs.Factory(dict)
    #: refused drops: (message id, address, the refusal, when mail() read it, when refused)
    refusals: list[tuple[str, str, str, float, float]] = attrs.Factory(list)
    #: address -> when each retry or fork of it began
    repairs: dict[str, list[float]] = attrs.Factory(dict)
    #: addresses a retry of succeeded
    retried: set[str] = attrs.Factory(set)
    #: fork address -> the address forked
    forks: dict[str, str] = attrs.Factory(dict)
    #: joiner address -> its children's seconds
    joiners: dict[str, list[float]] = attrs.Factory(dict)


@attrs.define
class World:
    """One seed's model: the ledger, the clients' view, and the plan."""

    seed: int
    sim: Simulation | None = None
    fail_rate: float = 0.0  # chance that an attempt of a step fails (or hangs)
    #: the journal's durability: "async" may lose acknowledged writes (README)
    durability: str = "sync"
    ledger: list[Run] = attrs.Factory(list)
    #: message id -> address, for messages whose send was acknowledged
    acked: dict[str, str] = attrs.Factory(dict)
    #: message id -> address, for every message a client or process tried to send
    tried: dict[str, str] = attrs.Factory(dict)
    #: addresses whose start was acknowledged
    started: dict[str, str] = attrs.Factory(dict)
    #: workload 7: the ``qbox`` addresses whose one message was acknowledged
    mailed: set[str] = attrs.Factory(set)
    #: (address, incarnation) -> result, for every completed instance seen
    results: dict[tuple[str, int], Any] = attrs.Factory(dict)
    #: job address -> its plan, for every job a client tried to start
    plans: dict[str, dict[str, Any]] = attrs.Factory(dict)
    #: address -> when a client's cancel of it first returned True, and the
    #: incarnation it cancelled
    cancels: dict[str, tuple[float, int]] = attrs.Factory(dict)
    #: stream address -> each consumer read in order: (whether it left its
    #: block normally, the values it got)
    consumed: dict[str, list[tuple[bool, list[int]]]] = attrs.Factory(dict)
    #: what watchers saw of exports going back
    backwards: list[str] = attrs.Factory(list)
    #: queued instances running a step now, and the most ever at once
    queue_running: dict[str, int] = attrs.Factory(dict)  # queued instance -> its steps running
    queue_most: int = 0
    #: the processes the run registers (workload 5 adds some)
    processes: list[Any] = attrs.Factory(list)
    #: the name of the queue with a rate limit (workload 5), and its
    #: admissions as written: time -> how many at once
    rated: str | None = None
    admissions: list[tuple[float, int]] = attrs.Factory(list)
    #: ids of the instances a cleanup removed (workload 6)
    removed: set[bytes] = attrs.Factory(set)
    #: sender address -> the messages written that it sent with an unkeyed
    #: ``ctx.send`` (each carries its sender: `SENT_BY`), counted from the
    #: transactions written
    deliveries: dict[str, int] = attrs.Factory(dict)
    #: sender instance id -> the (run, seq) of each send effect whose log
    #: entry says it stored its message, from the transactions written
    send_effects: dict[bytes, set[tuple[int, int]]] = attrs.Factory(dict)
    #: workload 8: operators' calls (retry, fork, mail, drop, join)
    operated: Operated = attrs.Factory(Operated)
    #: workload 9: listeners and bells, from the transactions written
    signalled: Signalled = attrs.Factory(Signalled)
    next_op: int = 0  # the workload's progress, across lives
    events: list[str] = attrs.Factory(list)  # what clients saw, for the trace

    @property
    def life(self) -> int:
        return self.sim.life if self.sim is not None else 0

    def now(self) -> float:
        return trio.current_time()

    def ran(self, tag: str, ident: str, key: str, attempt: int) -> None:
        """Record an execution of a step's side effect."""
        self.ledger.append(Run(tag, ident, key, attempt, self.life, self.now()))

    def flaky(self, key: str, attempt: int, what: str = "fail") -> bool:
        """Whether attempt ``attempt`` of the step with ``key`` fails (or
        hangs): a function of the seed, the key and the attempt only, so
        the same attempt fails however the run got there. Only the first
        few attempts fail, so every step succeeds within its budget."""
        if attempt > 3 or not self.fail_rate:
            return False
        digest = hashlib.blake2b(f"{self.seed}:{what}:{key}:{attempt}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big") / 2**64 < self.fail_rate

    def note(self, text: str) -> None:
        self.events.append(f"{self.now():.6f} {text}")
        if self.sim is not None:
            self.sim.note(text)

    def admitted(self, txn: Txn) -> None:
        """Note the rated queue's admissions a written transaction holds.

        An admission rewrites the queue's row and deletes the waiting row of
        each instance it admits: those are counted, not the start times the
        row keeps (what a rate bug would get wrong), and the round's time
        is the newest of them (the clock's, if the row keeps none)."""
        row, waiting = f"queue/{self.rated}", f"queue-wait/{self.rated}/"
        starts: list[float] | None = None
        admitted = 0
        for op in txn.ops:
            if op[0] == PUT_STATE and op[1] == row:
                starts = decode(op[2])["starts"]
            elif op[0] == DELETE_STATE and op[1].startswith(waiting):
                admitted += 1
        if starts is not None and admitted:
            self.admissions.append((max(starts, default=self.now()), admitted))

    def removals(self, txn: Txn) -> None:
        """Note the instances a written transaction removes (a cleanup)."""
        for op in txn.ops:
            if op[0] == DELETE_INSTANCE:
                self.removed.add(op[1])

    def sends(self, txn: Txn) -> None:
        """Note the unkeyed ``ctx.send`` messages and the send effects'
        log entries a written transaction holds (see `checks` ``sent-twice``).

        A message is counted for the sender its payload names (`SENT_BY`);
        a send effect is its log entry ``(run, seq)`` that records a stored
        message (no error: a refused send stores none). An entry written
        again at the same place (a rewrite) is one effect."""
        for op in txn.ops:
            if op[0] == APPEND_MESSAGE:
                stored = decode(op[2])
                payload = stored[1]
                if isinstance(payload, dict) and isinstance(payload.get(SENT_BY), str):
                    sender = payload[SENT_BY]
                    self.deliveries[sender] = self.deliveries.get(sender, 0) + 1
            elif op[0] == PUT_LOG:
                entry = LogEntry.from_stored(decode(op[4]))
                if entry.kind == "send" and entry.error is None:
                    self.send_effects.setdefault(op[1], set()).add((op[2], op[3]))

    def sent_by(self, address: str) -> int:
        """How many send effects of the instance at ``address`` stored a message."""
        return len(self.send_effects.get(instance_id(address), ()))

    def lossy(self, sim: Any) -> bool:
        """Whether the run lost a write it had acknowledged, as durability
        "async" may (see `checks`): then what a client saw may be undone."""
        return self.durability == "async" and sim.lost_unawaited > 0

    def fail(self, name: str, detail: str) -> None:
        """Raise `InvariantBroken` (noted in the trace first)."""
        self.note(f"INVARIANT {name}: {detail}")
        raise InvariantBroken(name, detail)


_current: World | None = None


def current() -> World:
    """The world of the seed being run (for step functions)."""
    assert _current is not None, "no simulation is running"
    return _current


def install(world: World | None) -> None:
    """Make ``world`` the one `current` gives (None: none)."""
    global _current
    _current = world
