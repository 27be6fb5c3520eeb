"""What differs between a log entry and the effect the code made at its
position: the words of a `NonDeterminismError`.

Kind and name are in the entry as they were. Arguments are not: the entry
keeps the digest of them all (``h``, what replay compares) and, for a step
written since entries kept them, the digest of each one (``p``,
`LogEntry.parts`; see `storage.argument_digests`). With those the message names
the argument that differs, by position or keyword, and shows what the code
gives now. An entry without them (written before, or by a kind that keeps
none) gets the message it always had: the call as the code makes it now
and both whole digests.

The parts only ever choose words: ``h`` alone decides whether an effect
matches, so a damaged or foreign ``p`` gives the old message, never another
outcome.
"""

from __future__ import annotations

from typing import Any

from storage import PART_SIZE, digest

from ._effects import Effect, shorten
from ._log import LogEntry

__all__ = ["differs"]


def differs(entry: LogEntry, effect: Effect[Any]) -> str:
    """What differs between the log entry at a position and the effect the
    code made there: its kind, its name (a step's name, a signal, a child's
    address), or, with both the same, its arguments (by position or
    keyword where the entry keeps each one's digest)."""
    found = effect.describe()
    if entry.kind != found.kind:
        return (
            f"the log holds {entry.show()}, the code asked for {found.show()} "
            f"({effect.as_call()}), another kind of effect"
        )
    if entry.name != found.name:
        what = _NAMES.get(entry.kind, "name")
        return (
            f"the log holds {entry.show()}, the code asked for {found.show()}: another "
            f"{what} ({entry.name!r} in the log, {found.name!r} now)"
        )
    named = _arguments_differ(entry, effect, found)
    if named:
        return (
            f"the log holds {entry.show()} made with other arguments than the code gives "
            f"now: {'; '.join(named)} (the call now: {effect.with_arguments()})"
        )
    return (
        f"the log holds {entry.show()} made with other arguments than the code gives now, "
        f"{effect.with_arguments()} (the log keeps a digest of the arguments it ran "
        f"with, {entry.hash.hex() or 'none'}; these give {found.hash.hex() or 'none'})"
    )


def _arguments_differ(entry: LogEntry, effect: Effect[Any], found: LogEntry) -> list[str]:
    """Each argument that differs, in words; empty if the entry cannot say."""
    given = effect.arguments()
    if given is None:
        return []
    head, args, kwargs = given
    logged = _read_parts(entry.parts)
    if logged is None:
        # No parts: an entry of a call with no arguments (which keeps none),
        # or one written before entries kept them. The first is known by
        # its digest; of the second nothing more can be said.
        if (args or kwargs) and entry.hash == digest([head, [], {}]):
            return [f"the log ran it with no arguments, the code gives {_count(args, kwargs)} now"]
        return []
    now = _read_parts(found.parts)
    if now is None:  # (only if its arguments no longer encode)
        return []
    (then_positional, then_keywords), (now_positional, now_keywords) = logged, now
    named = []
    if len(then_positional) != len(now_positional):
        named.append(
            f"{_plural(len(then_positional), 'positional argument')} in the log, "
            f"{len(now_positional)} now"
        )
    for i, (then, digest_now) in enumerate(zip(then_positional, now_positional, strict=False)):
        if then != digest_now:
            named.append(
                f"argument {i + 1} (position {i}) differs: the log ran it with a value whose "
                f"digest is {then.hex()}; the code gives {shorten(args[i])} now"
            )
    for key, then in then_keywords.items():
        if key not in now_keywords:
            named.append(
                f"keyword {key!r} was removed: the log ran it with one (its value's digest "
                f"is {then.hex()}); the code gives none now"
            )
        elif now_keywords[key] != then:
            named.append(
                f"keyword {key!r} differs: the log ran it with a value whose digest is "
                f"{then.hex()}; the code gives {shorten(kwargs[key])} now"
            )
    for key in now_keywords:
        if key not in then_keywords:
            named.append(
                f"a keyword {key!r} was added: the log ran it without one; the code gives "
                f"{key}={shorten(kwargs[key])} now"
            )
    if not named and list(then_keywords) != list(now_keywords):
        # The same values in another order: a map's order is in the digest.
        named.append(
            f"the keywords are given in another order ({', '.join(then_keywords)} in the "
            f"log, {', '.join(now_keywords)} now)"
        )
    return named


def _read_parts(parts: Any) -> tuple[list[bytes], dict[str, bytes]] | None:
    """``(each positional digest, keyword -> digest)`` of a ``p`` as
    `storage.argument_digests` writes it; None for anything else."""
    if type(parts) is not list or len(parts) != 2:
        return None
    positional, keywords = parts
    if type(positional) is not bytes or len(positional) % PART_SIZE or type(keywords) is not dict:
        return None
    if not all(type(k) is str and type(v) is bytes for k, v in keywords.items()):
        return None
    cut = [positional[i : i + PART_SIZE] for i in range(0, len(positional), PART_SIZE)]
    return cut, keywords


def _count(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    counts = []
    if args:
        counts.append(_plural(len(args), "positional argument"))
    if kwargs:
        counts.append(f"{_plural(len(kwargs), 'keyword')} ({', '.join(kwargs)})")
    return " and ".join(counts)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# What an effect's name is, by kind, for `differs`.
_NAMES = {
    "step": "step name",
    "wait": "signal",
    "call": "child address",
    "spawn": "child address",
    "join": "child address",
    "ask": "address",
}
