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
  or continues as new fails it there (see `Unawaited`).

What ran before. An activation that loads a run which ran before re-runs
code an earlier activation already ran, up to the first effect replay
cannot answer: that is where the earlier one stopped (it awaited that
effect; whatever it did that anyone could see is in the log). Past the log's
last entry this stretch is still history, though the log holds nothing of
it: a pending `wait` writes nothing until it takes a message, so a run
suspended at its first wait has an empty log. `ctx.patched` decides from
it (see `Driver.patched`).

Extras (`_mailbox`: a stored list, its first element identifies it): the
driver keeps the latest wait's (`taken`) and those not settled (`owed`).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import trio

from ..errors import ContextError, NonDeterminismError
from . import _effects as fx, _guard
from ._divergence import mismatch, unconsumed, unwritten
from ._effects import Effect
from ._failures import ErrorRecord
from ._hosts import (
    CONTINUED,
    ENDED,
    RAISE,
    WAIT,
    YIELD,
    Host,
    Interrupted,
    Owner,
    Parked,
    Passivated,
)
from ._log import NO_VALUE, LogEntry
from ._replay_check import Checker
from ._unawaited import Unawaited

__all__ = ["Driver", "error_from_entry"]


def error_from_entry(entry: LogEntry) -> BaseException:
    """Rebuild the exception a logged failure raised in the process."""
    assert entry.error is not None
    return ErrorRecord.from_stored(entry.error).exception()


_NO_LOG: dict[int, LogEntry] = {}  # the log of a run that has none (shared, never written)
_BURST = 2000  # logged effects answered in a row (here or in `Effect.__await__`) at most


class Driver(Unawaited):
    """The log of an instance's current run and the position in it."""

    __slots__ = (
        "address",
        "burst",
        "last",
        "log",
        "occurrences",
        "owed",
        "owner",
        "patches",
        "rerun",
        "seq",
        "taken",
        "taken_seq",
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
        self.fresh = None  # (see Unawaited)
        self.burst = 0  # logged effects `advance` may still answer in a row (_BURST)
        self._reset_run_state()

    def _reset_run_state(self) -> None:
        # The extra (None: none) the highest-numbered wait of this run that took a
        # message took: by effect numbers, not arrival, so replay decides the same.
        self.taken: list[Any] | None = None
        self.taken_seq = 0
        # Extras taken, not settled; patch id -> what ctx.patched said (made when needed).
        self.owed: dict[Any, list[Any]] | None = None
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

    def took(self, seq: int, extra: list[Any] | None) -> None:
        """Wait ``seq`` took a message with ``extra`` (None: it had none)."""
        if seq >= self.taken_seq:
            self.taken, self.taken_seq = extra, seq
        if extra is not None:
            if self.owed is None:
                self.owed = {}
            self.owed[extra[0]] = extra

    def settle(self, extra: list[Any]) -> bool:
        """Note that ``extra`` is being settled; False if it was already."""
        return self.owed is not None and self.owed.pop(extra[0], None) is not None

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
            raise mismatch(self.address, effect, entry)
        return entry

    def unwritten(self, effect: Effect[Any], entry: LogEntry) -> NonDeterminismError:
        """The error of a started record at ``effect``'s position, of a kind
        that logs its outcome only (`Effect.logs_start` False)."""
        return unwritten(self.address, effect, entry)

    def replay(self, effect: Effect[Any]) -> dict[Effect[Any], LogEntry]:
        """Give every leaf of ``effect`` its logged outcome, if it has one.

        Returns the leaves that have only a "started" record. Raises
        `NonDeterminismError` for a leaf that does not match its log entry.
        """
        # (`logged`, inlined; a live effect, past the log, has nothing to look up.)
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
                raise mismatch(self.address, leaf, entry)
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
        log = self.log  # (most logs end at seq: then `unconsumed` is not called)
        error = unconsumed(self.address, log, self.seq) if log and max(log) > self.seq else None
        if error is not None:
            raise error

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
        self.burst = _BURST
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
                    effect = coro.throw(throw) if throw is not None else coro.send(send)
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
            # A lone effect whose value the log holds, answered as `replay`
            # would (`Effect.__await__` answers most such before they get here).
            entry = self.log.get(effect.seq)
            if effect.answered_by(entry):
                effect.done = True
                send = effect.value = effect.replayed(entry.value, entry, self)
                self.burst -= 1
                if self.burst > 0:
                    continue
                return YIELD, effect  # a long replay still lets others run
            try:
                # (None past the log, the live ones; a composite is numbered -1.)
                started = self.replay(effect) if effect.seq <= self.last else {}
                if started or not effect.done:  # else replay left nothing to begin
                    self.rerun = False  # where the earlier activation stopped
                    host.begin(effect, started)
            except NonDeterminismError as exc:
                return ENDED, ("diverge", exc)
            if not effect.done:
                return WAIT, effect
            self.burst -= 1
            if self.burst <= 0:  # a long replay still lets others run
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
                throw = what.error  # (`outcome_of`, written out: every effect waited for)
                send = what.value if throw is None else None
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
        checker = Checker(self.check_consumed)
        await self.run(coro, checker)
        return checker.problem


def _settle_tree(effect: fx.Composite[Any]) -> bool:
    for child in effect.children:
        if isinstance(child, fx.Composite) and not child.done:
            _settle_tree(child)
    return effect.settle_from_children()
