"""``--import`` finds the application's module from any directory: by name
(from the current directory or ``$PYTHONPATH``) or by the file's path, and
a module it cannot find is an error that says how to make it findable."""

from __future__ import annotations

import sys

import trio

import actors
from storage import LMDBJournal
from tests.cli_runner import run_in_process


def _journal(tmp_path) -> str:
    path = tmp_path / "state"

    async def make() -> None:
        async with actors.open_system(LMDBJournal(path), []):
            pass

    trio.run(make)
    return str(path)


def test_import_takes_a_file_path_and_its_neighbours_import(tmp_path):
    app = tmp_path / "elsewhere" / "app"
    app.mkdir(parents=True)
    (app / "cli_path_helper.py").write_text("VALUE = 42\n")
    (app / "cli_path_app.py").write_text("from cli_path_helper import VALUE\nLOADED = VALUE\n")
    done = run_in_process(
        ["--journal", _journal(tmp_path), "--import", str(app / "cli_path_app.py"), "list"]
    )
    assert (0, "") == (done.returncode, done.stderr)
    assert 42 == sys.modules["cli_path_app"].LOADED


def test_a_module_not_found_says_how_to_make_it_findable(tmp_path):
    done = run_in_process(
        ["--journal", _journal(tmp_path), "--import", "no_such_app.orders", "list"]
    )
    assert 2 == done.returncode
    assert "No module named 'no_such_app'" in done.stderr
    assert "PYTHONPATH" in done.stderr and "--import ./app/orders.py" in done.stderr


def test_a_path_that_is_not_a_python_file_is_refused(tmp_path):
    done = run_in_process(
        ["--journal", _journal(tmp_path), "--import", str(tmp_path / "nope.py"), "list"]
    )
    assert 2 == done.returncode
    assert "no such .py file" in done.stderr
