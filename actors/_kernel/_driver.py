"""The driver: steps a process coroutine against the log of its run.

The process coroutine runs by hand (``coro.send``/``coro.throw``): every
``await`` on an effect yields the effect up here. The driver gives each leaf
of the effect its logged outcome if the log has one (replay: no trio
checkpoint, so replaying a long log is a tight loop) and hands what is left
to its host, which runs it live. Process code therefore never awaits trio
directly; if it does, the driver throws `ContextError` into it.

One loop serves two hosts: the live `Actor`, and the replay check
(`Driver.check`, behind `actors.testing.replay_check`), whose host runs
nothing and stops where the history ends. Both therefore see the same
non-determinism checks:

- each effect must match the log entry at its position (kind, name and
  argument hash), else `NonDeterminismError`;
- a log entry without an outcome (a *started* record) must be of a kind
  that writes one (`Effect.logs_start`: a step, a timer, a call, an ask);
  one of another kind is a log the runtime never wrote (an imported history
  damaged on the way), and holds the instance as a mismatch does;
- a run that ends (returns or raises) must have consumed its whole log;
- every effect `Context` handed the process must be awaited (alone or in a
  `first`/`all`/`settled`): one dropped unawaited raises `ContextError` in
  the process at its next effect, one still unawaited when the run returns
  or continues as new fails it there (see `Driver.made`).

What ran before. An activation that loads a run which ran before re-runs
code an earlier activation already ran, up to the first effect replay
cannot answer: that is where the earlier one stopped (it awaited that
effect; whatever it did that anyone could see is in the log). Past the log's
last entry this stretch is still history, though the log holds nothing of
it: a pending `wait` writes nothing until it takes a message, so a run
suspended at its first wait has an empty log. `ctx.patched` decides from
it (see `Driver.patched`).
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine, Sequence
from typing import Any, Literal, Protocol

import attrs
import trio

from ..errors import ContextError, NonDeterminismError
from . import _effects as fx, _guard
from ._differs import differs
from ._effects import Effect
from ._failures import ErrorRecord
from ._log import NO_VALUE, LogEntry
from ._mailbox import Asker

__all__ = [
    "CONTINUED",
    "ENDED",
    "RAISE",
    "WAIT",
    "YIELD",
    "Driver",
    "Host",
    "Interrupted",
    "Parked",
    "Passivated",
    "error_from_entry",
    "outcome_of",
]


class Passivated(Exception):
    """The host dropped the instance from memory; nothing more to do."""


class Interrupted(Exception):
    """The instance was cancelled, restarted or escalated to from outside."""


class Parked(Exception):  # noqa: N818 - a signal to the driver, not an error
    """The host parked the instance without a task: it keeps the coroutine
    (see `Actor.wait_for`), and resumes it once the effect it waits on is done.
    `Driver.run` sets ``coro``: the coroutine it was running (the run's
    latest, after a continue-as-new)."""

    coro: Coroutine[Any, Any, Any] | None = None


# What `Driver.advance` stopped at (kinds compared by identity).
WAIT = 1  # an effect begun live and not done: wait for it
YIELD = 2  # a done effect after a long replay: let others run, then go on
ENDED = 3  # the run ended: ("complete" | "fail" | "diverge", argument)
CONTINUED = 4  # the run continues as new
RAISE = 5  # (only as `Driver.run`'s ``pending``) raise this exception: stepping failed


def outcome_of(effect: Effect[Any]) -> tuple[Any, BaseException | None]:
    """What the process gets for done ``effect``: (value to send, error to throw)."""
    error = effect.error
    return (None, error) if error is not None else (effect.value, None)


@attrs.frozen(slots=True)
class Interrupt:
    """A request from outside that the driver acts on at the instance's next
    effect (raising `Interrupted` there): the host's ``interrupt``.

    - ``cancel``: ``detail`` is the reason; ``compensate`` asks for the saga's
      compensations first.
    - ``restart``: ``detail`` is the reason (a sibling crashed).
    - ``escalate``: ``detail`` is the ESCALATE payload, ``message`` its
      mailbox id (taken with the failure it causes).
    - ``corrupt``: ``detail`` is the `JournalCorrupt` found elsewhere.
    - ``park``: ``detail`` is ``(error, held)``: keep the instance stuck
      (`Ends.diverge`), as a step whose crash budget is spent asks.
    """

    kind: Literal["cancel", "restart", "escalate", "corrupt", "park"]
    detail: Any
    compensate: bool = False
    message: int | None = None


class Host(Protocol):
    """What the driver asks of whoever runs the effects it does not replay."""

    interrupt: Interrupt | None  # not None: stop at the next effect (raise `Interrupted`)

    def begin(self, effect: Effect[Any], started: dict[Effect[Any], LogEntry]) -> None:
        """Start the leaves of ``effect`` that replay left open (called only
        if it left some: ``effect`` is not done, or ``started`` is not empty)."""

    async def wait_for(self, effect: Effect[Any]) -> bool:
        """Wait until ``effect`` is done; False to stop driving (nothing more to run)."""

    @property
    def ends(self) -> RunEnds:
        """How the run ends."""


class RunEnds(Protocol):
    """How a run a driver runs ends (`Host.ends`)."""

    async def complete(self, value: Any) -> None:
        """The process returned ``value``."""

    async def fail(self, exc: BaseException) -> None:
        """The process raised ``exc``."""

    async def diverge(self, exc: NonDeterminismError) -> None:
        """The code does not match the recorded history."""

    async def continue_as_new(self, effect: fx.ContinueAsNew) -> Coroutine[Any, Any, Any] | None:
        """Start the next run; its coroutine, or None to stop driving."""


class Owner(Protocol):
    """The instance a driver belongs to: what replaying a logged child effect
    tells it, and the status its journal row had when its run was loaded."""

    @property
    def persisted_status(self) -> str | None:
        """The status the journal holds for the instance (None: not read),
        as of `Driver.load`."""

    def add_child(self, address: str, seq: int) -> None: ...

    def child_handle(self, address: str) -> Any: ...


def error_from_entry(entry: LogEntry) -> BaseException:
    """Rebuild the exception a logged failure raised in the process."""
    assert entry.error is not None
    return ErrorRecord.from_stored(entry.error).exception()


_NO_LOG: dict[int, LogEntry] = {}  # the log of a run that has none (shared, never written)


class Driver:
    """The log of an instance's current run and the position in it."""

    __slots__ = (
        "address",
        "fresh",
        "last",
        "log",
        "occurrences",
        "owner",
        "patches",
        "rerun",
        "seq",
        "taken",
        "taken_seq",
        "unanswered",
    )

    def __init__(self, owner: Owner, address: str) -> None:
        self.owner = owner
        self.address = address
        # Never mutated, only replaced (see load): a fresh instance shares one empty log.
        self.log: dict[int, LogEntry] = _NO_LOG
        self.last = 0  # the last position in the log (replaying while seq is below it)
        # Invariant: seq is the number of effects the current coroutine has
        # created; the log entry of effect n sits at log[n].
        self.seq = 0
        # step name -> how many so far; made at the first step (a suspended
        # instance that never ran one keeps none: there is one per live instance)
        self.occurrences: dict[str, int] | None = None
        # Invariant: rerun is True while the coroutine runs code an earlier
        # activation of this run already ran (see the module docstring):
        # from a load of a run that ran before, up to the first effect
        # begun live. A run made in memory never ran before.
        self.rerun = False
        # Invariant: fresh holds the effects `Context` handed the coroutine
        # that it has neither awaited nor put in a composite, in the order
        # made: None, the one such effect (the usual case: made, then
        # awaited at once, costs no list), or a list.
        self.fresh: Effect[Any] | list[Effect[Any]] | None = None
        self._reset_run_state()

    def _reset_run_state(self) -> None:
        # What ctx.reply answers: the ask (or None: a plain message) taken by
        # the highest-numbered wait of this run that took one. Decided by
        # effect numbers, never by arrival order, so replay decides the same.
        self.taken: Asker | None = None
        self.taken_seq = 0
        # Asks taken in this run and not replied to, by ask id (see _asks);
        # and patch id -> what ctx.patched said. Both made when first needed.
        self.unanswered: dict[str, Asker] | None = None
        self.patches: dict[str, bool] | None = None

    def load(self, log: dict[int, LogEntry]) -> None:
        """Replay this log (of the current run) from the start."""
        self.log = log
        self.last = max(log, default=0)  # the last logged position
        self.seq = 0
        self.occurrences = None
        self.fresh = None
        # The run ran before if it logged anything, or if it suspended: only
        # a suspension writes "suspended" (and a run's start, restart or
        # continue-as-new writes "running" with the run, in one commit), so
        # "suspended" with an empty log is a run that waits at a wait it
        # reached with nothing logged before. Both are what every version
        # of the runtime wrote, so a journal of an earlier version needs
        # nothing more. A suspension that was never committed (a crash
        # first) counts as not run: nothing of that activation was seen.
        self.rerun = bool(log) or self.owner.persisted_status == "suspended"
        self._reset_run_state()

    def unload(self) -> None:
        """The instance left memory: let go of its log now. The actor and
        its driver refer to each other, so its entries would otherwise wait
        for the cycle collector, which walks every one of them on the way
        (a wake reads the whole log; a passivated actor is garbage at once)."""
        self.log = _NO_LOG
        self.last = 0

    def took(self, seq: int, ask: Asker | None) -> None:
        """Wait ``seq`` took a message, asked by ``ask`` (None: sent)."""
        if seq >= self.taken_seq:
            self.taken, self.taken_seq = ask, seq
        if ask is not None:
            if self.unanswered is None:
                self.unanswered = {}
            self.unanswered[ask.ask_id] = ask

    def answered(self, ask: Asker) -> bool:
        """Note that ``ask`` is being answered; False if it was already."""
        return self.unanswered is not None and self.unanswered.pop(ask.ask_id, None) is not None

    def patched(self, patch_id: str) -> bool | None:
        """Whether the history being replayed was recorded with ``patch_id``
        here; None when the code runs for the first time (the caller records
        the marker). The first answer for a patch id holds for the rest of
        the run.

        Temporal's rule: True on a run's first execution; on a re-run, True
        only if the history holds the marker here. The history covers
        everything an earlier activation ran, not only the logged effects:
        past the last entry, up to the first effect begun live (`rerun`),
        the code ran before without the marker, on code without the patch.
        """
        if self.patches is None:
            self.patches = {}
        known = self.patches.get(patch_id)
        if known is not None:
            return known
        if self.seq >= self.last and not self.rerun:
            return None
        entry = self.log.get(self.seq + 1)
        found = entry is not None and entry.kind == "patch" and entry.name == patch_id
        if found:
            self.seq += 1  # the marker's position, consumed
        # Not found: recorded before the patch; no position is consumed, so
        # the effects after it line up with the history.
        self.patches[patch_id] = found
        return found

    def skip_marker(self, patch_id: str) -> None:
        """Consume the marker of ``patch_id`` if the replayed history has one here."""
        entry = self.log.get(self.seq + 1)
        if entry is not None and entry.kind == "patch" and entry.name == patch_id:
            self.seq += 1

    def next_seq(self) -> int:
        """Number a new effect."""
        self.seq += 1
        return self.seq

    # -- effects made and not yet awaited --------------------------------------------

    def made(self, effect: Effect[Any]) -> None:
        """The coroutine was handed ``effect``: it must await it (alone or in
        a composite) before it returns. One it drops unawaited raises
        `ContextError` at its next effect (see `forgotten`)."""
        fresh = self.fresh
        if fresh is None:
            self.fresh = effect
        elif isinstance(fresh, list):
            fresh.append(effect)
        else:
            self.fresh = [fresh, effect]

    def joined(self, composite: fx.Composite[Any]) -> None:
        """As `made`, for a composite: its children are its to await now."""
        self.unmade(composite.children)
        self.made(composite)

    def unmade(self, effects: list[Effect[Any]]) -> None:
        """Stop tracking ``effects`` (a composite took them, or the process
        never got them: the call that made them raised half-way)."""
        fresh = self.fresh
        if fresh is None or not effects:
            return
        if not isinstance(fresh, list):
            if any(fresh is effect for effect in effects):
                self.fresh = None
            return
        taken = {id(effect) for effect in effects}
        self._keep([each for each in fresh if id(each) not in taken])

    def _keep(self, effects: list[Effect[Any]]) -> None:
        self.fresh = None if not effects else effects[0] if len(effects) == 1 else effects

    def forgotten(self, awaited: object, ending: bool) -> ContextError | None:
        """The coroutine awaits ``awaited`` (None: it returned); the error
        naming the effects it was handed and will never await, if any.

        Those are the ones nothing refers to any more (the coroutine dropped
        them: ``ctx.step(charge)`` without ``await``) and, when ``ending``
        (the run returns or continues as new), all the rest. An effect the
        coroutine still holds may yet be awaited; so it is kept. Reference
        counts are deterministic, so replay raises at the same effect."""
        # Counted below: no reference but the list `pending` may remain here
        # (so the caller keeps none either).
        fresh, self.fresh = self.fresh, None
        pending = [
            each
            for each in (fresh if isinstance(fresh, list) else (fresh,))
            if each is not None and each is not awaited
        ]
        del fresh
        lost: list[Effect[Any]] = []
        kept: list[Effect[Any]] = []
        if ending:
            lost = pending
        else:
            for each, count in zip(pending, _refcounts(pending), strict=False):
                # A composite is referred to by its children's parent pointers too.
                own = len(each.children) if isinstance(each, fx.Composite) else 0
                (lost if count <= _ALONE + own else kept).append(each)
        self._keep(kept)
        if not lost:
            return None
        made = " and ".join(f"{each.as_call()} made at {each.made_where()}" for each in lost)
        if len(lost) == 1:
            return ContextError(
                f"{made} was never awaited, so it never ran: await it, or pass it to "
                "ctx.first/all/settled"
            )
        return ContextError(
            f"{made} were never awaited, so they never ran: await each, or pass them to "
            "ctx.first/all/settled"
        )

    def occurrence(self, name: str) -> int:
        """Count one more step called ``name`` in this run: 1 for the first."""
        occurrences = self.occurrences
        if occurrences is None:
            occurrences = self.occurrences = {}
        count = occurrences.get(name, 0) + 1
        occurrences[name] = count
        return count

    @property
    def replaying(self) -> bool:
        """True while the next effect's outcome is in the log."""
        return self.seq < self.last

    # -- replay ------------------------------------------------------------------

    def logged(self, effect: Effect[Any]) -> LogEntry | None:
        """The log entry at the effect's position, checked against it."""
        entry = self.log.get(effect.seq)
        if entry is None:
            return None
        if entry.kind != effect.kind or entry.name != effect.name or entry.hash != effect.hash:
            raise self._mismatch(effect, entry)
        return entry

    def _mismatch(self, effect: Effect[Any], entry: LogEntry) -> NonDeterminismError:
        return NonDeterminismError(
            f"instance {self.address!r} replayed a different effect at position "
            f"{effect.seq}: {differs(entry, effect)}. The code changed in a way that does not "
            "match this instance's history: deploy code that makes the same effects "
            "in the same order (add new effects after the existing ones), or cancel "
            "the instance. It stays suspended until then.",
            address=self.address,
            position=effect.seq,
            expected=entry.identity(),
            found=effect.describe().identity(),
        )

    def unwritten(self, effect: Effect[Any], entry: LogEntry) -> NonDeterminismError:
        """The error of a started record at ``effect``'s position, of a kind
        that logs its outcome only (`Effect.logs_start` False)."""
        # A started record of a kind that logs its outcome only: no run of
        # the runtime wrote this log (an import of a damaged history, or
        # one exported by a version that dropped outcomes of None). Run
        # live, the effect would repeat what the history says it did, so
        # the instance is held as for changed code, not run.
        return NonDeterminismError(
            f"instance {self.address!r} cannot be replayed: its log holds {entry.show()} "
            f"at position {effect.seq} with no outcome, and a {effect.kind} logs only its "
            "outcome, so the runtime never wrote this log (a history imported from a damaged "
            "file, or one exported by a version that left out outcomes of None). Export it "
            "again from the journal it ran in and import that with --replace, or cancel the "
            "instance. It stays suspended until then.",
            address=self.address,
            position=effect.seq,
            expected=entry.identity(),
            found=effect.describe().identity(),
        )

    def replay(self, effect: Effect[Any]) -> dict[Effect[Any], LogEntry]:
        """Give every leaf of ``effect`` its logged outcome, if it has one.

        Returns the leaves that have only a "started" record. Raises
        `NonDeterminismError` for a leaf that does not match its log entry.
        """
        # A wake replays every effect of the run through here: `logged` is
        # inlined, and a lone effect is its own only leaf. Every live effect
        # comes through here too: one past the log has nothing to look up.
        started: dict[Effect[Any], LogEntry] = {}
        composite = isinstance(effect, fx.Composite)
        if not composite and effect.seq > self.last:
            return started
        log = self.log
        for leaf in effect.leaves() if composite else (effect,):
            entry = log.get(leaf.seq)
            if entry is None:
                continue
            if entry.kind != leaf.kind or entry.name != leaf.name or entry.hash != leaf.hash:
                raise self._mismatch(leaf, entry)
            if leaf.makes_child:
                self.owner.add_child(leaf.name, leaf.seq)
            value = entry.value
            if value is not NO_VALUE:
                leaf.done = True
                leaf.value = leaf.replayed(value, entry, self)
            elif entry.error is not None:
                leaf.done = True
                leaf.error = error_from_entry(entry)
            elif leaf.logs_start:
                started[leaf] = entry
            else:
                raise self.unwritten(leaf, entry)
        if composite and isinstance(effect, fx.Composite):
            _settle_tree(effect)
        return started

    def check_consumed(self) -> None:
        """Raise `NonDeterminismError` if the log goes on past the last effect."""
        extra = [seq for seq in self.log if seq > self.seq]
        if extra:
            entry = self.log[min(extra)]
            raise NonDeterminismError(
                f"instance {self.address!r} finished replaying at position {self.seq}, but "
                f"its log goes on with {entry.show()} at position {min(extra)}: the code "
                "now skips effects its history made; deploy code that matches the "
                "history, or cancel the instance. It stays suspended until then.",
                address=self.address,
                position=min(extra),
                expected=entry.identity(),
                found=None,
            )

    # -- the loop ------------------------------------------------------------------

    def advance(
        self,
        coro: Coroutine[Any, Any, Any],
        host: Host,
        send: Any = None,
        throw: BaseException | None = None,
    ) -> tuple[int, Any]:
        """Step ``coro`` (sending it ``send``, or throwing ``throw``) through
        every effect replay or its host answers at once, up to the first that
        needs waiting for or awaiting: ``(WAIT, effect)`` (begun, not done),
        ``(YIELD, effect)`` (done: a long replay lets others run), ``(ENDED,
        how)`` (`complete`, `fail` or `diverge`: ``how`` is ``(method name,
        argument)``) or ``(CONTINUED, effect)`` (a `ContinueAsNew`; ``coro``
        is closed). Nothing here awaits: a host may run it outside any task
        of the instance's own (see `Actor.step_parked`).

        Raises `Interrupted` if the host was asked to stop.
        """
        replayed = 0
        stepping = _guard.stepping  # this thread's (a trio run stays in one thread)
        while True:
            if host.interrupt is not None:
                raise Interrupted()
            try:
                # Invariant: _guard.stepping.address names this instance, in this
                # thread, exactly while its code runs (never across an
                # await of ours).
                stepping.address = self.address
                try:
                    if throw is not None:
                        effect = coro.throw(throw)
                    else:
                        effect = coro.send(send)
                finally:
                    stepping.address = None
            except StopIteration as stop:
                if self.fresh is not None:
                    forgotten = self.forgotten(None, ending=True)
                    if forgotten is not None:
                        return ENDED, ("fail", forgotten)
                return ENDED, ("complete", stop.value)
            except (Interrupted, Passivated):
                raise
            except NonDeterminismError as exc:
                return ENDED, ("diverge", exc)
            except (trio.Cancelled, GeneratorExit, KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # noqa: BLE001 - any process error is recorded
                return ENDED, ("fail", exc)
            send = throw = None
            if self.fresh is not None:  # (no local: `forgotten` counts references)
                if self.fresh is effect:  # made, then awaited at once: the usual case
                    self.fresh = None
                else:
                    ending = getattr(effect, "ends_run", False)  # (anything may be awaited)
                    throw = self.forgotten(effect, ending)
                    if throw is not None:
                        continue
            if not isinstance(effect, Effect):
                throw = ContextError(
                    f"process {self.address!r} awaited {effect!r}, which is not a ctx "
                    "effect; process code may only await ctx effects (use ctx.step for "
                    "I/O, ctx.sleep for time, ctx.first/all/settled for concurrency)"
                )
                continue
            if effect.ends_run:
                coro.close()
                return CONTINUED, effect
            if effect.done or effect.parent is not None:
                throw = fx._reused(effect)
                continue
            # A wake's hot path: a lone effect whose value the log holds,
            # answered here as `replay` answers it (a composite, numbered
            # -1, has no entry; anything else goes through `replay`).
            entry = self.log.get(effect.seq)
            if (
                entry is not None
                and entry.value is not NO_VALUE
                and entry.kind == effect.kind
                and entry.name == effect.name
                and entry.hash == effect.hash
                and not effect.makes_child
            ):
                effect.done = True
                send = effect.value = effect.replayed(entry.value, entry, self)
                replayed += 1
                if replayed % 2000 == 0:  # a long replay still lets others run
                    return YIELD, effect
                continue
            try:
                started = self.replay(effect)
                if started or not effect.done:  # else replay left nothing to begin
                    self.rerun = False  # where the earlier activation stopped
                    host.begin(effect, started)
            except NonDeterminismError as exc:
                return ENDED, ("diverge", exc)
            if not effect.done:
                return WAIT, effect
            replayed += 1
            if replayed % 2000 == 0:  # a long replay still lets others run
                return YIELD, effect
            if effect.error is not None:
                throw = effect.error
            else:
                send = effect.value

    async def run(
        self,
        coro: Coroutine[Any, Any, Any],
        host: Host,
        pending: tuple[int, Any] | None = None,
    ) -> None:
        """Step ``coro`` until it ends or ``host`` stops it; ``coro`` is closed
        after, unless the host parks it (`Parked`: its host keeps it, and
        resumes it with ``pending``, the `advance` it stopped at).

        Raises `Interrupted`, `Passivated` or `Parked` (from the host) through.
        """
        if pending is None:
            self.fresh = None
        kept = False
        try:
            send: Any = None
            throw: BaseException | None = None
            while True:
                if pending is None:
                    kind, what = self.advance(coro, host, send, throw)
                else:
                    (kind, what), pending = pending, None
                if kind == WAIT:
                    if not await host.wait_for(what):
                        return
                elif kind == YIELD:
                    await trio.lowlevel.checkpoint()
                elif kind == RAISE:
                    raise what
                elif kind == CONTINUED:
                    following = await host.ends.continue_as_new(what)
                    if following is None:
                        return
                    coro = following
                    send = throw = None
                    continue
                else:
                    method, argument = what
                    await getattr(host.ends, method)(argument)
                    return
                send, throw = outcome_of(what)
        except Parked as parked:
            kept = True
            parked.coro = coro
            raise
        finally:
            if not kept:
                coro.close()

    async def check(self, coro: Coroutine[Any, Any, Any]) -> NonDeterminismError | None:
        """Replay ``coro`` through the recorded history, running nothing.

        Returns the first mismatch, or None if the code makes the effects
        the log holds, in its order, as far as the history goes."""
        checker = _Checker(self)
        await self.run(coro, checker)
        return checker.problem


class _Checker:
    """The host of a replay check: runs nothing, stops where the history ends."""

    __slots__ = ("driver", "interrupt", "problem")

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.interrupt: Interrupt | None = None
        self.problem: NonDeterminismError | None = None

    def begin(self, effect: Effect[Any], started: dict[Effect[Any], LogEntry]) -> None:
        pass

    async def wait_for(self, effect: Effect[Any]) -> bool:
        return False  # the history ends here: the rest would run live

    @property
    def ends(self) -> _Checker:
        return self  # it ends as it checks

    async def complete(self, value: Any) -> None:
        self._consumed()

    async def fail(self, exc: BaseException) -> None:
        self._consumed()  # the process failed as recorded

    async def diverge(self, exc: NonDeterminismError) -> None:
        self.problem = exc

    async def continue_as_new(self, effect: fx.ContinueAsNew) -> None:
        return None  # the next run has a log of its own

    def _consumed(self) -> None:
        try:
            self.driver.check_consumed()
        except NonDeterminismError as exc:
            self.problem = exc


def _refcounts(objects: Sequence[object]) -> list[int]:
    return [sys.getrefcount(each) for each in objects]


# What `_refcounts` gives for an object only its list refers to: measured
# through the same code, so it holds for any interpreter that counts references.
_ALONE = _refcounts([object()])[0]


def _settle_tree(effect: fx.Composite[Any]) -> bool:
    for child in effect.children:
        if isinstance(child, fx.Composite) and not child.done:
            _settle_tree(child)
    return effect.settle_from_children()
