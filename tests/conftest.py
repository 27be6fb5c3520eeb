"""Shared fixtures: journal backends for the contract suite and the runtime tests."""

from __future__ import annotations

import os

import pytest

from storage import LMDBJournal, MemoryJournal

BACKENDS = ["memory", "lmdb"]
if os.environ.get("ACTORS_TEST_POSTGRES", "1") != "0":
    BACKENDS.append("postgres")


def _postgres_factory(request, tmp_path):
    pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    from tests.pg import fresh_schema

    dsn, schema = fresh_schema(request)
    from storage import PostgresJournal

    return lambda: PostgresJournal(dsn, schema=schema)


@pytest.fixture(params=BACKENDS)
def make_journal(request, tmp_path):
    """A factory of journals on one store: each call gives a new journal
    object over the same data, as a restarted program would."""
    if request.param == "memory":
        shared = MemoryJournal()
        return lambda: shared
    if request.param == "lmdb":
        return lambda: LMDBJournal(tmp_path / "journal")
    return _postgres_factory(request, tmp_path)


@pytest.fixture
def make_lmdb(tmp_path):
    """A factory of LMDB journals on one directory."""
    return lambda **kw: LMDBJournal(tmp_path / "journal", **kw)


@pytest.fixture
def opener(tmp_path):
    """Open systems on one LMDB journal: ``async with opener(proc1, proc2) as system``."""
    from tests.runtime_helpers import Opener

    return Opener(tmp_path)


@pytest.fixture(params=["lmdb", "memory"])
def any_opener(request, tmp_path):
    """Like ``opener``, on each of the LMDB and in-memory journals."""
    from tests.runtime_helpers import Opener

    return Opener(tmp_path, request.param)
