"""The public namespace: every contract name exists, and every public name is documented."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import subprocess
import sys
import tomllib
import types
import typing
from pathlib import Path

import pytest

import actors
import actors.testing
import storage

ROOT = Path(__file__).resolve().parents[2]

CONTRACT = {
    actors: "open_system process Signal Retry Context Outcome current_step serializable OneForOne "
    "OneForAll RestForOne ActorError NotDelivered ProcessFailed ProcessCancelled StepFailed "
    "StepTimeout NonDeterminismError ChildFailed EncodeError JournalCorrupt JournalFull "
    "UnknownProcess ActorSystem Handle ChildHandle InstanceInfo AskTimeout AlreadyStarted",
    storage: "LMDBJournal MemoryJournal Journal Txn Reader encode decode serializable",
}


def _public(module: types.ModuleType) -> list[tuple[str, object]]:
    if hasattr(module, "__all__"):
        return [(name, getattr(module, name)) for name in module.__all__]
    return [
        (name, value)
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", "").split(".")[0] in ("actors", "storage")
    ]


@pytest.mark.parametrize("module", [actors, storage], ids=lambda m: m.__name__)
def test_contract_names_exist(module):
    missing = [name for name in CONTRACT[module].split() if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("module", [actors, storage, actors.testing], ids=lambda m: m.__name__)
def test_every_public_name_has_a_docstring(module):
    undocumented = []
    for name, value in _public(module):
        if typing.get_origin(value) is typing.Literal:
            continue  # a type alias: its docstring follows it, for the site (test_docs)
        if not (inspect.getdoc(value) or "").strip():
            undocumented.append(name)
        if inspect.isclass(value):
            for attr, member in vars(value).items():
                if attr.startswith("_") or (
                    not callable(member) and not isinstance(member, property)
                ):
                    continue
                if not (inspect.getdoc(member) or "").strip():
                    undocumented.append(f"{name}.{attr}")
    assert undocumented == []


@pytest.mark.parametrize("module", [actors, storage, actors.testing], ids=lambda m: m.__name__)
def test_public_classes_name_the_module_users_import_them_from(module):
    # (errors live in their own public module, actors.errors or storage.errors)
    names = _public(module)
    if module is storage:  # and the one imported lazily
        names.append(("PostgresJournal", storage.PostgresJournal))
    private = {
        name: value.__module__
        for name, value in names
        if inspect.isclass(value) and "._" in value.__module__
    }
    assert private == {}
    assert "<class 'actors.ActorSystem'>" == repr(actors.ActorSystem)


@pytest.mark.parametrize(
    "cls, where",
    [
        (actors.ActorSystem, "actors.open_system"),
        (actors.Handle, "system.start"),
        (actors.ChildHandle, "ctx.spawn"),
    ],
)
def test_what_the_runtime_makes_has_no_public_constructor(cls, where):
    with pytest.raises(TypeError, match=f"has no public constructor: .*{where}"):
        cls(None, b"", "x", 0)


def test_the_status_type_and_the_stored_statuses_are_one_vocabulary():
    assert storage.STATUSES == typing.get_args(storage.Status)
    # The codes journals store: a status keeps its code for ever.
    from storage._statuses import STATUS_CODE

    assert STATUS_CODE == {
        "running": 1,
        "suspended": 2,
        "completed": 3,
        "failed": 4,
        "cancelled": 5,
        "compensation_stuck": 6,
        "corrupt": 7,
        "queued": 8,
    }


def test_errors_share_the_root_and_are_defined_once():
    for name in ("EncodeError", "JournalCorrupt", "JournalFull"):
        assert getattr(actors, name) is getattr(storage, name)
    for name in CONTRACT[actors].split():
        value = getattr(actors, name)
        if inspect.isclass(value) and issubclass(value, Exception):
            assert issubclass(value, actors.ActorError), name


def test_readme_example_runs_twice(tmp_path):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## A first process\n\n```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    for _ in range(2):  # the second run finds the finished instance
        out = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().endswith("{'order': 'o-17', 'by': 'ann'}")


def test_version_is_the_pyproject_version(monkeypatch):
    with (ROOT / "pyproject.toml").open("rb") as file:
        expected = tomllib.load(file)["project"]["version"]
    assert expected == actors.__version__

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert expected == actors._find_version()  # a checkout that was never installed
