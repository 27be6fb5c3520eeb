"""An order saga: retried steps with compensations, and an approval that can time out.

Each order charges a card and reserves stock (both steps retry on a flaky
gateway), then races an ``approved`` signal against a durable timer. Order
o-1 is approved in time and completes; nobody approves o-2, so its timer
wins, the process fails, and the compensations run newest first: release
the stock, then refund the card.

Run:  python examples/order_saga.py [JOURNAL_DIR] [APPROVAL_TIMEOUT_SECONDS]
(a temporary journal and a 1 s timeout by default). Run it twice on one
journal directory and nothing runs again: `start` is idempotent, so the
finished orders are returned as they are.
"""

import argparse
import tempfile
from contextlib import aclosing

import trio

import actors
from actors import Context, Retry, Signal, process
from storage import LMDBJournal

approved = Signal("approved")
GATEWAY_RETRY = Retry(attempts=3, backoff=0.05, max_backoff=1)


class NotApproved(Exception):
    """Nobody approved the order in time."""


def charge_card(order_id: str, amount: int) -> str:
    step = actors.current_step()
    if step.attempt == 1:  # the gateway drops the first call of every charge
        print(f"  {order_id}: charge attempt 1 failed, retrying (key {step.key})")
        raise ConnectionError("payment gateway timed out")
    print(f"  {order_id}: charged {amount} on attempt {step.attempt}")
    return f"charge-{order_id}"


def refund(order_id: str, amount: int) -> None:
    charge = actors.current_step().forward_result  # what charge_card returned
    print(f"  {order_id}: compensating: refund {amount} of {charge}")


def reserve_stock(order_id: str, sku: str) -> str:
    print(f"  {order_id}: reserved one {sku}")
    return f"reservation-{order_id}"


def release_stock(order_id: str, sku: str) -> None:
    print(f"  {order_id}: compensating: release {actors.current_step().forward_result}")


@process("orders/:order_id")
async def order(ctx: Context, order_id: str, *, amount: int, sku: str, within: float) -> dict:
    charge = await ctx.step(charge_card, order_id, amount, retry=GATEWAY_RETRY, compensate=refund)
    await ctx.step(reserve_stock, order_id, sku, retry=GATEWAY_RETRY, compensate=release_stock)
    which, value = await ctx.first(ok=ctx.wait(approved), late=ctx.sleep(within))
    if which == "late":
        raise NotApproved(f"no approval within {within} s")
    return {"order": order_id, "charge": charge, "approved_by": value["by"]}


async def main(path: str, timeout: float) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[order]) as system:
        print("o-1: start, then approve while it waits")
        first = await system.start(order, "o-1", amount=100, sku="book", within=timeout)
        async with aclosing(first.status_changes()) as changes:
            async for status in changes:
                if status != "running":  # suspended on the race (or already finished)
                    break
        if first.status == "suspended":
            await system.send(first.id, approved, {"by": "ann"})
        print(f"o-1: completed: {await first.result()}")

        print(f"o-2: start, and let the {timeout} s approval window pass")
        second = await system.start(order, "o-2", amount=250, sku="lamp", within=timeout)
        try:
            await second.result()
        except actors.ProcessFailed as exc:
            print(f"o-2: {second.status}: {exc}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "journal",
        nargs="?",
        help="a journal directory (default: a temporary one, removed at the end)",
    )
    parser.add_argument(
        "approval_window",
        nargs="?",
        type=float,
        default=1.0,
        help="seconds an order waits for approval (default: 1.0)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="order-saga-") as scratch:
        trio.run(main, args.journal or scratch, args.approval_window)
