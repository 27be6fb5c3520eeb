"""The ``actors`` command line run in this process, for tests where a second
process is not the point.

A subprocess costs a Python start and the imports (~0.3 s, seconds on a
loaded machine); `run_in_process` calls `actors._tools._cli.main` with what the
subprocess would have had: the arguments, stdin, ``TZ=UTC``,
``COLUMNS=160``, no ``$ACTORS_JOURNAL``, and stdout and stderr captured as
text (stdout's ``.buffer`` too). It returns the same `CompletedProcess`.

Not for: a journal this process holds open (LMDB opens an environment once
per process), signals (Ctrl-C), what only a fresh interpreter shows (which
modules ``--import`` brings in, classes the command line does not know), or
the ``python -m actors`` entry point itself. Those run as a subprocess.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from actors._tools._cli import main

__all__ = ["run_in_process"]

_ENV = {"TZ": "UTC", "COLUMNS": "160", "ACTORS_JOURNAL": None}


@contextmanager
def _environment() -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in _ENV}
    try:
        for name, value in _ENV.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        time.tzset()
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        time.tzset()


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8")


def run_in_process(args: list[str], input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m actors ARGS`` in this process: its exit code, stdout and stderr."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    stdin = io.TextIOWrapper(io.BytesIO((input or "").encode("utf-8")), encoding="utf-8")
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = stdin, out, err
    try:
        with _environment():
            try:
                code = main(args)
            except SystemExit as exc:  # argparse: --help, usage errors
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "actors", *args], code, _text(out), _text(err)
    )
