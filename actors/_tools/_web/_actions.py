"""The inspector's actions (``actors web --allow-actions``): what each one
is, when it applies, what its confirmation page says, and how it is done.

An action is done by the command line itself: the inspector runs
``python -m actors --journal PATH COMMAND ...`` (``cancel``, ``retry``,
``send``, ``resume-compensation``, ``abandon-compensation``, ``fork`` and
``mail --drop``) in a child process, and shows
what it printed and its exit code. So an action takes the CLI's path
exactly, refusals included: written directly with the transactions of
`actors._kernel._transactions` when no system holds the journal, and otherwise through
the running system's control socket (`actors._system._control`). A child process,
not a call in this one, because LMDB forbids opening one environment twice
in a process, and the inspector holds the journal open read-only while the
CLI opens it to write.

Each action, done or refused, is an audit line on the ``actors.control``
logger naming the action, the address, what was asked, who asked (the
client's address) and the outcome.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from storage import MAIL_STATUSES, STATUSES, TERMINAL_STATUSES, UNFINISHED_STATUSES

from ._previews import (
    Fields,
    abandon_says,
    cancel_says,
    compensate_says,
    drop_says,
    fork_says,
    resume_says,
    retry_says,
    send_says,
)

__all__ = [
    "ACTIONS",
    "Action",
    "BadAction",
    "Outcome",
    "Runner",
    "audit",
    "check_address",
    "check_fields",
]

log = logging.getLogger("actors.control")

# Seconds an action's command may take (a cancel that compensates through a
# running system waits for the compensations).
TIMEOUT = 120.0

_OUTCOMES = {
    0: "done",
    1: "refused",
    2: "bad usage",
    3: "not found",
    4: "journal held, no control socket",
    5: "corrupt records",
    124: "no answer in time",
}


class BadAction(ValueError):
    """An action request the inspector cannot act on; the message says why."""


@attrs.frozen
class Action:
    """One thing an operator may do to an instance from its page."""

    name: str  # in URLs and forms
    title: str  # the button's words
    command: str  # the CLI command that does it
    statuses: frozenset[str]  # where it is offered (the CLI decides in the end)
    fields: tuple[str, ...]  # the form fields it takes besides the address
    argv: Callable[[str, Fields], list[str]]  # the command's arguments after its name
    says: Callable[[dict[str, Any], Fields], list[str]]  # what will happen, in sentences
    per_item: bool = False  # offered on a log entry or a message, not in the panel
    # The field the command reads from its stdin (its argv says "-"): a
    # payload or an input may be larger than one argv string may (128 KiB).
    stdin: str | None = None


# -- their commands -------------------------------------------------------------------


# Options come first, as --name=value, and the positionals after "--": a
# value that starts with "-" (an address, a signal's name) is never an option.


def _cancel_argv(address: str, f: Fields) -> list[str]:
    # The confirmation said the compensations do not run: that is --force.
    return ["--force", f"--reason={_REASON}", "--", address]


def _compensate_argv(address: str, f: Fields) -> list[str]:
    return ["--compensate", f"--reason={_REASON}", "--", address]


def _retry_argv(address: str, f: Fields) -> list[str]:
    return [*(["--input=-"] if f.get("input") else []), "--", address]


def _fork_argv(address: str, f: Fields) -> list[str]:
    return [f"--from={f['from']}", *([f"--to={f['to']}"] if f.get("to") else []), "--", address]


def _send_argv(address: str, f: Fields) -> list[str]:
    key = [f"--key={f['key']}"] if f.get("key") else []
    return [*key, "--", address, f["signal"], "-" if f.get("payload") else "null"]


def _drop_argv(address: str, f: Fields) -> list[str]:
    return [f"--drop={f['message']}", "--", address]


def _address_only(address: str, f: Fields) -> list[str]:
    return ["--", address]


_REASON = "cancelled from the web inspector"
_STUCK = frozenset({"compensation_stuck"})

ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("cancel", "Cancel", "cancel", UNFINISHED_STATUSES, (), _cancel_argv, cancel_says),
        Action(
            "cancel-compensate",
            "Cancel with compensation",
            "cancel",
            UNFINISHED_STATUSES - _STUCK,
            (),
            _compensate_argv,
            compensate_says,
        ),
        Action(
            "retry",
            "Retry",
            "retry",
            frozenset({"failed", "cancelled"}),
            ("input",),
            _retry_argv,
            retry_says,
            stdin="input",
        ),
        Action(
            "fork",
            "Fork",
            "fork",
            TERMINAL_STATUSES,
            ("from", "to"),
            _fork_argv,
            fork_says,
            per_item=True,
        ),
        Action(
            "send",
            "Send a signal",
            "send",
            MAIL_STATUSES,
            ("signal", "payload", "key"),
            _send_argv,
            send_says,
            stdin="payload",
        ),
        Action(
            "drop",
            "Drop",
            "mail",
            frozenset(STATUSES) - {"corrupt"},
            ("message",),
            _drop_argv,
            drop_says,
            per_item=True,
        ),
        Action(
            "resume-compensation",
            "Resume the compensation",
            "resume-compensation",
            _STUCK,
            (),
            _address_only,
            resume_says,
        ),
        Action(
            "abandon-compensation",
            "Abandon the compensation",
            "abandon-compensation",
            _STUCK,
            (),
            _address_only,
            abandon_says,
        ),
    )
}


def check_fields(action: Action, fields: Mapping[str, str]) -> dict[str, str]:
    """The action's fields (empty ones left out), checked as far as the page
    can; the command checks the rest.

    Raises:
        BadAction: a field is missing, unknown or malformed.
    """
    unknown = sorted(set(fields) - set(action.fields))
    if unknown:
        raise BadAction(
            f"{action.name} takes {', '.join(action.fields) or 'no fields'}, "
            f"not {', '.join(unknown)}"
        )
    out = {k: v for k, v in fields.items() if v != ""}
    for name, value in out.items():
        # A name (signal, key, address) is printable; a JSON text may hold
        # anything escaped, never a raw NUL (a command line cannot carry one).
        if "\x00" in value or (name not in _JSON_FIELDS and not value.isprintable()):
            raise BadAction(f"{name} holds a control character: type it without one")
    if action.name == "fork":
        at = out.get("from", "")
        if not (at.isascii() and at.isdigit()) or len(at) > 9:
            raise BadAction(f"from must be a log entry's number (0 or more), not {at!r}")
        to = out.get("to")
        if to is not None and (not to.isprintable() or to != to.strip()):
            raise BadAction(f"to must be an address such as orders/o-18, not {to!r}")
    if action.name == "drop":
        seq = out.get("message", "")
        if not (seq.isascii() and seq.isdigit()) or len(seq) > 18:
            raise BadAction(f"message must be a message's number, not {seq!r}")
    if action.name == "send":
        if not out.get("signal", "").strip():
            raise BadAction("signal is missing: give the signal's name, e.g. approved")
        _json(out, "payload")
    if action.name == "retry" and "input" in out and not isinstance(_json(out, "input"), dict):
        raise BadAction("input must be a JSON object of the process's keyword input")
    return out


_JSON_FIELDS = frozenset({"payload", "input"})


def check_address(address: str) -> str:
    """``address``, if an action may name it.

    Raises:
        BadAction: it is empty or holds a control character.
    """
    if not address:
        raise BadAction("address is missing: name the instance to act on")
    if not address.isprintable():
        raise BadAction("address holds a control character: no instance's address does")
    return address


def _json(fields: Mapping[str, str], name: str) -> Any:
    text = fields.get(name)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadAction(f'{name} is not JSON ({exc}); e.g. {{"by": "ann"}}') from None
    except RecursionError:
        raise BadAction(
            f"{name} nests too deep to read; a payload is at most about 1,000 levels deep"
        ) from None


@attrs.frozen
class Outcome:
    """What an action's command did: its exit code and what it printed."""

    code: int
    text: str  # stdout when done, else the error's message

    @property
    def word(self) -> str:
        """ "done", "refused", "not found", ..."""
        return _OUTCOMES.get(self.code, f"exit code {self.code}")


@attrs.frozen
class Runner:
    """Runs an action's command against one LMDB journal, as a user would."""

    journal: str  # the --journal path
    imports: tuple[str, ...] = ()  # the inspector's --import modules, passed on
    timeout: float = TIMEOUT

    def argv(self, action: Action, address: str, fields: Fields) -> list[str]:
        """The command line the action runs."""
        imports = [arg for module in self.imports for arg in ("--import", module)]
        return [
            sys.executable,
            "-m",
            "actors",
            "--journal",
            self.journal,
            *imports,
            action.command,
            *action.argv(address, fields),
        ]

    async def run(self, action: Action, address: str, fields: Fields) -> Outcome:
        """Run it and wait (up to `timeout` seconds) for its end."""
        argv = self.argv(action, address, fields)
        given = fields.get(action.stdin) if action.stdin is not None else None
        with trio.move_on_after(self.timeout):
            done = await trio.run_process(
                argv,
                stdin=(given or "").encode(),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            out = done.stdout.decode(errors="replace").strip()
            err = done.stderr.decode(errors="replace").strip()
            if done.returncode == 0:
                return Outcome(0, out)
            message = "\n".join(line.removeprefix("actors: ") for line in err.splitlines())
            return Outcome(done.returncode, message or out or f"exit code {done.returncode}")
        return Outcome(
            124,
            f"the command gave no answer within {self.timeout:g} s and was "
            "stopped; it may have done its work: look at the instance",
        )


def audit(action: str, address: str, fields: Fields, client: str, outcome: str, text: str) -> None:
    """The audit line of an action, done or refused, on ``actors.control``."""
    asked = " ".join(f"{k}={_clipped(v)}" for k, v in sorted(fields.items()))
    level = logging.INFO if outcome == "done" else logging.WARNING
    named = action if action in ACTIONS else repr(action)  # (a refused POST's is anyone's)
    log.log(
        level,
        "web inspector: %s %r%s from %s: %s: %s",
        named,
        address,
        f" ({asked})" if asked else "",
        client,
        outcome,
        " ".join(text.split())[:500],
        extra={
            "actors_address": address,
            "actors_action": action,
            "actors_outcome": outcome,
            "actors_client": client,
        },
    )


def _clipped(value: str, limit: int = 200) -> str:
    """``value`` for an audit line: repr'd (control characters escaped) and
    cut at ``limit`` characters, saying how long it was."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value.encode('utf-8', 'replace'))} bytes)"
