"""The simulation finds bugs this project once had: each is planted back
(tests/simulation/plants.py, a patch of one function applied only in the
process that runs the seeds) and a sweep from the seed it first failed at
(docs/simulation.md's table) must fail within a window."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simulation.plants import PLANTS

ROOT = Path(__file__).resolve().parents[2]

#: The seed each plant first failed at in a sweep from seed 1, and the
#: workload's version it was swept under (the table in docs/simulation.md;
#: ``python -m tests.simulation --plant NAME --workload V --seeds 1-2000
#: --first`` finds it again). CI sweeps from there, at most `WINDOW` seeds,
#: so that a change that moves the runs a little still finds each bug, in
#: seconds rather than minutes (on one process: the seed recorded fails at
#: once, and a pool of workers costs more to start than that seed to run).
FOUND = {
    "creation-race": (4, 4),
    "cancel-restart": (30, 4),
    "aliased-payload": (1, 4),
    "redone-commit": (1, 4),
    "cancelled-start": (181, 4),
    "unfenced-barrier": (8, 4),
    "rate-per-round": (3, 5),
    "cleanup-floor": (4, 6),
    "admitted-twice": (8350, 7),
    "parked-with-work": (3, 7),
    "raised-in-nursery": (7, 7),
    "duplicate-send": (3, 7),
    "lost-start-cancel": (3746, 8),
    "retry-lost-mail": (33, 8),
    "fork-copied-mail": (7, 8),
    "cleanup-removed-child": (4, 8),
    "completed-cancelled": (18, 8),
    "drop-not-withheld": (10, 8),
    "drop-any-incarnation": (226, 8),
    "drop-unclaimed": (2, 8),
    "signal-generation": (13, 9),
    "signal-unlogged": (43, 9),
    "log-cache-length": (1, 8),
}
WINDOW = 100


def _sweep(*args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "tests.simulation", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return result.stdout + result.stderr


def test_every_plant_has_its_seed() -> None:
    assert set(FOUND) == set(PLANTS)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=[pytest.mark.slow] if PLANTS[name].nodes > 1 else [])
        for name in sorted(PLANTS)
    ],
)
def test_the_simulation_finds_a_planted_bug(name: str) -> None:
    plant = PLANTS[name]
    first, workload = FOUND[name]
    runs = ("--nodes", str(plant.nodes), "--workload", str(workload))
    out = _sweep(
        "--plant", name, "--seeds", f"{first}-{first + WINDOW - 1}", "--first", "--jobs", "1", *runs
    )
    failed = re.search(r"^seed (\d+) FAILED (\S+)$", out, re.MULTILINE)
    assert failed is not None, (
        f"{name} ({plant.what}) went unseen in {WINDOW} seeds from {first}:\n{out[-1500:]}"
    )
    # Without the plant the same seed passes: the bug is what failed it.
    seed = failed[1]
    again = _sweep("--seed", seed, *runs)
    assert re.search(rf"^seed {seed} ok [0-9a-f]{{32}}$", again, re.MULTILINE), again[-1500:]


def test_a_plant_whose_snippet_is_gone_says_so() -> None:
    import attrs

    moved = attrs.evolve(PLANTS["creation-race"], old="this line is not in the source")
    with pytest.raises(AssertionError, match="no longer in its source"), moved.planted():
        pass


def test_a_plant_is_lifted_afterwards() -> None:
    import actors._system._registry as registry

    real = registry.Registry.run_created
    with PLANTS["creation-race"].planted():
        assert registry.Registry.run_created is not real
    assert registry.Registry.run_created is real
