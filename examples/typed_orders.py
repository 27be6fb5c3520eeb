"""Typed orders: a program that `mypy --strict` checks against the library's types.

An order asks a child process for a quote (``ctx.call``: its result is the
child's return type), reserves stock in an async step and prices the lines
in a sync one (``await ctx.step(fn, ...)`` is what ``fn`` returns), and
returns a `Receipt`, a ``@serializable`` attrs class: ``system.start`` gives
a ``Handle[Receipt]``, so ``await handle.result()`` is a ``Receipt``.

The type checker sees the process function's signature through
``@process``: ``system.start(order, "o-1", sku="book", qty="3")`` is an
error (``qty`` takes an int), and so is ``name: int = await handle.result()``.
CI runs ``python -m mypy`` over this file with the packages.

Run:  python examples/typed_orders.py [JOURNAL_DIR]
"""

from __future__ import annotations

import argparse
import tempfile

import attrs
import trio

import actors
from actors import Context, Handle, process, serializable
from storage import LMDBJournal

PRICES = {"book": 1250, "lamp": 3999}  # cents


@serializable
@attrs.frozen
class Receipt:
    order_id: str
    lines: list[str]
    total_cents: int
    reservation: str


def price_lines(sku: str, qty: int, unit_cents: int) -> list[str]:
    """A sync step: runs in a worker thread, its result recorded once."""
    return [f"{qty} x {sku} at {unit_cents / 100:.2f}"]


async def reserve_stock(sku: str, qty: int) -> str:
    """An async step: awaited in the trio run, its result recorded once."""
    await trio.lowlevel.checkpoint()
    return f"reservation-{sku}-{qty}"


@process("quotes/:sku")
async def quote(ctx: Context, sku: str) -> int:
    """A child process: the unit price of ``sku``, in cents."""
    return PRICES[sku]


@process("orders/:order_id")
async def order(ctx: Context, order_id: str, *, sku: str, qty: int) -> Receipt:
    unit_cents: int = await ctx.call(quote, sku)  # the child's result type
    lines: list[str] = await ctx.step(price_lines, sku, qty, unit_cents)
    reservation: str = await ctx.step(reserve_stock, sku, qty)
    return Receipt(order_id, lines, unit_cents * qty, reservation)


async def main(path: str) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[order, quote]) as system:
        handle: Handle[Receipt] = await system.start(order, "o-1", sku="book", qty=3)
        receipt = await handle.result()  # a Receipt, for the type checker too
        print(f"{handle.id}: {handle.status}")
        for line in receipt.lines:
            print(f"  {line}")
        print(f"  total {receipt.total_cents / 100:.2f}, {receipt.reservation}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "journal",
        nargs="?",
        help="a journal directory (default: a temporary one, removed at the end)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        trio.run(main, args.journal or scratch)
