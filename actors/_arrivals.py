"""What reaches a live instance from outside: messages its senders
committed, timers that fell due, and requests to stop (cancel, restart,
escalation, a damaged record found elsewhere).

`Arrivals` is a base of `Actor` (see `_instance`), as `Ends` is: a message
or a due timer completes the wait or sleep it answers (taking the message,
logging the outcome, both riding on the next commit) and wakes the driver;
a request to stop is noted as the actor's ``interrupt`` for the driver to
act on at its next suspension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from . import _effects as fx, _events, _tracing
from ._driver import Interrupt
from ._log import LogEntry
from ._records import Signal
from ._supervision import CANCEL, ESCALATE, RESTART

if TYPE_CHECKING:
    from storage import Txn
    from storage.errors import JournalCorrupt

    from ._interfaces import ActorAPI as _ActorAPI
    from ._mailbox import Mailbox
    from ._messages import StoredMessage
else:
    _ActorAPI = object  # for type checkers only: what Actor provides

__all__ = ["Arrivals"]


class Arrivals(_ActorAPI):
    """Messages, due timers and stop requests arriving at `Actor` (which
    holds all the state)."""

    __slots__ = ()

    if TYPE_CHECKING:  # the rest of Actor that arrivals use
        txn: Txn
        mailbox: Mailbox
        timers: dict[int, fx.Timer]
        live: set[fx.Effect[Any]]
        loaded: bool
        interrupt: Interrupt | None
        root: fx.Effect[Any] | None

    def deliver(self, seq: int, message: StoredMessage) -> None:
        """Message ``seq`` was committed to this instance's mailbox."""
        name, payload = message.signal, message.payload
        if self.done or not self.mailbox.put(seq, name, payload):
            return
        if message.asker is not None:
            self.mailbox.remember_ask(seq, message.asker)
        if message.trace is not None:
            _tracing.delivered(self, seq, name, message.trace)
        if self.system.log_debug:
            _events.delivered(self.address, seq, name)
        self._receive_system(seq, name, payload)
        if self.loaded:
            self._match_mail()
        self.wakeup()

    def _receive_system(self, seq: int, name: str, payload: Any) -> None:
        if name == ESCALATE.name and self.interrupt is None:
            self.interrupt = Interrupt("escalate", payload, message=seq)
            self._act_on_request()
        elif name == CANCEL.name:
            self.txn.take_message(self.iid, seq)
            self.cancel(payload["reason"], compensate=bool(payload.get("compensate")))
        elif name == RESTART.name:
            self.txn.take_message(self.iid, seq)
            self.restart(payload["reason"])

    def cancel(self, reason: str, *, compensate: bool = False) -> None:
        """Ask the driver to cancel the instance at its next suspension;
        with ``compensate``, running its saga compensations first."""
        interrupt = self.interrupt
        if interrupt is None or interrupt.kind != "cancel":
            self.interrupt = Interrupt("cancel", reason, compensate)
        elif compensate and not interrupt.compensate:
            # The first reason stays; compensating is asked.
            self.interrupt = attrs.evolve(interrupt, compensate=True)
        self._act_on_request()

    def corrupted(self, exc: JournalCorrupt) -> None:
        """Stop the instance at its next suspension and mark it corrupt: a
        record of it was found damaged elsewhere (see `Corruption.records_damaged`).
        Over any other request: a corrupt instance does nothing more."""
        self.interrupt = Interrupt("corrupt", exc)
        self._act_on_request()

    def restart(self, reason: str) -> None:
        """Ask the driver to restart the instance afresh (a sibling crashed)."""
        if self.interrupt is None:
            self.interrupt = Interrupt("restart", reason)
        self._act_on_request()

    def _act_on_request(self) -> None:
        """Wake the driver to act on ``interrupt``. A step awaited alone runs
        in the actor's own task (see wait_for), so the driver cannot abandon
        it at the request, as it does a step in a task of its own: it is
        cancelled here (it stays live, unfinished, for `_interrupted`)."""
        root = self.root
        if type(root) is fx.Step and root.scope is not None:
            root.scope.cancel()
        self.wakeup()

    def add_wait(self, wait: fx.Wait[Any]) -> None:
        """Register a live wait and give it a message if one is already here."""
        self.mailbox.add_wait(wait)
        self._match_mail()

    def remove_wait(self, wait: fx.Wait[Any]) -> None:
        """Drop a live wait that will take nothing (it lost a race)."""
        self.mailbox.remove_wait(wait)

    def _match_mail(self) -> None:
        mailbox = self.mailbox
        while mailbox.messages and mailbox.waits:
            found = mailbox.take_match(self.live)
            if found is None:
                return
            wait, signal, mseq, payload = found
            # Taking rides on the next commit, with the wait's log entry:
            # the message leaves the mailbox as it enters the log.
            self.txn.take_message(self.iid, mseq)
            wait.behaviour.take(self, wait, signal, mseq, payload)

    def _took(self, wait: fx.Wait[Any], signal: Signal, mseq: int, payload: Any) -> None:
        """A wait (``ctx.wait``, ``ctx.receive``) took message ``mseq``."""
        mailbox = self.mailbox
        asker = mailbox.asks.pop(mseq, None) if mailbox.asks else None
        entry = wait.describe(
            value=payload,
            message=mseq,
            signal=signal.name if wait.pair else None,
            ask=None if asker is None else asker.to_stored(),
        )
        self.driver.took(wait.seq, asker)
        self.finish(wait, (signal, payload) if wait.pair else payload, None, entry)

    def _stop_timer(self, timer: fx.Timer) -> None:
        """A live timer that lost a race: it never fires, and its durable
        timer goes with the next commit."""
        self.timers.pop(timer.seq, None)
        self.txn.cancel_timer(self.iid, self.run, timer.seq)

    def _start_timer(self, timer: fx.Timer, entry: LogEntry | None) -> None:
        if entry is not None:
            due = entry.due
            assert due is not None  # a sleep entry without one reads as corrupt (_shapes)
        else:
            due = (
                timer.until
                if timer.until is not None
                else self.system.epoch_now() + (timer.delay or 0.0)
            )
            started = timer.describe(due=due)
            self.txn.put_log(self.iid, self.run, timer.seq, started.to_stored())
            self.txn.add_timer(self.iid, self.run, timer.seq, due)
        timer.due = due
        self.timers[timer.seq] = timer
        if due <= self.system.epoch_now():
            self._fire(timer)
        else:
            self.system.timers.schedule(due, self.iid)

    def timers_due(self, now: float) -> None:
        """Fire every live timer due at epoch ``now`` (called by the timer service)."""
        for timer in [t for t in self.timers.values() if t.due is not None and t.due <= now]:
            self._fire(timer)

    def _fire(self, timer: fx.Timer) -> None:
        self.timers.pop(timer.seq, None)
        self.txn.cancel_timer(self.iid, self.run, timer.seq)
        entry = timer.describe(value=None, due=timer.due)
        self.finish(timer, None, None, entry)


@fx.runs_live(fx.Wait)
class _Waits(fx.Behaviour):
    @staticmethod
    def start(actor: Arrivals, wait: fx.Wait[Any], started: LogEntry | None) -> None:
        actor.add_wait(wait)

    @staticmethod
    def abandon(actor: Arrivals, wait: fx.Wait[Any]) -> None:
        actor.remove_wait(wait)  # it takes nothing

    @staticmethod
    def take(actor: Arrivals, wait: fx.Wait[Any], signal: Signal, seq: int, payload: Any) -> None:
        actor._took(wait, signal, seq, payload)


@fx.runs_live(fx.Timer)
class _Timers(fx.Behaviour):
    @staticmethod
    def start(actor: Arrivals, timer: fx.Timer, started: LogEntry | None) -> None:
        actor._start_timer(timer, started)

    @staticmethod
    def abandon(actor: Arrivals, timer: fx.Timer) -> None:
        actor._stop_timer(timer)

    @staticmethod
    def drop(actor: Arrivals, timer: fx.Timer) -> None:
        actor.txn.cancel_timer(actor.iid, actor.run, timer.seq)
