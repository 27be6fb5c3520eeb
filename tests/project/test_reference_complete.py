"""The reference is complete by construction: every public name, every
public method of the objects users hold, and every CLI command and option
is on the pages that list them (docs/api-summary.md, docs/tutorial/cli.md).

A name added to the code without its line in the reference fails here, so
the one-page summary and the CLI tables never fall behind the code.
"""

from __future__ import annotations

import argparse
import inspect
import re
import types
from pathlib import Path

import pytest

import actors
import actors.testing
import storage
from actors._tools._cli._commands import _parser

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = (ROOT / "docs" / "api-summary.md").read_text()
CLI_PAGE = (ROOT / "docs" / "tutorial" / "cli.md").read_text()


def _quoted(text: str) -> set[str]:
    """Every identifier that opens a backtick span, and every `.member` in
    one (`ActorSystem`'s rows write ``system.start(...)``, so ``start``)."""
    names: set[str] = set()
    text = re.sub(r"^```.*$", "", text, flags=re.M)  # fences would pair the spans wrongly
    for span in re.findall(r"`([^`]+)`", text):
        names.update(re.findall(r"(?:^|\.)([A-Za-z_][A-Za-z0-9_]*)", span))
    return names


def _public_names(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return sorted(names)


@pytest.mark.parametrize("module", [actors, storage, actors.testing], ids=lambda m: m.__name__)
def test_every_public_name_is_in_the_api_summary(module: types.ModuleType) -> None:
    quoted = _quoted(SUMMARY)
    errors = set(dir(actors.errors)) | set(dir(storage.errors))
    missing = [
        name
        for name in _public_names(module)
        if name not in quoted
        # errors are listed in prose under "Errors": each by its name
        and not (name in errors and re.search(rf"\b{name}\b", SUMMARY))
    ]
    assert missing == [], f"add these to docs/api-summary.md: {missing}"


def _methods(cls: type) -> list[str]:
    return sorted(
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_")
        and (callable(member) or isinstance(member, property))
        and name in {n for c in cls.__mro__ if c.__module__.startswith("actors") for n in vars(c)}
    )


@pytest.mark.parametrize(
    "cls",
    [actors.ActorSystem, actors.Context, actors.Handle, actors.ChildHandle],
    ids=lambda c: c.__name__,
)
def test_every_method_users_call_is_in_the_api_summary(cls: type) -> None:
    quoted = _quoted(SUMMARY)
    missing = [name for name in _methods(cls) if name not in quoted]
    assert missing == [], f"add these {cls.__name__} members to docs/api-summary.md: {missing}"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    common = {
        "--journal",
        "--json",
        "--import",
        "--schema",
        "--help",
        "-h",
    }  # every command's: in prose
    return sorted(
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag not in common
    )


def _rows(command: str) -> str:
    """The CLI page's table rows that describe ``command`` (their first
    cell starts with it)."""
    return "\n".join(
        line for line in CLI_PAGE.splitlines() if re.match(rf"\| `{re.escape(command)}(\s|`)", line)
    )


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_cli_command_and_option_is_in_the_cli_tables(command: str) -> None:
    rows = _rows(command)
    assert rows, f"docs/tutorial/cli.md has no table row for `{command}`"
    missing = [flag for flag in _options(_commands()[command]) if flag not in rows]
    assert missing == [], f"the `{command}` row of docs/tutorial/cli.md lacks {missing}"
