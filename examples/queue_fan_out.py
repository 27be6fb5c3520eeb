"""Start 200 calls to a rate-limited API through a queue: at most 10 at once.

Each "fetch" instance calls a (pretend) downstream API in one step. They are
all started at once with ``queue=``, so they are stored ``queued`` and the
queue starts them, in priority then FIFO order, as slots free: the API never
sees more than 10 calls at once. One urgent fetch (priority -1) jumps the line.

Run:  python examples/queue_fan_out.py [JOURNAL_DIR]
"""

import argparse
import tempfile

import trio

import actors
from actors import Context, Queue, process
from storage import LMDBJournal

api = Queue("api", concurrency=10)
calls = {"now": 0, "most": 0, "order": []}


async def call_api(n: str) -> str:
    calls["now"] += 1
    calls["most"] = max(calls["most"], calls["now"])
    calls["order"].append(n)
    try:
        await trio.sleep(0.05)  # the downstream API at work
    finally:
        calls["now"] -= 1
    return f"page {n}"


@process("fetch/:n")
async def fetch(ctx: Context, n: str) -> str:
    return await ctx.step(call_api, n)


async def main(path: str) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[fetch], queues=[api]) as system:
        handles = [await system.start(fetch, str(n), queue=api) for n in range(200)]
        urgent = await system.start(fetch, "urgent", queue=api, priority=-1)
        info = await system.queue_info(api)
        print(f"queued: {info.waiting} waiting, {info.running} running")
        for handle in handles:
            await handle.result()
        print(await urgent.result())
        print(f"200 fetches done; at most {calls['most']} at once")
        after = len(calls["order"]) - calls["order"].index("urgent") - 1
        print(f"urgent jumped ahead of {after} that were queued before it")


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
    with tempfile.TemporaryDirectory(prefix="queue-fan-out-") as scratch:
        trio.run(main, args.journal or scratch)
