"""Fan out over 100 items with ctx.scope, under a supervisor that restarts a crashed child.

A "batch" parent, supervised one-for-one (at most 3 restarts within 10 s),
spawns a detached "heartbeat" child that crashes on its first run and is
restarted by the parent, then runs one awaited child per item with
``ctx.scope``: each child runs one step for its item, concurrently, and the
parent gets ``{item: result}`` back. The parent stays up (supervising) until
it is told to finish; its live children end with it.

Run:  python examples/fan_out.py [JOURNAL_DIR] [ITEMS]
(a temporary journal and 100 items by default; at most 1000 items per scope)
"""

import argparse
import tempfile
from contextlib import aclosing

import trio

import actors
from actors import Context, OneForOne, Signal, process
from storage import LMDBJournal

finish, stop = Signal("finish"), Signal("stop")


def square(n: int) -> int:
    return n * n


@process("items/:n")
async def item(ctx: Context, n: str) -> int:
    return await ctx.step(square, int(n))


@process("heartbeat/:name")
async def heartbeat(ctx: Context, name: str) -> None:
    if ctx.run == 0:  # ctx.run counts restarts: crash on the first run only
        raise RuntimeError("lost the connection to the monitor")
    await ctx.wait(stop)  # nobody sends it: runs until its parent ends


@process("batches/:batch", supervision=OneForOne(max_restarts=3, within=10))
async def batch(ctx: Context, batch: str, *, size: int) -> dict:
    await ctx.spawn(heartbeat, "hb", restart="transient")
    results = await ctx.scope([str(n) for n in range(size)], item, key=int)
    await ctx.publish({"done": len(results)})
    await ctx.wait(finish)
    return {"items": len(results), "sum": sum(results.values()), "max": max(results.values())}


async def main(path: str, size: int) -> None:
    processes = [batch, item, heartbeat]
    async with actors.open_system(LMDBJournal(path), processes=processes) as system:
        started = trio.current_time()
        job = await system.start(batch, "b1", size=size)  # idempotent
        if job.status == "completed":
            print(f"batch b1 finished in an earlier run: {await job.result()}")
            return
        async with aclosing(job.watch()) as values:
            async for exports in values:  # the first publish: the scope is done
                print(
                    f"scope finished {exports['done']} children in "
                    f"{trio.current_time() - started:.2f} s"
                )
                break
        beat = system.get("batches/b1/heartbeat/hb")
        async with aclosing(beat.status_changes()) as changes:
            async for status in changes:
                if status != "running":  # restarted and waiting again
                    break
        for restart in beat.restarts:
            print(f"{beat.id} was restarted: {restart['reason']}")
        print(f"{beat.id} is {beat.status} after {len(beat.restarts)} restart(s)")
        await system.send(job.id, finish)
        print(f"batch result: {await job.result()}")
        try:
            await beat.result()
        except actors.ProcessCancelled as exc:  # live children end with their parent
            print(f"{beat.id} is {beat.status}: {exc.reason}")
        children = [i async for i in system.query(process=item, status="completed")]
        print(f"{len(children)} item children completed, e.g. {children[0].id}")


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
        "items", nargs="?", type=int, default=100, help="how many items (default: 100)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fan-out-") as scratch:
        trio.run(main, args.journal or scratch, args.items)
