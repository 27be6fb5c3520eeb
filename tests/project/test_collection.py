"""The suite collects without the optional extras: a test module that needs
one skips itself (pytest.importorskip), so that a missing extra never stops
the whole run at collection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# psycopg as if not installed: ``import psycopg`` raises ImportError.
_WITHOUT_PSYCOPG = """
import sys
sys.modules["psycopg"] = None
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]))
"""


@pytest.mark.slow
def test_the_suite_collects_without_psycopg():
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PSYCOPG],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert 0 == done.returncode, done.stdout[-3000:] + done.stderr[-3000:]
    assert "install the 'postgres' extra" in done.stdout  # the modules that need it skipped
