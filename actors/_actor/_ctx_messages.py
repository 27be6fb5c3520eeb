"""`MessageEffects`: the effects of ``ctx`` that wait for messages, ask,
reply, send and signal, and the durable timers (an ask's timeout is one)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, cast

from storage import decode, digest, encode
from storage._codec import hash_encoded  # (`digest`'s hash: see there)

from .._features import _sends, _signals
from .._features._ask_forms import Ask, Reply, ask_id_of
from .._kernel import _effects as fx
from .._kernel._checks import check_deadline, check_name, check_seconds
from .._kernel._values import Signal
from ..errors import AskTimeout, InvalidArguments
from ._ctx_core import ContextCore, check_signals

__all__ = ["MessageEffects"]


class MessageEffects(ContextCore):
    """``ctx.wait``, ``receive``, ``reply``, ``ask``, ``send``, ``send_many``,
    ``signal``, ``sleep`` and ``sleep_until`` (see `Context`)."""

    __slots__ = ()

    # -- waiting ------------------------------------------------------------------

    def wait(self, signal: Signal) -> fx.Wait[Any]:
        """An effect that gives the payload of the oldest message of ``signal``.

        Messages that arrived earlier and match are taken first; others stay
        in the mailbox."""
        if type(signal) is not Signal:  # (a subclass goes the long way too)
            check_signals((signal,))
        actor = self._actor
        if actor.done:
            self._live()  # raises
        effect: fx.Wait[Any] = fx.Wait(actor.driver.next_seq(), (signal,), False)
        return self._made(effect)  # pair=False: the payload

    def receive(self, *signals: Signal) -> fx.Wait[tuple[Signal, Any]]:
        """An effect that gives the oldest message of any of ``signals`` as
        ``(signal, payload)``. As `wait`, await it alone or race it::

            which, got = await ctx.first(msg=ctx.receive(paid, status),
                                         late=ctx.sleep(3600))
            if which == "msg":
                signal, payload = got

        Logged as `wait` logs (the signal taken with the payload), so
        replay gives the same pair.
        """
        if not signals:
            raise InvalidArguments("ctx.receive needs at least one Signal")
        for signal in signals:
            if type(signal) is not Signal:  # (a subclass goes the long way too, as in wait)
                check_signals(signals)
                break
        actor = self._actor
        if actor.done:
            self._live()  # raises
        effect: fx.Wait[tuple[Signal, Any]]
        effect = fx.Wait(actor.driver.next_seq(), signals, True)  # pair=True
        return self._made(effect)

    # -- request and reply ------------------------------------------------------------

    def reply(self, value: Any = None) -> Reply:
        """An effect that answers the message this process took most recently
        (by ``receive``/``wait``) with ``value``, if it was asked
        (`ActorSystem.ask`, ``ctx.ask``); for a message that was sent, not
        asked (or was answered already), a recorded no-op. So one process
        serves both.

        Recorded in this process's log in one commit with the answer's
        delivery: a restart before it replays the take and replies once; a
        restart after it never replies again.

        Raises:
            EncodeError: (at the call) a value the codec cannot store.
        """
        actor = self._actor
        if actor.done:
            self._live()  # raises
        driver = actor.driver
        ask = driver.taken  # (the asker's stored form, the message's extra)
        if ask is not None and not driver.settle(ask):
            ask = None  # answered already: the first reply stands
        encoded = encode(value, what="reply")
        arg_hash = hash_encoded(encoded).digest()  # (`digest`, from the one encoding)
        # An answer goes out as a copy decoded from what was hashed, never
        # the process's own object: the asker cannot alias it, and a replay
        # (which has only the hash) cannot tell them apart. (Made here, from
        # the one encoding, rather than encoded again as it is handed over.)
        payload = value if ask is None else decode(encoded)
        return self._made(Reply(driver.next_seq(), arg_hash, payload, ask))

    def ask(
        self, address: str, signal: Signal, payload: Any = None, *, timeout: float | None = None
    ) -> fx.Effect[Any]:
        """An effect that sends ``signal`` to the instance at ``address`` as
        an ask and gives the value its process replies with (``ctx.reply``);
        durable: the send and the reply are recorded in this process's log,
        so a restart neither sends it twice nor loses the reply. Await it
        alone, or pass it to `first`/`all`/`settled`.

        Raises:
            NotDelivered: (when awaited) no live instance at ``address``, or
                it ended without replying.
            AskTimeout: (when awaited) no reply within ``timeout`` seconds
                (a durable timer).
            EncodeError: (at the call) a payload the codec cannot store.
        """
        actor = self._live()
        if not isinstance(signal, Signal):
            raise InvalidArguments(f"ctx.ask takes an actors.Signal, not {signal!r}")
        check_name(address, "ctx.ask's address")
        if timeout is not None:
            timeout = check_seconds(timeout, "ctx.ask(timeout=...)")
        seq = actor.driver.next_seq()
        ask_id = ask_id_of(actor.address, actor.record.incarnation, actor.run, seq)
        arg_hash = digest([address, signal.name, payload], what=f"payload of ask {signal.name!r}")
        effect = Ask(seq, arg_hash, address, signal, payload, ask_id)
        if timeout is None:
            return self._made(effect)
        within = timeout

        def reply_or_timeout(outcome: tuple[str, Any]) -> Any:
            which, value = outcome
            if which == "timeout":
                raise AskTimeout(
                    f"no reply from {address!r} to {signal.name!r} within {within} s; a "
                    "late reply is dropped; ask again or raise timeout=",
                    address=address,
                    timeout=within,
                )
            return value

        race = self._made(
            fx.First([effect, self.sleep(timeout)], ["reply", "timeout"]), composite=True
        )
        shown = f"ctx.ask({address!r}, {signal.name}, timeout={timeout!r})"
        return self._made(fx.Then(race, reply_or_timeout, shown), composite=True)

    def send(
        self, address: str, signal: Signal, payload: Any = None, *, key: str | None = None
    ) -> fx.Send:
        """Send ``signal`` with ``payload`` to the mailbox of the instance at
        ``address`` (this one's own included), durably and once.

        The message is written in one commit with this effect's log entry
        (and what the process did before it): a restart neither sends it
        twice nor loses it. Returning means "stored", not "processed"; the
        receiver gets the payload as encoded, never this object. Messages
        from one process to one address arrive in the order sent. A send
        runs where it is awaited, never in a race (`send_many` sends
        several in one commit).

        Args:
            key: as for `ActorSystem.send`: a key the receiving incarnation
                has had already stores nothing and the send returns normally.

        Raises:
            NotDelivered: no instance at ``address`` takes mail (there is
                none, or it finished, was cancelled or is parked; a queued
                one takes it); nothing is stored. Recorded: a replay raises
                it again and sends nothing.
            EncodeError: (at the call) a payload the codec cannot store,
                naming the path inside it; nothing is stored.
            LimitExceeded: (at the call) a payload over ``max_payload``, or a
                key over 200 bytes of UTF-8.
            InvalidArguments: (at the call) not a Signal, or an address or
                key that is not a non-empty name without control characters.
        """
        return self._made(_sends.new_send(self._live(), address, signal, payload, key))

    def send_many(self, messages: Iterable[tuple[str, Signal, Any]]) -> Awaitable[None]:
        """Send many messages, ``(address, signal, payload)`` each, in one
        commit with this effect's log entry: all of them are stored, or none.

        As `send`, without keys; messages to one address keep their order.
        No messages: nothing is sent or recorded.

        Raises:
            NotDelivered: an address takes no mail (it names the first
                such, in the batch's order); nothing is stored.
                Recorded, as for `send`.
            EncodeError, LimitExceeded: (at the call) a payload the codec
                cannot store (a note names its position); nothing is stored.
            InvalidArguments: (at the call) an item that is not
                ``(address, Signal, payload)``.
        """
        effect = _sends.new_send_many(self._live(), messages)
        if effect is None:  # (no messages: nothing to send or record)
            return _nothing()
        return self._made(effect)

    def signal(
        self,
        signal: Signal,
        identity: Mapping[str, str],
        payload: Any = None,
        *,
        key: str | None = None,
    ) -> Awaitable[int]:
        """Signal every instance that listens to ``signal`` and has
        ``identity``, as `ActorSystem.signal` does, durably and once.

        The messages are written in one commit with this effect's log
        entry, which records how many instances they reached: a replay
        gives that count and signals nothing again. Like a send, it takes
        effect where it is awaited, never in a race.

        Returns:
            How many instances it reached (0 when none: nothing is stored).

        Raises:
            InvalidArguments, EncodeError, LimitExceeded: (at the call) as
                for `ActorSystem.signal`; nothing is stored.
        """
        effect = self._made(_signals.new_signal(self._live(), signal, identity, payload, key))
        # (A kind of send, which gives None; this one gives its count.)
        return cast("Awaitable[int]", effect)

    # -- timers -------------------------------------------------------------------

    def sleep(self, seconds: float) -> fx.Timer:
        """A durable timer effect, done ``seconds`` from when it starts.

        Raises:
            InvalidArguments: (at the call) ``seconds`` is not a finite
                number from 0 to `MAX_SECONDS` (1,000 years).
        """
        seconds = check_seconds(seconds, "ctx.sleep")
        return self._made(fx.Timer(self._live().driver.next_seq(), digest(seconds), seconds, None))

    def sleep_until(self, when: _dt.datetime) -> fx.Timer:
        """A durable timer effect, done at ``when`` (an aware datetime; one
        in the past is done at once).

        Raises:
            InvalidArguments: (at the call) ``when`` is not a timezone-aware
                datetime with a point in time.
        """
        until = check_deadline(when, "ctx.sleep_until")
        return self._made(fx.Timer(self._live().driver.next_seq(), digest(until), None, until))


async def _nothing() -> None:
    """What ``ctx.send_many([])`` awaits: nothing is sent or recorded."""
