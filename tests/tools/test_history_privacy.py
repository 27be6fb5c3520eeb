"""Exported histories are private: ``export --output FILE`` makes the file
0600 whatever the umask, and a file that was there already becomes 0600
before the history is written into it (a history holds every payload and
result of its instances). Stdout stays the user's to redirect."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.tools.test_history import lmdb_store, order, run_until_waiting


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_zero():
    """The umask a careless service runs with: files as the code asks for them."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


async def test_export_output_is_made_0600_under_umask_zero(tmp_path, umask_zero):
    store = lmdb_store(tmp_path / "production")
    await run_until_waiting(store, (order, ("o-1",), {"amount": 1}))
    fresh = tmp_path / "o-1.history"
    assert 0 == await store.cli("export", "orders/o-1", "--output", str(fresh))
    assert 0o600 == mode(fresh)
    assert "orders/o-1" == json.loads(fresh.read_text())["address"]

    # A file that was there, readable by all, is truncated and made private.
    there = tmp_path / "there.history"
    there.write_text("x" * 1_000_000)
    os.chmod(there, 0o666)
    assert 0 == await store.cli("export", "orders/o-1", "--output", str(there))
    assert 0o600 == mode(there)
    assert "orders/o-1" == json.loads(there.read_text())["address"]
