"""A durable schedule: start a report every second (a stand-in for "0 3 * * *").

Each tick starts one "report" instance whose last path param is the tick's
time (ISO 8601 UTC), so a tick's address is known in advance and it never
starts twice, even across a crash. The schedule is stored in the journal:
closing and reopening the system keeps it (and catches up a missed tick).

Run:  python examples/nightly_schedule.py [JOURNAL_DIR]
"""

import argparse
import tempfile

import trio

import actors
from actors import Context, process
from storage import LMDBJournal


@process("reports/:region/:tick")
async def report(ctx: Context, region: str, tick: str) -> str:
    return f"report for {region} at {tick}"


async def main(path: str) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[report]) as system:
        info = await system.schedule("eu-reports", report, every=1, params=["eu"], catch_up=1)
        print(f"schedule {info.name}: next tick {info.next_tick}")
        await trio.sleep(2.2)
    await trio.sleep(1.5)  # down for a tick or two
    async with actors.open_system(LMDBJournal(path), processes=[report]) as system:
        await trio.sleep(1.2)
        (info,) = await system.list_schedules()
        await system.pause_schedule("eu-reports")
        started = sorted([i.id async for i in system.query(process=report)])
        print(f"{len(started)} reports started, each tick once:")
        for address in started:
            print(" ", await system.get(address).result())
        print(f"paused after {info.last_started}")


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
    with tempfile.TemporaryDirectory(prefix="nightly-schedule-") as scratch:
        trio.run(main, args.journal or scratch)
