"""Sagas: steps with compensate= are undone newest first when the process fails."""

import argparse

import trio
import trio.testing

import actors
from actors import Context, process
from actors.testing import open_test_system


def reserve(trip: str, what: str) -> str:
    print(f"  reserve {what}")
    if what == "car":
        raise RuntimeError("no cars left")
    return f"{what}-for-{trip}"


def release(trip: str, what: str) -> None:
    # A compensation is called with the step's arguments; current_step()
    # gives the recorded result of the step it undoes.
    print(f"  release {what} ({actors.current_step().forward_result})")


@process("trips/:trip")
async def trip(ctx: Context, trip: str, *, items: list[str]) -> list[str]:
    booked = []
    for what in items:
        booked.append(
            await ctx.step(reserve, trip, what, name=f"reserve-{what}", compensate=release)
        )
    return booked


async def main() -> None:
    async with open_test_system([trip]) as system:
        print("t-1:")
        print(await (await system.start(trip, "t-1", items=["flight", "hotel"])).result())
        print("t-2:")
        handle = await system.start(trip, "t-2", items=["flight", "hotel", "car"])
        try:
            await handle.result()
        except actors.ProcessFailed as exc:
            print(f"t-2 {handle.status}: {exc.error_type}: {exc.error_message}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
