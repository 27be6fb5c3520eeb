"""Workload 9 of the simulation (tests/simulation/signals.py): opt-in,
drawn apart from the versions before it, and its invariants judged from
the transactions written as they say (on made-up transactions here; the
plants ``signal-generation`` and ``signal-unlogged`` show the runs find
them: tests/whole/test_simulation_plants.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import trio

from storage import InstanceRecord, Txn, instance_id
from tests.simulation import signals
from tests.simulation.run import LATEST, WORKLOAD
from tests.simulation.signals import BELL, Signalled
from tests.simulation.workload import plan
from tests.simulation.world import InvariantBroken, World


def test_workload_9_is_asked_for_not_the_default():
    assert (WORKLOAD, LATEST) == (8, 9)


def test_workload_9_adds_to_the_plan_and_changes_nothing_before():
    for seed in range(1, 21):
        sinks, before = plan(random.Random(f"{seed}:plan"), operators=True)
        same, after = plan(random.Random(f"{seed}:plan"), operators=True, signals=True)
        assert sinks == same
        assert before == after[: len(before)]
        assert len(after) > len(before)


def test_workload_9_draws_every_kind():
    kinds: Counter[str] = Counter()
    for seed in range(1, 31):
        _, ops = plan(random.Random(f"{seed}:plan"), operators=True, signals=True)
        kinds.update(op.kind for op in ops)
    for kind in ("listen", "deaf", "ring", "ringer", "hush"):
        assert kinds[kind] > 0, kind


def _start(address: str, status: str = "running") -> Txn:
    txn = Txn()
    txn.put_instance(
        instance_id(address),
        address=address,
        process=address.rsplit("/", 2)[0] + "/:topic/:id",
        status=status,
        record=InstanceRecord(),
    )
    return txn


def _bell(bell: str, *addresses: str) -> Txn:
    txn = Txn()
    for address in addresses:
        txn.append_message(instance_id(address), [BELL.name, {"bell": bell}, 0.0, None, None])
    return txn


def _judge(signalled: Signalled) -> None:
    signals.check(signalled, World(1).fail)


def _world(*txns: Txn, topics: dict[str, str]) -> Signalled:
    signalled = Signalled(topics=dict(topics))
    for txn in txns:
        signalled.written(txn)
    return signalled


async def test_a_bell_to_each_listener_of_its_topic_holds():
    ended = Txn()
    ended.set_status(instance_id("lsn/t0/l3"), "completed")
    signalled = _world(
        _start("lsn/t0/l1"),
        _start("lsn/t0/l2"),
        _start("lsn/t1/l9"),
        _start("deaf/t0/d1"),
        _start("lsn/t0/l3"),
        ended,
        _bell("b1", "lsn/t0/l1", "lsn/t0/l2"),
        _start("lsn/t0/l4"),  # after the bell: it gets none
        topics={"b1": "t0"},
    )
    _judge(signalled)


@pytest.mark.parametrize(
    "bell, invariant",
    [
        (_bell("b1", "lsn/t0/l1"), "signal-missed"),  # l2 listened
        (_bell("b1", "lsn/t0/l1", "lsn/t0/l2", "deaf/t0/d1"), "signal-stray"),
        (_bell("b1", "lsn/t0/l1", "lsn/t0/l2", "lsn/t1/l9"), "signal-stray"),
        (_bell("b1", "lsn/t0/l1", "lsn/t0/l2", "lsn/t0/l2"), "signal-twice"),
    ],
)
async def test_a_bell_that_breaks_a_rule_is_named(bell, invariant):
    signalled = _world(
        _start("lsn/t0/l1"),
        _start("lsn/t0/l2"),
        _start("lsn/t1/l9"),
        _start("deaf/t0/d1"),
        bell,
        topics={"b1": "t0"},
    )
    with pytest.raises(InvariantBroken) as broken:
        _judge(signalled)
    assert broken.value.name == invariant


async def test_a_bell_written_again_to_a_listener_that_had_it_is_signal_twice():
    signalled = _world(
        _start("lsn/t0/l1"),
        _bell("b1", "lsn/t0/l1"),
        _start("lsn/t0/l2"),
        _bell("b1", "lsn/t0/l2"),  # a keyed bell again: the new listener only
        topics={"b1": "t0"},
    )
    _judge(signalled)
    signalled.written(_bell("b1", "lsn/t0/l1"))
    with pytest.raises(InvariantBroken, match="signal-twice"):
        _judge(signalled)


async def test_a_bell_that_reached_nobody_while_a_listener_was_there_is_signal_missed():
    signalled = _world(_start("lsn/t0/l1"), topics={"b1": "t0"})
    await trio.sleep(1)
    began = trio.current_time()
    signalled.rung.append(("b1", "t0", began, began + 0.5, 0))
    with pytest.raises(InvariantBroken, match="signal-missed"):
        _judge(signalled)
    signalled.rung[-1] = ("b1", "t1", began, began + 0.5, 0)  # nobody listens to t1
    _judge(signalled)


async def test_a_count_other_than_the_messages_written_is_signal_count():
    signalled = _world(_start("lsn/t0/l1"), _bell("b1", "lsn/t0/l1"), topics={"b1": "t0"})
    signalled.rung.append(("b1", "t0", 0.0, 1.0, 2))
    with pytest.raises(InvariantBroken, match="signal-count"):
        _judge(signalled)
