"""300 orders failed after their charge: fix the code, fork them from after the charge.

A bug in the shipping step (a label the printer rejects) fails every order
after its card was charged. Retrying from the top would charge each card
again; a fork keeps the log up to the charge (its recorded outcome is
replayed, the card is not charged again) and runs the rest on the fixed code.

    python examples/repair_fork.py [JOURNAL_DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import trio

import actors
from actors import Context, process
from storage import LMDBJournal

ORDERS = 300
CHARGED: list[str] = []  # the payment provider's view: one entry per real charge
SHIPPED: list[str] = []


def charge_card(order_id: str, amount: int) -> str:
    CHARGED.append(order_id)
    return f"ch_{order_id}"


def ship_v1(order_id: str) -> str:
    raise RuntimeError(f"label for {order_id} rejected: address line too long")


def ship_v2(order_id: str) -> str:  # the fix
    SHIPPED.append(order_id)
    return f"parcel-{order_id}"


@process("orders/:order_id")
async def order_v1(ctx: Context, order_id: str, *, amount: int) -> dict:
    charge = await ctx.step(charge_card, order_id, amount)
    parcel = await ctx.step(ship_v1, order_id, name="ship")
    return {"charge": charge, "parcel": parcel}


@process("orders/:order_id")  # the same process, deployed with the fix
async def order_v2(ctx: Context, order_id: str, *, amount: int) -> dict:
    charge = await ctx.step(charge_card, order_id, amount)
    parcel = await ctx.step(ship_v2, order_id, name="ship")
    return {"charge": charge, "parcel": parcel}


async def main(path: Path) -> None:
    # Monday: the buggy release fails every order after its charge.
    async with actors.open_system(LMDBJournal(path), processes=[order_v1]) as system:
        handles = [await system.start(order_v1, f"o-{n}", amount=10 + n) for n in range(ORDERS)]
        for handle in handles:
            with contextlib.suppress(actors.ProcessFailed):
                await handle.result()
        failed = [info.id async for info in system.query(status="failed", process=order_v1)]
        print(f"{len(failed)} orders failed; {len(CHARGED)} cards charged")

    # Tuesday: the fix is deployed. Fork each failed order from after its charge.
    async with actors.open_system(LMDBJournal(path), processes=[order_v2]) as system:
        charged_before = len(CHARGED)
        forks = []
        async for info in system.query(status="failed", process=order_v2):
            forks.append(await system.fork(info.id, after_step="charge_card"))
        results = [await handle.result() for handle in forks]
        print(
            f"forked {len(forks)} orders, each as incarnation "
            f"{sorted({h.incarnation for h in forks})}"
        )
        print(
            f"cards charged again: {len(CHARGED) - charged_before}; parcels shipped: {len(SHIPPED)}"
        )
        print(f"o-7: {results[[h.id for h in forks].index('orders/o-7')]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "journal", nargs="?", type=Path, help="the journal's directory (default: a temporary one)"
    )
    args = parser.parse_args()
    if args.journal is None:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(main, Path(tmp) / "journal")
    else:
        trio.run(main, args.journal)
