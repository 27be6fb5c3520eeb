"""Two nodes on one PostgreSQL schema: start on one, send from the other.

Needs the 'postgres' extra and a server:
    python docs/examples/postgres_nodes.py postgresql://postgres@127.0.0.1:5432/test tutorial
"""

import argparse

import trio

import actors
from actors import Context, Signal, process
from storage import PostgresJournal

approved = Signal("approved")


@process("orders/:order_id")
async def order(ctx: Context, order_id: str) -> str:
    decision = await ctx.wait(approved)
    return f"{order_id} approved by {decision['by']}"


async def main(dsn: str, schema: str) -> None:
    async with (
        actors.open_system(
            PostgresJournal(dsn, schema=schema), processes=[order], node="node-a"
        ) as a,
        actors.open_system(
            PostgresJournal(dsn, schema=schema), processes=[order], node="node-b"
        ) as b,
    ):
        handle = await a.start(order, "o-1")  # runs on node-a, which started it
        await b.send("orders/o-1", approved, {"by": "ann"})  # stored, and node-a is notified
        print(f"{a.node}: {await handle.result()}")
        print(f"{b.node} sees it {b.get('orders/o-1').status}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dsn", help="a PostgreSQL URL, e.g. postgresql://app@localhost:5432/app")
    parser.add_argument("schema", help="the schema the journal creates (or uses) for its tables")
    args = parser.parse_args()
    trio.run(main, args.dsn, args.schema)
