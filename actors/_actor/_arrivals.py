"""What reaches a live instance from outside: messages its senders
committed, timers that fell due, and requests to stop (cancel, restart,
escalation, a damaged record found elsewhere).

`Arrivals` is a part of `Actor` (``actor.arrivals``), as `Ends` and
`Writes` are: a message or a due timer completes the wait or sleep it
answers (taking the message, logging the outcome, both riding on the next
commit) and wakes the driver; a request to stop is noted as the actor's
``interrupt`` for the driver to act on at its next suspension. The part
keeps the instance's live timers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._features._supervision import CANCEL, ESCALATE, RESTART
from .._kernel import _effects as fx, _reports, _tracing
from .._kernel._hosts import Interrupt
from .._kernel._log import LogEntry
from .._kernel._mailbox import StoredMessage
from .._kernel._values import Signal

if TYPE_CHECKING:
    from storage.errors import JournalCorrupt

    from .._kernel._interfaces import ActorAPI

__all__ = ["Arrivals", "TimerBehaviour", "WaitBehaviour"]


class Arrivals:
    """Messages, due timers and stop requests arriving at an `Actor`: a
    part of it (see the module docstring)."""

    __slots__ = ("actor", "timers")

    def __init__(self, actor: ActorAPI) -> None:
        self.actor = actor
        # live timers, by seq; made at the first (most instances wait for
        # messages, and there is one per live instance)
        self.timers: dict[int, fx.Timer] | None = None

    def deliver(self, seq: int, stored: Sequence[Any]) -> None:
        """Message ``seq`` was committed to this instance's mailbox;
        ``stored`` is its stored form, as decoded (`StoredMessage.unpacked`)."""
        actor = self.actor
        name, payload, _, trace, extra = StoredMessage.unpacked(stored)
        if actor.done or not actor.mailbox.put(seq, name, payload):
            return
        if extra is not None:
            actor.mailbox.keep_extra(seq, extra)
        if trace is not None:
            _tracing.delivered(actor, seq, name, trace)
        if actor.system.log_debug:
            _reports.delivered(actor.address, seq, name)
        if name[:1] == "\x00":  # the runtime's own signals' names (`Signal._system`)
            self.receive_system(seq, name, payload)
        if actor.loaded:
            self.match_mail()
        # (Woken already, it waits for nothing more: an instance parks only
        # while not woken, and whatever wakes it unparks it.)
        if not actor.woken:
            actor.wakeup()

    def receive_system(self, seq: int, name: str, payload: Any) -> None:
        """Act on message ``seq`` if the runtime sent it (a stop request)."""
        actor = self.actor
        if name == ESCALATE.name and actor.interrupt is None:
            actor.interrupt = Interrupt("escalate", payload, message=seq)
            self._act_on_request()
        elif name == CANCEL.name:
            actor.writes.txn.take_message(actor.iid, seq)
            self.cancel(payload["reason"], compensate=bool(payload.get("compensate")))
        elif name == RESTART.name:
            actor.writes.txn.take_message(actor.iid, seq)
            self.restart(payload["reason"])

    def cancel(self, reason: str, *, compensate: bool = False) -> None:
        """Ask the driver to cancel the instance at its next suspension;
        with ``compensate``, running its saga compensations first."""
        actor = self.actor
        interrupt = actor.interrupt
        if interrupt is None or interrupt.kind != "cancel":
            actor.interrupt = Interrupt("cancel", reason, compensate)
        elif compensate and not interrupt.compensate:
            # The first reason stays; compensating is asked.
            actor.interrupt = attrs.evolve(interrupt, compensate=True)
        self._act_on_request()

    def corrupted(self, exc: JournalCorrupt) -> None:
        """Stop the instance at its next suspension and mark it corrupt: a
        record of it was found damaged elsewhere (see `Corruption.records_damaged`).
        Over any other request: a corrupt instance does nothing more."""
        self.actor.interrupt = Interrupt("corrupt", exc)
        self._act_on_request()

    def restart(self, reason: str) -> None:
        """Ask the driver to restart the instance afresh (a sibling crashed)."""
        if self.actor.interrupt is None:
            self.actor.interrupt = Interrupt("restart", reason)
        self._act_on_request()

    def park(self, error: BaseException, held: str) -> None:
        """Keep the instance stuck at its next suspension, ``held`` and with
        ``error`` as its ``last_error`` (a step's crash budget is spent: see
        `_steps`). Any other request comes first."""
        if self.actor.interrupt is None:
            self.actor.interrupt = Interrupt("park", (error, held))
        self._act_on_request()

    def _act_on_request(self) -> None:
        """Wake the driver to act on ``interrupt``. A step awaited alone runs
        in the actor's own task (see wait_for), so the driver cannot abandon
        it at the request, as it does a step in a task of its own: it is
        cancelled here (it stays live, unfinished, for `Ends.interrupted`)."""
        root = self.actor.root
        if root is not None:
            root.cancel_inline()
        self.actor.wakeup()

    def withhold(self, seq: int) -> tuple[str, Any] | None:
        """Hold message ``seq`` back from every take while a drop of it is
        written (`Mailbox.withhold`); it, if it was unread here."""
        return self.actor.mailbox.withhold(seq)

    def release(self, seq: int, message: tuple[str, Any] | None, *, dropped: bool) -> None:
        """The drop of message ``seq`` is over (`Mailbox.release`): not
        written, the message is unread again, and a wait may take it."""
        actor = self.actor
        actor.mailbox.release(seq, message, dropped=dropped)
        if not dropped and message is not None and actor.loaded and not actor.done:
            self.match_mail()
            actor.wakeup()

    def add_wait(self, wait: fx.Wait[Any]) -> None:
        """Register a live wait and give it a message if one is already here."""
        WaitBehaviour.start(self.actor, wait, None)

    def remove_wait(self, wait: fx.Wait[Any]) -> None:
        """Drop a live wait that will take nothing (it lost a race)."""
        self.actor.mailbox.remove_wait(wait)

    def match_mail(self) -> None:
        actor = self.actor
        mailbox = actor.mailbox
        while mailbox.messages and mailbox.waits:
            found = mailbox.take_match(actor.live)
            if found is None:
                return
            wait, signal, mseq, payload = found
            # Taking rides on the next commit, with the wait's log entry:
            # the message leaves the mailbox as it enters the log.
            actor.writes.txn.take_message(actor.iid, mseq)
            actor.system.wiring.behaviours[type(wait)].take(actor, wait, signal, mseq, payload)

    def stop_timer(self, timer: fx.Timer) -> None:
        """A live timer that lost a race: it never fires, and its durable
        timer goes with the next commit."""
        if self.timers is not None:
            self.timers.pop(timer.seq, None)
        self.drop_timer(timer)

    def drop_timer(self, timer: fx.Timer) -> None:
        """Its durable timer goes with the next commit."""
        actor = self.actor
        actor.writes.txn.cancel_timer(actor.iid, actor.run, timer.seq)

    def start_timer(self, timer: fx.Timer, entry: LogEntry | None) -> None:
        """Arm live timer ``timer`` (``entry``: its start, logged by an
        earlier activation; else it is logged now)."""
        actor = self.actor
        system = actor.system
        if entry is not None:
            due = entry.due
            assert due is not None  # a sleep entry without one reads as corrupt (_shapes)
        else:
            due = (
                timer.until
                if timer.until is not None
                else system.epoch_now() + (timer.delay or 0.0)
            )
            started = timer.describe(due=due)
            txn = actor.writes.txn
            txn.put_log(actor.iid, actor.run, timer.seq, started.to_stored())
            txn.add_timer(actor.iid, actor.run, timer.seq, due)
        timer.due = due
        timers = self.timers
        if timers is None:
            timers = self.timers = {}
        timers[timer.seq] = timer
        if due <= system.epoch_now():
            self._fire(timer)
        else:
            system.timers.schedule(due, actor.iid)

    def timers_due(self, now: float) -> None:
        """Fire every live timer due at epoch ``now`` (called by the timer service)."""
        timers = self.timers or {}
        for timer in [t for t in timers.values() if t.due is not None and t.due <= now]:
            self._fire(timer)

    def _fire(self, timer: fx.Timer) -> None:
        if self.timers is not None:
            self.timers.pop(timer.seq, None)
        self.drop_timer(timer)
        entry = timer.describe(value=None, due=timer.due)
        self.actor.finish(timer, None, None, entry)

    def take_timers(self) -> list[tuple[int, int]]:
        """(run, seq) of each live timer, which are live no more (the run ends)."""
        run = self.actor.run
        timers = [(run, seq) for seq in self.timers or ()]
        self.timers = None
        return timers


class WaitBehaviour(fx.Behaviour):
    @staticmethod
    def start(actor: ActorAPI, wait: fx.Wait[Any], started: LogEntry | None) -> None:
        """Register a live wait and give it a message if one is already here
        (`Arrivals.add_wait` for a wait begun otherwise)."""
        mailbox = actor.mailbox
        mailbox.add_wait(wait)
        if mailbox.messages:  # (else nothing is here to take: most waits)
            actor.arrivals.match_mail()

    @staticmethod
    def abandon(actor: ActorAPI, wait: fx.Wait[Any]) -> None:
        actor.arrivals.remove_wait(wait)  # it takes nothing

    @staticmethod
    def take(actor: ActorAPI, wait: fx.Wait[Any], signal: Signal, seq: int, payload: Any) -> None:
        """The wait (``ctx.wait``, ``ctx.receive``) took message ``seq``."""
        extras = actor.mailbox.extras
        extra = extras.pop(seq, None) if extras else None
        entry = wait.taking(payload, seq, signal, extra)
        actor.driver.took(wait.seq, extra)
        actor.finish(wait, (signal, payload) if wait.pair else payload, None, entry)


class TimerBehaviour(fx.Behaviour):
    @staticmethod
    def start(actor: ActorAPI, timer: fx.Timer, started: LogEntry | None) -> None:
        actor.arrivals.start_timer(timer, started)

    @staticmethod
    def abandon(actor: ActorAPI, timer: fx.Timer) -> None:
        actor.arrivals.stop_timer(timer)

    @staticmethod
    def drop(actor: ActorAPI, timer: fx.Timer) -> None:
        actor.arrivals.drop_timer(timer)
