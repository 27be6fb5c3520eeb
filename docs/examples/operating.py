"""Operating it: list instances, inspect one, cancel, and clean up finished ones."""

import argparse

import trio
import trio.testing

from actors import Context, Signal, process
from actors.testing import open_test_system

go = Signal("go")


@process("jobs/:job")
async def job(ctx: Context, job: str) -> str:
    await ctx.wait(go)
    return f"{job} done"


async def main() -> None:
    async with open_test_system([job], passivate_after=60) as system:
        for name in ("a", "b", "c"):
            await system.start(job, name)
        await system.send("jobs/a", go)
        print(await system.get("jobs/a").result())
        print("cancelled b:", await system.cancel("jobs/b"))
        print("cancel b again:", await system.cancel("jobs/b"))  # it had ended

        rows = [(info.id, info.status) async for info in system.query(process=job)]
        print("all jobs:", sorted(rows))  # query's order is the journal's, not by address
        print("suspended:", [info.id async for info in system.query(status="suspended")])

        await trio.sleep(8 * 86400)  # a week later (virtual time)
        removed = await system.cleanup(older_than=7 * 86400)  # completed, failed, cancelled
        print("cleaned up", removed, "instance(s); jobs/a is now", system.get("jobs/a"))
        print("jobs/c is still", system.get("jobs/c").status)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
