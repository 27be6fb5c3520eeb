"""An address's incarnations only go up, cleanup or not: a step's
idempotency key (which names the incarnation) never repeats for an address,
so a provider that deduplicates on it never drops a second, real charge."""

from __future__ import annotations

import actors

charged: list[tuple[str, int]] = []


def charge(amount: int) -> None:
    charged.append((actors.current_step().key, amount))


@actors.process("order/:id")
async def order(ctx: actors.Context, id: str, amount: int) -> int:
    await ctx.step(charge, amount)
    return amount


async def test_keys_do_not_repeat_after_cleanup_across_a_reopen(make_journal):
    charged.clear()
    async with actors.open_system(make_journal(), processes=[order]) as system:
        assert 100 == await (await system.start(order, "o-1", amount=100)).result()
        assert 1 == await system.cleanup(older_than=0)
        assert system.get("order/o-1") is None
        handle = await system.start(order, "o-1", amount=300)
        assert 2 == handle.incarnation
        assert 300 == await handle.result()
        assert 1 == await system.cleanup(older_than=0)
    async with actors.open_system(make_journal(), processes=[order]) as system:
        handle = await system.start(order, "o-1", amount=500)
        assert 3 == handle.incarnation
        assert 500 == await handle.result()
    assert [
        ("order/o-1/1/0/charge/1", 100),
        ("order/o-1/2/0/charge/1", 300),
        ("order/o-1/3/0/charge/1", 500),
    ] == charged


@actors.process("parent/:id")
async def parent(ctx: actors.Context, id: str) -> int:
    return await ctx.call(order, id, amount=7)


async def test_a_child_started_after_cleanup_counts_on(make_journal):
    charged.clear()
    async with actors.open_system(make_journal(), processes=[order, parent]) as system:
        assert 7 == await (await system.start(parent, "c-1")).result()
        assert 2 == await system.cleanup(older_than=0)  # the parent and its child
        assert 7 == await (await system.start(parent, "c-1")).result()
        assert 2 == system.get("parent/c-1").incarnation
    assert 2 == len({key for key, _ in charged}), charged
