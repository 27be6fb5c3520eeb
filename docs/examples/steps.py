"""Steps, retries and idempotency keys: the way a process touches the world."""

import argparse

import trio
import trio.testing

import actors
from actors import Context, Retry, process
from actors.testing import open_test_system

seen_keys: dict[str, int] = {}  # what a payment provider would deduplicate on


async def charge(order_id: str, amount: int) -> str:  # async steps run in the actor's task
    step = actors.current_step()
    print(f"attempt {step.attempt} of {step.name}, key {step.key}")
    if step.attempt < 3:
        raise ConnectionError("provider unreachable")
    seen_keys[step.key] = seen_keys.get(step.key, 0) + 1
    return f"charge-{order_id}-{amount}"


def lookup(order_id: str) -> int:  # sync steps run in a worker thread
    print(f"lookup {order_id}, attempt {actors.current_step().attempt}")
    if order_id == "missing":
        raise KeyError(order_id)
    return 40


@process("orders/:order_id")
async def order(ctx: Context, order_id: str) -> str:
    try:
        amount = await ctx.step(
            lookup, order_id, retry=Retry(attempts=3, non_retryable=(KeyError,))
        )
    except actors.StepFailed as exc:  # the step's last attempt failed
        return f"no such order ({exc.error_type}: {exc.error_message})"
    return await ctx.step(
        charge,
        order_id,
        amount,
        name="charge",  # the key's step name (default: the function's)
        retry=Retry(attempts=5, backoff=1.0, max_backoff=60),  # waits ~1 s, ~2 s, ... (jittered)
        timeout=30,  # per attempt
    )


async def main() -> None:
    async with open_test_system([order]) as system:
        handle = await system.start(order, "o-1")
        print("result:", await handle.result())
        print("keys the provider saw:", seen_keys)

        missing = await system.start(order, "missing")  # KeyError: one attempt only
        print("result:", await missing.result())


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()  # only --help: it takes none
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
