"""What the writing commands read from their arguments: a JSON value given
on the command line ('-' reads it from stdin), and the process definitions
of the modules given with ``--import``."""

from __future__ import annotations

import json
import sys
from typing import Any

from .._admin import ProcessDef
from ._errors import USAGE, CLIError

__all__ = ["definitions", "json_input", "json_payload"]


def json_payload(text: str | None) -> Any:
    """A message's JSON payload ('-' reads stdin), or None without one."""
    if text is None:
        return None
    return _json(_given(text), "the payload", '{"by": "ann"}')


def json_input(text: str | None) -> dict[str, Any] | None:
    """``--input``'s JSON object ('-' reads stdin), or None without one."""
    if text is None:
        return None
    text = _given(text)
    value = _json(text, "--input", '{"amount": 5}')
    if not isinstance(value, dict):
        raise CLIError(
            f"--input takes a JSON object of the process's keyword input, not {text!r}", USAGE
        )
    return value


def _given(text: str) -> str:
    """The argument's text, or stdin's for '-'."""
    return sys.stdin.read() if text == "-" else text


def _json(text: str, what: str, example: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(
            f"{what} is not JSON ({exc}); quote it for the shell, e.g. '{example}'", USAGE
        ) from None


def definitions(modules: list[str]) -> dict[str, list[ProcessDef[..., Any]]]:
    """The process definitions the ``--import``ed ``modules`` hold, by template."""
    found: dict[str, list[ProcessDef[..., Any]]] = {}
    for name in modules:
        module = sys.modules.get(name)
        for value in list(vars(module).values()) if module is not None else []:
            if isinstance(value, ProcessDef) and value not in found.get(value.template, []):
                found.setdefault(value.template, []).append(value)
    return found
