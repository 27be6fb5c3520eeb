"""The worked example of docs/repair.md runs and prints what the page says:
300 orders failed after their charge, forked from after it on the fixed
code, and no card charged twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # 300 instances on a real LMDB journal, twice: a few seconds
def test_300_orders_are_forked_from_after_their_charge(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "repair_fork.py"), str(tmp_path / "journal")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr[-2000:]
    assert [
        "300 orders failed; 300 cards charged",
        "forked 300 orders, each as incarnation [2]",
        "cards charged again: 0; parcels shipped: 300",
        "o-7: {'charge': 'ch_o-7', 'parcel': 'parcel-o-7'}",
    ] == done.stdout.splitlines()


def test_the_page_shows_the_example_it_runs():
    page = (ROOT / "docs" / "repair.md").read_text()
    assert '--8<-- "examples/repair_fork.py"' in page
