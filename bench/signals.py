"""Signals routed by identity (``system.signal``), against the sends that
would carry the same messages to known addresses, in the same run.

- a signal fanning out to 1,000 instances of one order, against
  ``send_many`` of the same 1,000 messages (target: 0.8x);
- a signal reaching 1 instance among N stored, against ``send`` to its
  address: routing reads the identity index, so the rate does not fall
  with N (10,000 by default, 1,000,000 with --full).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import trio

import actors
from actors import Context, Signal, process

from ._kit import _FOREVER, _lmdb, _probe, _repeat_rate, _Sampler, _start_many
from ._registry import Measurement, Options, Result, at_least, run_measurements, suite

__all__ = ["fan_out_rate", "one_of_many_rates"]

shipped = Signal("orders.shipped", identity=("order_id",))
_FAN = 1000
_PAYLOAD = {"carrier": "DHL", "track": "T-1"}
_TURNS = 6  # windows of each kind in one sample of one_of_many_rates


@process("parcels/:order_id/:parcel", listens=[shipped])
async def parcel(ctx: Context, order_id: str, parcel: str) -> None:
    while True:
        _probe.seen(await ctx.wait(shipped))


@process("accounts/:order_id", listens=[shipped])
async def account(ctx: Context, order_id: str) -> None:
    while True:
        _probe.seen(await ctx.wait(shipped))


def _open(directory: Path) -> Any:
    return actors.open_system(
        _lmdb(directory), processes=[parcel, account], passivate_after=_FOREVER
    )


def fan_out_rate(directory: Path, seconds: float, *, signal: bool) -> float:
    """Messages/s stored for 1,000 instances of one order, 1,000 per call:
    by one ``system.signal`` each (``signal``), or by ``send_many``."""

    async def main() -> float:
        _probe.reset()
        async with _open(directory) as system:
            ids = [f"p{n}" for n in range(_FAN)]
            async with trio.open_nursery() as nursery:
                for k in range(100):
                    nursery.start_soon(_start_parcels, system, ids[k::100])
            batch = [(f"parcels/o-1/{p}", shipped, _PAYLOAD) for p in ids]
            sent = [0]

            async def once() -> int:
                if signal:
                    reached = await system.signal(shipped, {"order_id": "o-1"}, _PAYLOAD)
                else:
                    await system.send_many(batch)
                    reached = len(batch)
                # Let the instances keep up, so mailboxes do not grow without bound.
                while _probe.count < sent[0] - 4 * _FAN:
                    await trio.sleep(0.001)
                sent[0] += reached
                return reached

            return await _repeat_rate(seconds, once, once)

    return trio.run(main)


async def _start_parcels(system: actors.ActorSystem, ids: list[str]) -> None:
    for p in ids:
        await system.start(parcel, "o-1", p)


def one_of_many_rates(directory: Path, seconds: float, *, stored: int) -> dict[str, float]:
    """Messages/s to one instance among ``stored`` (passivated: each message
    loads its instance), one awaited call at a time, each to another
    instance: by ``system.signal`` with its order id (``"signal"``), and by
    ``system.send`` to its address (``"send"``), on the same journal."""

    async def main() -> dict[str, float]:
        _probe.reset()
        journal = _lmdb(directory)
        async with actors.open_system(journal, processes=[account], passivate_after=0.2) as system:
            ids = [f"o-{n}" for n in range(stored)]
            await _start_many(system, account, ids, 1000)
            n = [0]

            def next_id() -> str:
                n[0] += 1
                return ids[(n[0] * 7919) % stored]

            async def by_signal() -> int:
                await system.signal(shipped, {"order_id": next_id()}, _PAYLOAD)
                return 1

            async def by_send() -> int:
                await system.send(f"accounts/{next_id()}", shipped, _PAYLOAD)
                return 1

            # Short windows of each in turn, so a disk that slows down for a
            # while (a neighbour's fsyncs) weighs on both alike.
            done = {"send": 0.0, "signal": 0.0}
            spent = {"send": 0.0, "signal": 0.0}
            await by_send()
            await by_signal()
            for _ in range(_TURNS):
                for name, once in (("send", by_send), ("signal", by_signal)):
                    start = time.perf_counter()
                    while (now := time.perf_counter()) < start + seconds / _TURNS:
                        done[name] += await once()
                    spent[name] += now - start
            return {name: done[name] / spent[name] for name in done}

    return trio.run(main)


@suite("signals")
def signals_suite(options: Options) -> list[Result]:
    stored = 1_000_000 if options.full else 10_000
    many = f"send_many, {_FAN:,} messages"
    one = f"send -> 1 of {stored:,} stored"
    return run_measurements(
        "signals",
        [
            Measurement(
                many,
                "msgs/s",
                lambda d, s: fan_out_rate(d, s, signal=False),
                meaning=f"baseline: send_many of {_FAN:,} messages to {_FAN:,} known addresses",
            ),
            Measurement(
                f"signal -> {_FAN:,} instances",
                "msgs/s",
                lambda d, s: fan_out_rate(d, s, signal=True),
                (many,),
                at_least(0.8, many),
                meaning=f"one system.signal reaching the {_FAN:,} parcels of one order",
            ),
            *_Sampler(lambda d, s: one_of_many_rates(d, s, stored=stored)).measurements(
                [
                    (
                        one,
                        "msgs/s",
                        "send",
                        (),
                        None,
                        "baseline: durable sends, one at a time, to known addresses",
                    ),
                    (
                        f"signal -> 1 of {stored:,} stored",
                        "msgs/s",
                        "signal",
                        (one,),
                        None,
                        "system.signal by order id, one at a time: found in the identity "
                        "index, no scan",
                    ),
                ]
            ),
        ],
        options,
    )
