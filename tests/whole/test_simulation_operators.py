"""Workload 8 of the simulation (tests/simulation/operators.py): the
default, drawn apart from the versions before it, and its invariants
judged as they say (on made-up worlds; the runs that broke them on the
runtime before its fixes are kept in seeds.txt, and its bugs planted back
in plants.py)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import attrs
import pytest

from tests.simulation import operators
from tests.simulation.__main__ import main
from tests.simulation.run import LATEST, WORKLOAD
from tests.simulation.workload import plan
from tests.simulation.world import InvariantBroken, Run, World


def test_workload_8_is_the_default():
    assert WORKLOAD == 8 and LATEST >= 8
    with pytest.raises(SystemExit):
        main(["--seed", "1", "--workload", str(LATEST + 1)])


def test_workload_8_adds_to_the_plan_and_changes_nothing_before():
    for seed in range(1, 21):
        sinks, before = plan(random.Random(f"{seed}:plan"))
        same, after = plan(random.Random(f"{seed}:plan"), operators=True)
        assert sinks == same
        assert before == after[: len(before)]


def test_workload_8_draws_every_operator_call():
    kinds: Counter[str] = Counter()
    for seed in range(1, 31):
        _, ops = plan(random.Random(f"{seed}:plan"), operators=True)
        kinds.update(op.kind for op in ops)
    for kind in ("inbox", "isend", "drop", "retry", "fork", "joiner", "cleanup", "handle"):
        assert kinds[kind] > 0, kind


@attrs.define
class _Mail:
    signal: str
    payload: dict[str, Any]


@attrs.define
class _Letter:
    message: _Mail


class _System:
    def __init__(self, mail: dict[str, list[str]], dead: dict[str, list[str]] | None = None):
        self._mail = mail
        self._dead = dead or {}

    async def mail(self, address: str) -> list[_Mail]:
        return [_Mail("work", {"m": m}) for m in self._mail.get(address, [])]

    async def dropped(self, address: str) -> list[_Letter]:
        return [_Letter(_Mail("work", {"m": m})) for m in self._dead.get(address, [])]


@attrs.define
class _Sim:
    system: _System


def _world() -> World:
    world = World(1)
    world.operated.tried = {"x-m1": "inbox/x0", "x-m2": "inbox/x0"}
    world.operated.acked = dict(world.operated.tried)
    return world


def _handled(world: World, m: str, address: str, at: float, incarnation: int = 1) -> None:
    key = f"{address}/{incarnation}/0/handle/1"
    world.ledger.append(Run("I", m, key, 1, 0, at))


async def _check(
    world: World,
    unread: dict[str, list[str]] | None = None,
    dead: dict[str, list[str]] | None = None,
) -> str | None:
    try:
        await operators.check(world, _Sim(_System(unread or {}, dead)), {"inbox/x0": None})  # type: ignore[arg-type]
    except InvariantBroken as broken:
        return broken.name
    return None


async def test_every_message_handled_once_by_its_inbox_holds():
    world = _world()
    _handled(world, "x-m1", "inbox/x0", 1.0)
    _handled(world, "x-m2", "inbox/x0", 2.0)
    _handled(world, "x-m2", "inbox/x0", 9.0, incarnation=2)  # a retry runs it again
    assert await _check(world) is None


async def test_a_message_handled_after_its_drop_is_dropped_taken():
    world = _world()
    _handled(world, "x-m1", "inbox/x0", 1.0)
    world.operated.dropped["x-m2"] = 3.0
    assert await _check(world) is None
    _handled(world, "x-m2", "inbox/x0", 4.0)
    assert "dropped-taken" == await _check(world)


async def test_a_message_handled_at_a_forks_address_is_fork_copied_mail():
    world = _world()
    _handled(world, "x-m1", "inbox/x0", 1.0)
    _handled(world, "x-m2", "inbox/x0-f3", 2.0)
    assert "fork-copied-mail" == await _check(world)


async def test_an_acknowledged_message_gone_after_a_retry_is_retry_lost_mail():
    world = _world()
    _handled(world, "x-m1", "inbox/x0", 1.0)
    assert await _check(world, {"inbox/x0": ["x-m2"]}) is None  # unread: kept
    assert "acked-lost" == await _check(world)
    world.operated.retried.add("inbox/x0")
    assert "retry-lost-mail" == await _check(world)


async def test_a_message_a_drop_of_unknown_outcome_wrote_is_not_lost():
    # (Seeds 923/w8 and 1035/w8: the drop met CommitOutcomeUnknown, and
    # its write had landed: the message is in the dead letters.)
    world = _world()
    _handled(world, "x-m1", "inbox/x0", 1.0)
    assert "acked-lost" == await _check(world)
    assert await _check(world, dead={"inbox/x0": ["x-m2"]}) is None


async def test_a_drop_refused_as_taken_for_a_message_never_taken_is_drop_refused():
    world = _world()
    _handled(world, "x-m1", "inbox/x0", 1.0)
    _handled(world, "x-m2", "inbox/x0", 2.0)
    refusal = "'inbox/x0' has no unread message #3; 'actors mail inbox/x0' lists the unread ones"
    world.operated.refusals.append(("x-m1", "inbox/x0", refusal, 0.5, 0.6))
    assert await _check(world) is None  # it was taken
    world.operated.tried["x-m3"] = "inbox/x0"
    world.operated.refusals.append(("x-m3", "inbox/x0", refusal, 0.5, 0.6))
    assert "drop-refused" == await _check(world)
    world.operated.repairs["inbox/x0"] = [0.55]  # a retry between the read and the drop
    assert await _check(world) is None


async def test_a_joiner_that_failed_is_cleanup_removed_child():
    @attrs.frozen
    class Record:
        result: Any = None
        error: Any = None

    @attrs.frozen
    class Row:
        status: str
        record: Record

    world = World(1)
    world.operated.joiners["joiner/g1"] = [0.1, 2.0]
    done = ["L:joiner/g1/leafj/l0", "L:joiner/g1/leafj/l1"]
    sim: Any = _Sim(_System({}))
    await operators.check(world, sim, {"joiner/g1": (Row("completed", Record(done)), [])})
    gone = Record(error={"message": "child 'joiner/g1/leafj/l1' cancelled: it is gone"})
    with pytest.raises(InvariantBroken, match="cleanup-removed-child"):
        await operators.check(world, sim, {"joiner/g1": (Row("failed", gone), [])})
