"""The command line never writes a journal-derived string to the terminal
raw: an error message, a payload, an export or a stream value holding
``ESC]0;...BEL`` (retitle the terminal), ``ESC[2J`` (clear it), an 8-bit CSI
or a bidi override comes out escaped from every command, in text and in
``--json`` (where the document still parses to the very string)."""

from __future__ import annotations

import json

import pytest
import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal
from tests.cli_runner import run_in_process
from tests.runtime_helpers import virtual_wall, wait_status

go = Signal("go")
# Retitle the terminal, clear it, an 8-bit CSI (red), a right-to-left override.
EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil"


@process("esc/:id")
async def hostile(ctx: Context, id: str) -> None:
    await ctx.publish({"note": EVIL})
    await ctx.emit({"note": EVIL})
    if await ctx.wait(go) == "fail":
        raise ValueError(EVIL)


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` a terminal could act on."""
    return sorted({ch for ch in text if not ch.isprintable() and ch != "\n"})


@pytest.fixture
async def journal(tmp_path, autojump_clock):
    path = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(path), [hostile], now=virtual_wall) as system:
        failed = await system.start(hostile, "failed")
        assert "suspended" == await wait_status(failed, "suspended")
        await system.send("esc/failed", go, "fail")
        assert "failed" == await wait_status(failed, "failed")
        waiting = await system.start(hostile, "waiting")
        assert "suspended" == await wait_status(waiting, "suspended")
        await system.send("esc/waiting", go, {"note": EVIL})
        await system.send("esc/waiting", Signal("other"), EVIL)
    return path


COMMANDS = [
    ["list"],
    ["list", "--status", "failed"],
    ["show", "esc/failed"],
    ["show", "esc/failed", "--traceback"],
    ["show", "esc/waiting"],
    ["mail", "esc/waiting"],
    ["tail", "esc/failed", "--consumer", "ops"],
    ["consumers", "esc/failed"],
    ["stats"],
]


async def cli(journal, *args: str):
    return await trio.to_thread.run_sync(lambda: run_in_process(["--journal", str(journal), *args]))


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
async def test_every_command_escapes_what_the_journal_holds(journal, command):
    done = await cli(journal, *command)
    assert 0 == done.returncode, done.stderr
    assert [] == unsafe(done.stdout) + unsafe(done.stderr)


async def test_show_and_mail_print_the_escapes_where_the_strings_were(journal):
    shown = (await cli(journal, "show", "esc/failed")).stdout
    assert "ValueError: \\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eevil" in shown
    mail = (await cli(journal, "mail", "esc/waiting")).stdout
    assert '"\\u001b]0;pwned\\u0007\\u001b[2J\\x9b31m\\u202eevil"' in mail


@pytest.mark.parametrize(
    "command",
    [["show", "esc/failed"], ["mail", "esc/waiting"], ["tail", "esc/failed", "--consumer", "j"]],
    ids=" ".join,
)
async def test_json_output_is_escaped_and_parses_to_the_same_strings(journal, command):
    done = await cli(journal, "--json", *command)
    assert 0 == done.returncode, done.stderr
    assert [] == unsafe(done.stdout)
    assert EVIL in strings(json.loads(done.stdout))


def strings(doc: object) -> list[str]:
    """Every string in a JSON document."""
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in strings(k) + strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in strings(v)]
    return []


def test_export_to_a_terminal_escapes_what_a_terminal_would_act_on(tmp_path):
    # A terminal gets every character past ASCII as a JSON escape (a C1
    # control, a bidi override); the JSON still reads back the same.
    import os
    import pty
    import subprocess
    import sys

    import trio

    import actors
    from actors._tools._history import loads
    from storage import LMDBJournal

    @actors.process("notes/:id")
    async def note(ctx: actors.Context, id: str, *, text: str) -> str:
        return text

    text = "a\x9b2Jb\u202ec"  # CSI (C1) and RIGHT-TO-LEFT OVERRIDE

    async def make() -> None:
        async with actors.open_system(LMDBJournal(tmp_path / "j"), [note]) as system:
            assert text == await (await system.start(note, "n-1", text=text)).result()

    trio.run(make)
    leader, follower = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(os.getcwd()))
    done = subprocess.run(
        [sys.executable, "-m", "actors", "--journal", str(tmp_path / "j"), "export", "notes/n-1"],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
        timeout=120,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the follower side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    out = b"".join(chunks)
    assert 0 == done.returncode, done.stderr
    assert out.isascii()
    assert b"\\u009b" in out and b"\\u202e" in out
    (exported,) = loads(out.replace(b"\r\n", b"\n")).instances  # the tty's line ends
    assert {"text": text} == exported.record.input
