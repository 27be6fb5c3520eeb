"""The command line's entry point: arguments, dispatch, and exit codes."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata

import trio

from storage import STATUSES, TERMINAL_STATUSES, lenient_decoding
from storage.errors import ActorError, JournalCorrupt, JournalLocked

from ...errors import NotDelivered
from ._errors import CORRUPT, HELD, INTERRUPTED, NOT_FOUND, REFUSED, USAGE, CLIError
from ._flow import queues, schedules
from ._fork import add_fork_arguments, fork
from ._history import add_history_arguments, export, import_
from ._inspect import list_instances, stats
from ._mail import add_mail_arguments, mail
from ._render import escaped_output
from ._repair import abandon_compensation, cleanup, duration, resume_compensation
from ._retry import retry
from ._show import show_any
from ._signal import add_signal_arguments, signal
from ._tail import consumers, tail
from ._web import add_web_arguments, web
from ._write import DEFAULT_REASON, cancel, send

__all__ = ["main"]

_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "list": list_instances,
    "show": show_any,
    "send": send,
    "signal": signal,
    "cancel": cancel,
    "retry": retry,
    "resume-compensation": resume_compensation,
    "abandon-compensation": abandon_compensation,
    "cleanup": cleanup,
    "tail": tail,
    "consumers": consumers,
    "stats": stats,
    "web": web,
    "schedules": schedules,
    "queues": queues,
    "export": export,
    "import": import_,
    "fork": fork,
    "mail": mail,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring).

    Everything it prints, from every command and error, is escaped for the
    terminal (`escaped_output`): journal-derived text never reaches it raw."""
    parser = _parser()
    args = parser.parse_args(argv)
    with escaped_output(json_escapes=bool(getattr(args, "json", False))):
        return _run(parser, args)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    args.imports += getattr(args, "imports_after", [])
    if not args.journal:
        parser.error("--journal PATH is required (or set ACTORS_JOURNAL)")
    try:
        _import_modules(args.imports)
        with lenient_decoding():
            return trio.run(_COMMANDS[args.command], args)
    except CLIError as exc:
        return _fail(args, exc.code, str(exc))
    except NotDelivered as exc:
        return _fail(args, NOT_FOUND if exc.reason == "unknown" else REFUSED, str(exc))
    except JournalCorrupt as exc:
        return _fail(args, CORRUPT, str(exc))
    except JournalLocked as exc:
        return _fail(args, HELD, str(exc))
    except ActorError as exc:
        return _fail(args, REFUSED, str(exc))
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # `actors list | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return REFUSED
    except OSError as exc:  # permissions, a full disk, ...
        return _fail(args, REFUSED, f"{args.journal}: {exc}")


def _fail(args: argparse.Namespace, code: int, message: str) -> int:
    if getattr(args, "json", False):
        print(json.dumps({"error": {"message": message, "exit_code": code}}, indent=2))
    else:
        print(f"actors: {message}", file=sys.stderr)
    return code


_ADDRESS = "the instance's address, e.g. orders/o-17 ('actors list' shows them)"
_SCHEMA = (
    "with --journal postgresql://USER@HOST:PORT/DATABASE: the schema holding the "
    "journal (default actors)"
)


def _parser() -> argparse.ArgumentParser:
    # The options every command takes, accepted after the command too
    # (`actors list --journal ./state`); SUPPRESS keeps a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--journal",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the journal's directory, or a PostgreSQL journal's "
        "postgresql://USER@HOST:PORT/DATABASE URL (default: $ACTORS_JOURNAL)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON document instead of text",
    )
    common.add_argument(
        "--schema",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help=_SCHEMA,
    )
    common.add_argument(
        "--import",
        dest="imports_after",
        action="append",
        default=argparse.SUPPRESS,
        metavar="MODULE",
        help="import MODULE first (see actors --help)",
    )
    parser = argparse.ArgumentParser(
        prog="actors",
        description="Inspect a journal of the actors runtime, and send to, cancel, resume "
        "or clean up its instances: through the running system that holds the journal, "
        "or directly when none does.",
        epilog="exit codes: 0 done, 1 refused, 2 bad usage, 3 not found, 4 journal held "
        "by a running system that serves no control socket, 5 corrupt records, "
        "130 interrupted. 'actors COMMAND --help' describes a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument(
        "--journal",
        metavar="PATH",
        default=os.environ.get("ACTORS_JOURNAL"),
        help="the journal's directory, or a PostgreSQL journal's "
        "postgresql://USER@HOST:PORT/DATABASE URL (default: $ACTORS_JOURNAL)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--schema", metavar="NAME", help=_SCHEMA)
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first, so records holding its "
        "@actors.serializable classes decode as those classes (repeatable); a "
        "module name (found from here and $PYTHONPATH) or a .py file's path",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, parents=[common], help=text, description=text[0].upper() + text[1:] + "."
        )

    p = command("list", "instances, most recently updated first")
    p.add_argument("--status", choices=STATUSES, help="only instances with this status")
    p.add_argument("--process", metavar="TEMPLATE", help="only this process (its path template)")
    p.add_argument(
        "--prefix", metavar="ADDRESS", help="only ADDRESS and the addresses under it (ADDRESS/...)"
    )
    p.add_argument(
        "--limit",
        type=_count,
        default=50,
        metavar="N",
        help="show at most N (default 50; 0 for all)",
    )

    command("schedules", "the journal's schedules: paused or not, last and next tick")
    command("queues", "the journal's queues: how many wait, how many run, the oldest wait")

    p = command("show", "everything recorded about one instance")
    p.add_argument("address", help=_ADDRESS)
    p.add_argument("--traceback", action="store_true", help="include the error's traceback")
    p.add_argument(
        "--limit",
        type=_count,
        default=50,
        metavar="N",
        help="show the last N log entries and mailbox messages (default 50; 0 for all)",
    )
    p.add_argument(
        "--incarnation",
        type=_count,
        metavar="N",
        help="show incarnation N: an earlier one's record, as the retry that replaced it kept it",
    )

    p = command("send", "put a message in a live instance's mailbox")
    p.add_argument("address", help=_ADDRESS)
    p.add_argument("signal", help="the signal's name")
    p.add_argument(
        "payload",
        nargs="?",
        metavar="JSON",
        help="the payload as JSON ('-' reads stdin; default null)",
    )
    p.add_argument(
        "--key",
        metavar="KEY",
        help="an idempotency key: a second send with the same key to the same "
        "incarnation stores nothing",
    )

    add_signal_arguments(
        command(
            "signal",
            "put a signal in every live instance that listens to it and has the identity "
            "given (through the running system)",
        )
    )

    p = command(
        "cancel",
        "cancel a live instance and its children (--compensate: undo its saga steps first)",
    )
    p.add_argument("address", help=_ADDRESS)
    p.add_argument(
        "--reason",
        default=DEFAULT_REASON,
        help="the reason recorded (a running system records its own)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with no system running: cancel even with saga compensations "
        "pending (they do not run)",
    )
    p.add_argument(
        "--compensate",
        action="store_true",
        help="run the instance's pending saga compensations (newest first, as "
        "after a failure) before it ends cancelled; by default a cancel runs "
        "none. With no system running they run when one that runs its process "
        "next opens the journal",
    )

    p = command("retry", "run a failed or cancelled instance again, as a new incarnation")
    p.add_argument("address", help=_ADDRESS + "; its status is failed or cancelled")
    p.add_argument(
        "--input",
        metavar="JSON",
        help="replace its keyword input with this JSON object ('-' reads stdin; "
        "default: the input it had)",
    )

    add_fork_arguments(
        command(
            "fork",
            "run an ended instance again from a point in its log "
            "(the steps before it are not run again)",
        )
    )
    add_mail_arguments(
        command(
            "mail",
            "an instance's unread messages; drop one to the dead "
            "letters (--drop ID), or list those (--dropped)",
        )
    )

    p = command("resume-compensation", "retry a stuck saga compensation where it stopped")
    p.add_argument("address", help=_ADDRESS + "; its status is compensation_stuck")

    p = command(
        "abandon-compensation", "end an instance stuck compensating as failed, without compensating"
    )
    p.add_argument("address", help=_ADDRESS + "; its status is compensation_stuck")

    p = command(
        "cleanup",
        "remove finished instances and everything they own (a child only with its parent, "
        "or once its parent is gone)",
    )
    p.add_argument(
        "--older-than",
        dest="older_than",
        type=duration,
        required=True,
        metavar="DURATION",
        help="last updated longer ago than this: seconds, or with a unit: 90s, 15min, 12h, 7d, 2w",
    )
    p.add_argument(
        "--status",
        action="append",
        choices=sorted(TERMINAL_STATUSES),
        help="only this status (repeatable; default: all finished ones)",
    )

    p = command("tail", "print a stream from a consumer's cursor")
    p.add_argument("address", help=_ADDRESS)
    p.add_argument(
        "--consumer",
        required=True,
        metavar="NAME",
        help="whose cursor to read from, and move (a new name starts one)",
    )
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing new values until interrupted or the instance ends",
    )
    p.add_argument("--peek", action="store_true", help="print from the cursor without moving it")
    p.add_argument(
        "--from",
        dest="from_",
        choices=("start", "latest"),
        default="start",
        help="where a new consumer starts (default start)",
    )
    p.add_argument(
        "--interval",
        type=_seconds,
        default=0.5,
        metavar="SECONDS",
        help="seconds between polls with --follow (default 0.5)",
    )

    p = command("consumers", "the consumers of an instance's stream and their cursors")
    p.add_argument("address", help=_ADDRESS)
    p.add_argument(
        "--delete",
        metavar="NAME",
        help="forget consumer NAME's cursor (only with no system running)",
    )

    add_history_arguments(
        command("export", "write an instance's history (record, logs, mail) as a portable file"),
        command("import", "put a history file's instances into this journal"),
    )
    command("stats", "counts by status, size, mail, timers")
    add_web_arguments(
        command(
            "web",
            "serve a read-only web inspector (needs the 'web' extra); "
            "--journal may be a postgresql:// URL, with --schema",
        )
    )
    return parser


def _version() -> str:
    try:
        return metadata.version("trio-actors")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "(not installed)"


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count: give 0 or more")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _import_modules(modules: list[str]) -> None:
    """Import each ``--import``: a module name (found from the current
    directory and ``$PYTHONPATH``) or a ``.py`` file's path (its directory
    goes on ``sys.path``, so it imports its neighbours as it does at home)."""
    if modules and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        name = module
        if module.endswith(".py") or os.sep in module:
            path = os.path.abspath(module)
            if not (module.endswith(".py") and os.path.isfile(path)):
                raise CLIError(
                    f"--import {module}: no such .py file; give a module name or a file's path",
                    USAGE,
                )
            folder, name = os.path.split(path[: -len(".py")])
            if folder not in sys.path:
                sys.path.insert(0, folder)
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise CLIError(
                f"--import {module}: {exc}; run the command from the directory that holds "
                "it, add that directory to PYTHONPATH (PYTHONPATH=/path/to/app actors ...), "
                "or give the file's path (--import ./app/orders.py)",
                USAGE,
            ) from None
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
            raise CLIError(f"--import {module}: {type(exc).__name__}: {exc}", USAGE) from None
