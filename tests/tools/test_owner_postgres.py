"""On a PostgreSQL journal that nodes share, `actors show` and the inspector
name the node that owns an instance (`Reader.owner`); on LMDB, with no
owners, neither prints an owner line."""

from __future__ import annotations

import pytest
import trio

pytest.importorskip("psycopg", reason="install the 'postgres' extra")
pytest.importorskip("starlette", reason="install the 'web' extra")

import actors
from actors import Context, Signal, process
from actors._tools._web import create_app
from storage import LMDBJournal, PostgresJournal, instance_id
from tests.cli_runner import run_in_process
from tests.pg import fresh_schema
from tests.runtime_helpers import wait_status
from tests.tools.test_web import call, href

go = Signal("go")


@process("waits/:id")
async def waiter(ctx: Context, id: str) -> str:
    await ctx.wait(go)
    return id


@pytest.fixture
def schema(request: pytest.FixtureRequest) -> tuple[str, str]:
    return fresh_schema(request)


def owner_lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.strip().startswith("owner")]


async def test_show_and_the_inspector_name_the_owning_node(schema):
    dsn, name = schema
    async with actors.open_system(PostgresJournal(dsn, schema=name), [waiter], node="n-1") as s:
        await wait_status(await s.start(waiter, "w-1"), "suspended")
        async with PostgresJournal(dsn, schema=name, readonly=True) as journal:
            with journal.reader() as r:
                assert "n-1" == r.owner(instance_id("waits/w-1"))
                assert None is r.owner(instance_id("waits/nobody"))
            shown = await trio.to_thread.run_sync(
                run_in_process, ["show", "waits/w-1", "--journal", dsn, "--schema", name]
            )
            assert (0, "") == (shown.returncode, shown.stderr)
            assert ["owner node    n-1"] == owner_lines(shown.stdout)
            app = create_app(journal, source=journal.describe(), poll=1.0)
            status, _, body = await call(app, href("waits/w-1"))
            assert 200 == status
            assert '<dt>owner node</dt><dd><span id="owner">n-1</span></dd>' in body


def test_lmdb_has_no_owner_line(tmp_path):
    async def run() -> None:
        async with actors.open_system(LMDBJournal(str(tmp_path / "j")), [waiter]) as s:
            await wait_status(await s.start(waiter, "w-1"), "suspended")

    trio.run(run)
    shown = run_in_process(["show", "waits/w-1", "--journal", str(tmp_path / "j")])
    assert (0, []) == (shown.returncode, owner_lines(shown.stdout))
