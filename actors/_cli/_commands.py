"""The command line's entry point: arguments, dispatch, and exit codes."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import trio

from storage import STATUSES, lenient_decoding
from storage.errors import ActorError, JournalCorrupt, JournalLocked

from ..errors import NotDelivered
from ._errors import CORRUPT, HELD, INTERRUPTED, NOT_FOUND, REFUSED, USAGE, CLIError
from ._inspect import list_instances, show, stats
from ._tail import tail
from ._write import cancel, send

__all__ = ["main"]

_COMMANDS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "list": list_instances, "show": show, "send": send, "cancel": cancel, "tail": tail,
    "stats": stats,
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    parser = _parser()
    args = parser.parse_args(argv)
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


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON document instead of text")  # fmt: skip
    parser = argparse.ArgumentParser(
        prog="actors",
        description="Inspect a journal of the actors runtime, and send to or cancel "
        "its instances when no system holds it.",
        epilog="exit codes: 0 done, 1 refused, 2 bad usage, 3 not found, 4 journal held "
        "by a running system, 5 corrupt records, 130 interrupted",
    )
    parser.add_argument("--journal", metavar="PATH", default=os.environ.get("ACTORS_JOURNAL"),
                        help="the journal's directory (default: $ACTORS_JOURNAL)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE", help="import MODULE first, so records holding its "
                        "@actors.serializable classes decode as those classes (repeatable)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", parents=[common], help="instances, most recently updated first")
    p.add_argument("--status", choices=STATUSES, help="only instances with this status")
    p.add_argument("--process", metavar="TEMPLATE", help="only this process (its path template)")
    p.add_argument("--limit", type=int, default=50, metavar="N",
                   help="show at most N (default 50; 0 for all)")  # fmt: skip

    p = sub.add_parser("show", parents=[common], help="everything recorded about one instance")
    p.add_argument("address")
    p.add_argument("--traceback", action="store_true", help="include the error's traceback")

    p = sub.add_parser("send", parents=[common], help="put a message in a live instance's mailbox")
    p.add_argument("address")
    p.add_argument("signal", help="the signal's name")
    p.add_argument("payload", nargs="?", metavar="JSON",
                   help="the payload as JSON ('-' reads stdin; default null)")  # fmt: skip

    p = sub.add_parser("cancel", parents=[common], help="cancel a live instance and its children")
    p.add_argument("address")
    p.add_argument("--reason", default="cancelled from the actors CLI", help="recorded reason")
    p.add_argument("--force", action="store_true",
                   help="cancel even with saga compensations pending (they do not run)")  # fmt: skip

    p = sub.add_parser("tail", parents=[common], help="print a stream from a consumer's cursor")
    p.add_argument("address")
    p.add_argument("--consumer", required=True, metavar="NAME")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing new values until interrupted or the instance ends")  # fmt: skip
    p.add_argument("--from", dest="from_", choices=("start", "latest"), default="start",
                   help="where a new consumer starts (default start)")  # fmt: skip
    p.add_argument("--interval", type=_seconds, default=0.5, help="seconds between polls")

    sub.add_parser("stats", parents=[common], help="counts by status, size, mail, timers")
    return parser


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _import_modules(modules: list[str]) -> None:
    if modules and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
            raise CLIError(f"--import {module}: {type(exc).__name__}: {exc}", USAGE) from None
