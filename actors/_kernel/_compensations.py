"""The compensations a system may run: only callables the application gave it.

Stored data never chooses code. A step's compensation is recorded in the
instance's record by name (``module:qualname``, and the file that defines
it) so that a later program can tell which function it was; but that name
is only ever *compared* with the callables this system was given, never
imported or looked up. A journal, a history file or a message can be
written by someone other than the application (an edited ``actors
export`` file, a copied journal directory), and a name read from one that
led to ``importlib.import_module`` would let that someone run
``os:system``.

A system knows a compensation when

- the application passed it to ``open_system(compensations=[...])``, or
- the process code of this system passed it as ``compensate=`` to a step,
  live or replayed (so closures and lambdas are found while the program
  that made them runs, and a run that is replayed finds its own).

A recorded name matches a known callable with that name, or one with the
same qualified name defined in the same file (a program run as a script
names its module ``__main__``; the same file imported later has its own
name). A name with no match is not run: `_saga` parks the instance
``compensation_stuck`` with a WARNING that names it and the fix.

The state is per system (`ActorSystem.compensations`), never module-level:
two systems in one process know what each was given.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import InvalidArguments

__all__ = ["Compensations", "qualified"]


def qualified(fn: Callable[..., Any]) -> str:
    """The name a compensation is recorded by: ``module:qualname``."""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


class Compensations:
    """The callables one system may run as compensations (see the module docstring)."""

    __slots__ = ("_by_file", "_by_name", "_real_paths")

    def __init__(self, given: Iterable[Callable[..., Any]] = ()) -> None:
        self._by_name: dict[str, Callable[..., Any]] = {}
        # (real path of the defining file, qualname) -> callable
        self._by_file: dict[tuple[str, str], Callable[..., Any]] = {}
        self._real_paths: dict[str, str] = {}  # a file as code objects name it -> its real path
        for fn in given:
            if not callable(fn):
                raise InvalidArguments(
                    "open_system(compensations=...) takes the functions that undo "
                    f"steps themselves (a name is never looked up), not {fn!r}"
                )
            self.learn(fn)

    def learn(self, fn: Callable[..., Any]) -> str:
        """Know ``fn`` as a compensation of this system; its recorded name."""
        name = qualified(fn)
        if self._by_name.get(name) is fn:
            return name  # the common case: a step replayed or run again
        self._by_name[name] = fn
        file = self.source_file(fn)
        if file is not None:
            self._by_file[(file, name.partition(":")[2])] = fn
        return name

    def find(self, name: object, file: object) -> Callable[..., Any] | None:
        """The known callable that a recorded ``name`` (defined in ``file``)
        stands for, or None. Compares only: nothing is imported or looked up,
        and a name or file of another type (a damaged record) matches nothing."""
        if not isinstance(name, str):
            return None
        found = self._by_name.get(name)
        if found is None and isinstance(file, str):
            found = self._by_file.get((file, name.partition(":")[2]))
        return found

    def source_file(self, fn: Callable[..., Any]) -> str | None:
        """The real path of the file that defines ``fn``, if it has one."""
        code = getattr(fn, "__code__", None)
        path = getattr(code, "co_filename", None)
        if not path or path.startswith("<"):
            module = sys.modules.get(getattr(fn, "__module__", None) or "")
            path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not path:
            return None
        real = self._real_paths.get(path)
        if real is None:
            real = self._real_paths[path] = os.path.realpath(path)
        return real
