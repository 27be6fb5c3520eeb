"""An account service answering requests with ask/reply, and a transfer
process that asks two accounts in turn.

Each account is an actor that takes deposit, withdraw and balance requests
in a receive loop and replies to each (``ctx.reply``); callers outside use
``system.ask`` and get the reply as a value, or the account's refusal.
Deposits carry an idempotency key: a client that retries one after a lost
answer does not deposit twice. The system is closed and opened again half
way: the balances and the recorded replies survive. A transfer is a process
of its own that asks (``ctx.ask``) one account to withdraw and the other to
deposit; its asks are recorded, so they are never sent twice.

Run:  python examples/accounts.py [JOURNAL_DIR]   (a temporary journal by default)
"""

import argparse
import tempfile

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

deposit, withdraw, balance = Signal("deposit"), Signal("withdraw"), Signal("balance")


@process("accounts/:owner")
async def account(ctx: Context, owner: str, *, opening: int = 0) -> None:
    total = opening
    while True:
        signal, amount = await ctx.receive(deposit, withdraw, balance)
        if signal == deposit:
            total += amount
            await ctx.reply({"ok": True, "balance": total})
        elif signal == withdraw and amount > total:
            await ctx.reply({"ok": False, "why": f"{owner} has {total}, not {amount}"})
        elif signal == withdraw:
            total -= amount
            await ctx.reply({"ok": True, "balance": total})
        else:
            await ctx.reply(total)


@process("transfers/:id")
async def transfer(ctx: Context, id: str, *, source: str, target: str, amount: int) -> str:
    taken = await ctx.ask(f"accounts/{source}", withdraw, amount)
    if not taken["ok"]:
        return f"refused: {taken['why']}"
    await ctx.ask(f"accounts/{target}", deposit, amount)
    return f"moved {amount} from {source} to {target}"


async def main(path: str) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[account, transfer]) as system:
        await system.start(account, "ann", opening=100)
        await system.start(account, "bob")
        print("ann deposits 50:", await system.ask("accounts/ann", deposit, 50))
        # A client that lost the answer sends the same request again: with
        # the same key, the account takes it once.
        await system.send("accounts/bob", deposit, 30, key="req-7")
        await system.send("accounts/bob", deposit, 30, key="req-7")
        print("bob after a retried deposit:", await system.ask("accounts/bob", balance))
        print("bob withdraws 80:", await system.ask("accounts/bob", withdraw, 80))
    print("-- closed and opened again --")
    async with actors.open_system(LMDBJournal(path), processes=[account, transfer]) as system:
        print("ann's balance:", await system.ask("accounts/ann", balance))
        moved = await system.start(transfer, "t1", source="ann", target="bob", amount=120)
        print("t1:", await moved.result())
        refused = await system.start(transfer, "t2", source="bob", target="ann", amount=500)
        print("t2:", await refused.result())
        for owner in ("ann", "bob"):
            print(f"{owner}'s balance:", await system.ask(f"accounts/{owner}", balance))
        try:
            await system.ask("accounts/cy", balance)
        except actors.NotDelivered as exc:
            print("cy:", exc.reason)


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
    with tempfile.TemporaryDirectory(prefix="accounts-") as scratch:
        trio.run(main, args.journal or scratch)
