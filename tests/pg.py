"""A PostgreSQL schema of its own for each test.

The server is ``postgresql://postgres@127.0.0.1:5432/test`` unless
``ACTORS_TEST_PG_DSN`` names another. A missing server fails the test, so
CI notices; set ``ACTORS_TEST_POSTGRES=0`` to skip the PostgreSQL tests
instead.
"""

from __future__ import annotations

import os
import re
import uuid

import pytest

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def test_dsn() -> str:
    """The DSN of the server the tests use."""
    return os.environ.get("ACTORS_TEST_PG_DSN", DEFAULT_DSN)


test_dsn.__test__ = False  # type: ignore[attr-defined]  # not a test, despite its name


def _unavailable(reason: str) -> None:
    if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
        pytest.skip(f"PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0): {reason}")
    pytest.fail(
        f"{reason}; start the server (pg_ctlcluster <version> main start), point "
        "ACTORS_TEST_PG_DSN at one, or set ACTORS_TEST_POSTGRES=0 to skip these tests",
        pytrace=False,
    )


def fresh_schema(request: pytest.FixtureRequest) -> tuple[str, str]:
    """``(dsn, schema)``: a schema name no other test uses, dropped (CASCADE)
    when the test ends. The schema itself is left for the journal to create."""
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed: pip install -e '.[postgres]'")
    dsn = test_dsn()
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        _unavailable(f"PostgreSQL is not reachable at {dsn!r} ({str(exc).strip()})")
    stem = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")[:30]
    schema = f"t_{stem}_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    request.addfinalizer(drop)
    return dsn, schema
