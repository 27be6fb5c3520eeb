"""Testing processes: virtual time, always-replay, and a replay check of changed code.

Run with pytest and pytest-trio (``trio_mode = true``), e.g.
``python -m pytest docs/examples/testing_example.py``.
"""

import pytest
import trio

import actors
from actors import Context, Signal, process
from actors.testing import open_test_system, replay_check
from storage import LMDBJournal

renewed = Signal("renewed")


def send_invoice(account: str) -> str:
    return f"invoice-{account}"


@process("subscriptions/:account")
async def subscription(ctx: Context, account: str) -> str:
    await ctx.step(send_invoice, account)
    which, _ = await ctx.first(renewed=ctx.wait(renewed), expired=ctx.sleep(30 * 86400))
    return which


@pytest.fixture
async def system():
    # always_replay: every resume goes through replay, as after a restart
    async with open_test_system([subscription], always_replay=True) as system:
        yield system


# Each test asks for autojump_clock itself: pytest-trio runs a test on the
# clock that the test function requests, not one only a fixture requests.
async def test_expires_after_thirty_days(system, autojump_clock):
    start = trio.current_time()
    handle = await system.start(subscription, "acme")
    assert "expired" == await handle.result()
    assert 30 * 86400 == trio.current_time() - start  # in milliseconds of real time


async def test_renewal_wins(system, autojump_clock):
    handle = await system.start(subscription, "acme")
    await trio.sleep(86400)
    await system.send(handle.id, renewed)
    assert "renewed" == await handle.result()


# The same process as deployed next week, with a step inserted before the invoice.
@process("subscriptions/:account")
async def changed(ctx: Context, account: str) -> str:
    await ctx.step(len, account)
    await ctx.step(send_invoice, account)
    return "expired"


async def test_replay_check_finds_the_change(tmp_path, autojump_clock):
    path = str(tmp_path / "journal")
    async with actors.open_system(LMDBJournal(path), processes=[subscription]) as system:
        await system.start(subscription, "acme")  # suspended in its 30-day wait
    assert [] == await replay_check(path, [subscription])
    problems = await replay_check(path, [changed])
    assert ["subscriptions/acme"] == [problem.address for problem in problems]
    print(problems[0].message)
