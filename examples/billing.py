"""Subscription billing: a trial, monthly charges, dunning, upgrades as sagas.

Each customer's subscription is one long-lived process. It waits out a
14-day trial (a durable timer raced against a ``cancel`` signal), then
charges the card every 30 days as a step: the bank (a SQLite file standing
in for a payment API) deduplicates on the step's idempotency key. A declined
card starts dunning: the process sends an email through a notifier actor
(``ctx.send``) and waits a week for a ``new_card`` signal before trying
again, three times. During a month, ``cancel`` and ``upgrade`` messages race
the renewal timer. An upgrade is a child saga: charge the difference
(``compensate=refund``), then provision the new plan; if provisioning fails,
the difference is refunded. Half-way through, the system is closed and the
journal opened again: every subscription carries on from its log, and no
card is charged twice.

Time is trio's MockClock, so 100 days pass in well under a second.

Run:  python examples/billing.py [JOURNAL_DIR]   (a temporary one by default)
"""

import argparse
import contextlib
import datetime
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import trio.testing

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

DAY = 86400
PRICES = {"basic": 10, "pro": 30, "enterprise": 100}
DECLINED = "4000-0002"  # the bank declines this card
email, cancel, upgrade, new_card = map(Signal, ["email", "cancel", "upgrade", "new_card"])


def bank(path: str, sql: str, *args: object) -> list[Any]:
    """One statement on the bank's ledger: charges(key PRIMARY KEY, customer, amount, calls, refunded)."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        return db.execute(sql, args).fetchall()


def charge_card(ledger: str, customer: str, card: str, amount: int) -> str:
    key = actors.current_step().key  # the same on every attempt, and after a restart
    if card == DECLINED:
        raise RuntimeError(f"card {card} declined")
    bank(ledger, "INSERT INTO charges VALUES (?, ?, ?, 1, 0) "
         "ON CONFLICT(key) DO UPDATE SET calls = calls + 1", key, customer, amount)  # fmt: skip
    print(f"  bank: charged {customer} {amount}")
    return key


def refund(ledger: str, customer: str, card: str, amount: int) -> None:
    charge = actors.current_step().forward_result  # the key charge_card returned
    bank(ledger, "UPDATE charges SET refunded = 1 WHERE key = ?", charge)


def provision(customer: str, plan: str) -> None:
    if plan == "enterprise":
        raise RuntimeError("no enterprise seats left")


def send_email(to: str, text: str) -> None:
    print(f"  email to {to}: {text}")


@process("notifier/:name")
async def notifier(ctx: Context, name: str) -> None:
    """Sends each email it receives, as a step: a restart never sends one twice."""
    while True:
        _, mail = await ctx.receive(email)
        await ctx.step(send_email, mail["to"], mail["text"])


@process("upgrade/:plan")
async def change_plan(ctx: Context, plan: str, *, ledger: str, customer: str, card: str,
                      amount: int) -> str:  # fmt: skip
    """A saga: if provisioning fails, the process fails and the charge is refunded."""
    await ctx.step(charge_card, ledger, customer, card, amount, compensate=refund)
    await ctx.step(provision, customer, plan)
    return plan


@process("subscriptions/:customer")
async def subscription(ctx: Context, customer: str, *, ledger: str, card: str, plan: str,
                       months: int) -> str:  # fmt: skip
    async def tell(text: str) -> None:
        await ctx.send("notifier/mail", email, {"to": customer, "text": text})

    which, _ = await ctx.first(cancelled=ctx.wait(cancel), trial_over=ctx.sleep(14 * DAY))
    if which == "cancelled":
        await tell("cancelled during the trial; you were not charged")
        return "cancelled during the trial"
    for month in range(1, months + 1):
        for _notice in range(3):  # dunning: three tries, a week apart
            try:
                await ctx.step(charge_card, ledger, customer, card, PRICES[plan], name="charge")
                break
            except actors.StepFailed:
                await tell(f"your card was declined for month {month}; please send a new one")
                which, got = await ctx.first(card=ctx.wait(new_card), later=ctx.sleep(7 * DAY))
                card = got["card"] if which == "card" else card
        else:
            await tell("three declines: your subscription is suspended")
            return f"suspended in month {month}"
        renewal = ctx.now() + datetime.timedelta(days=30)
        while True:  # the month: cancel and upgrade race the renewal
            which, got = await ctx.first(msg=ctx.receive(cancel, upgrade),
                                         renew=ctx.sleep_until(renewal))  # fmt: skip
            if which == "renew":
                break
            signal, payload = got
            if signal == cancel:
                await tell(f"cancelled; {plan} runs to the end of month {month}")
                return f"cancelled in month {month} on {plan}"
            try:
                difference = PRICES[payload["plan"]] - PRICES[plan]
                plan = await ctx.call(change_plan, payload["plan"], ledger=ledger,
                                      customer=customer, card=card, amount=difference)  # fmt: skip
                await tell(f"you are on {plan} now")
            except actors.ChildFailed:
                await tell(f"the upgrade to {payload['plan']} failed; we refunded {difference}")
    return f"{months} months, ending on {plan}"


PROCESSES: list[actors.ProcessDef[..., Any]] = [notifier, change_plan, subscription]


async def at_day(day: int, t0: float) -> None:
    await trio.sleep_until(t0 + day * DAY)
    print(f"day {day}:")


async def main(directory: str) -> None:
    ledger, journal = str(Path(directory) / "bank.db"), str(Path(directory) / "journal")
    bank(ledger, "CREATE TABLE charges (key PRIMARY KEY, customer, amount, calls, refunded)")
    t0, wall0 = trio.current_time(), time.time()

    def now() -> float:  # the wall clock follows virtual time, so timers stay due across the reopen
        return wall0 + trio.current_time() - t0

    async with actors.open_system(LMDBJournal(journal), processes=PROCESSES, now=now) as system:
        await system.start(notifier, "mail")
        for who, card in [("ann", "4242-0001"), ("bob", DECLINED), ("cy", "4242-0003")]:
            await system.start(subscription, who, ledger=ledger, card=card, plan="basic", months=3)
        await at_day(3, t0)
        await system.send("subscriptions/cy", cancel)
        await at_day(16, t0)
        await system.send("subscriptions/bob", new_card, {"card": "4242-0002"})
        await at_day(20, t0)
        await system.send("subscriptions/ann", upgrade, {"plan": "pro"})
        await system.send("subscriptions/bob", upgrade, {"plan": "enterprise"})
        await at_day(30, t0)
    print("-- closed; the journal opened again --")
    async with actors.open_system(LMDBJournal(journal), processes=PROCESSES, now=now) as system:
        await at_day(50, t0)
        await system.send("subscriptions/bob", cancel)
        for who in ("ann", "bob", "cy"):
            handle = system.get(f"subscriptions/{who}")
            assert handle is not None  # started before the reopen, found in the journal
            print(f"{who}: {await handle.result()}")
        await at_day(110, t0)  # let the last emails go out
    for who, paid, refunded in bank(ledger, "SELECT customer, SUM(amount * (1 - refunded)), "
                                    "SUM(amount * refunded) FROM charges GROUP BY customer"):  # fmt: skip
        print(f"{who} paid {paid}, refunded {refunded}")
    twice = bank(ledger, "SELECT key FROM charges WHERE calls > 1")
    print(f"charges made twice: {twice or 'none'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("journal", nargs="?", help="a directory (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="billing-") as scratch:
        trio.run(main, args.journal or scratch, clock=trio.testing.MockClock(autojump_threshold=0))
