"""What ``show``, ``mail`` and the inspector call a log entry and a failure.

A ``ctx.receive`` is stored as a "wait" entry holding the signal it took:
the log lists it as a receive, a ``ctx.wait`` as a wait. A run that failed
at an effect a crash cut short (an ``at_most_once`` step) names that effect,
not the message it took before it: the message failed nothing, and dropping
it would lose it; a run whose step raised on the message it took names both.

The crash is simulated in process as in tests/features/test_step_crashes.py: the step
copies the journal's files while its attempt runs (the state a SIGKILL then
would leave) and the copy is opened as the restart.
"""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path
from urllib.parse import quote

import pytest
import trio

pytest.importorskip("starlette", reason="install the 'web' extra")

import actors
from actors import Context, Signal, process
from actors._tools._web import create_app
from storage import LMDBJournal
from tests.cli_runner import run_in_process
from tests.tools.test_web import call

go, more, cancel = Signal("go"), Signal("more"), Signal("cancel")


@process("talk/:id")
async def talk(ctx: Context, id: str) -> None:
    await ctx.wait(go)
    await ctx.receive(go, more)
    await ctx.wait(more)


async def refund(source: str, crashed: str) -> None:
    shutil.copytree(source, crashed, ignore=shutil.ignore_patterns("owner.lock", "*control.sock*"))
    await trio.sleep_forever()  # the process "died" here


@process("subs/:id")
async def sub(ctx: Context, id: str, *, source: str, crashed: str) -> None:
    await ctx.receive(cancel)
    await ctx.step(refund, source, crashed, at_most_once=True)


def parse(text: str) -> str:
    raise ValueError(f"cannot parse {text!r}")


@process("inbox/:id")
async def inbox(ctx: Context, id: str) -> None:
    _, text = await ctx.receive(go)
    await ctx.step(parse, text)


PROCESSES = [talk, sub, inbox]


async def cli(*args: object) -> str:
    done = await trio.to_thread.run_sync(run_in_process, [str(a) for a in args])
    assert (0, "") == (done.returncode, done.stderr)
    return done.stdout


async def page(journal: Path, address: str) -> str:
    async with LMDBJournal(journal, readonly=True) as opened:
        app = create_app(opened, source=str(journal))
        status, _, body = await call(app, "/instance?address=" + quote(address, safe=""))
    assert 200 == status
    return html.unescape(body)


async def test_a_receive_is_listed_as_a_receive_and_a_wait_as_a_wait(tmp_path):
    journal = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(journal), processes=PROCESSES) as system:
        handle = await system.start(talk, "t-1")
        await system.send("talk/t-1", go, 1)
        await system.send("talk/t-1", more, 2)
        with trio.fail_after(10):  # until it took both and waits for another
            while await system.mail("talk/t-1") or handle.status != "suspended":
                await trio.sleep(0.01)
    doc = json.loads(await cli("--journal", journal, "--json", "show", "talk/t-1"))
    assert [("wait", "go", "got: 1"), ("receive", "go,more", "got more: 2")] == [
        (i["kind"], i["name"], i["outcome"]) for i in doc["log"]
    ]
    text = await cli("--journal", journal, "show", "talk/t-1")
    rows = [line.split() for line in text.splitlines() if line.strip()[:1] in ("1", "2")]
    assert [["1", "wait", "go"], ["2", "receive", "go,more"]] == [r[:3] for r in rows]
    body = await page(journal, "talk/t-1")
    assert "<td>wait</td>" in body and "<td>receive</td>" in body


async def test_a_run_failed_by_a_crash_names_the_effect_not_the_message(tmp_path):
    journal, crashed = tmp_path / "journal", tmp_path / "crashed"
    async with actors.open_system(LMDBJournal(journal), processes=PROCESSES) as system:
        await system.start(sub, "s-1", source=str(journal), crashed=str(crashed))
        await system.send("subs/s-1", cancel, {"why": "moving"})
        with trio.fail_after(10):
            while not crashed.exists():
                await trio.sleep(0.01)
    async with actors.open_system(LMDBJournal(crashed), processes=PROCESSES) as system:
        handle = system.get("subs/s-1")
        assert handle is not None
        with pytest.raises(actors.ProcessFailed, match="interrupted by a crash"):
            await handle.result()  # the at_most_once step is not run again
        assert None is await system.poison("subs/s-1")  # the cancel failed nothing
    label = "step 'refund' (effect #2), cut short by a crash: no message it took failed it"
    text = await cli("--journal", crashed, "show", "subs/s-1")
    assert f"  failed at     {label}" in text.splitlines()
    assert "failed while handling" not in text
    mail = json.loads(await cli("--journal", crashed, "--json", "mail", "subs/s-1"))
    assert (None, label) == (mail["handling"], mail["failed_at"]["label"])
    assert f"it failed at {label}" in await cli("--journal", crashed, "mail", "subs/s-1")
    body = await page(crashed, "subs/s-1")
    assert f'<p class="error" id="failed-at">failed at {label}</p>' in body
    assert 'id="handling"' not in body


async def test_a_step_that_raised_on_the_message_names_both(tmp_path):
    journal = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(journal), processes=PROCESSES) as system:
        handle = await system.start(inbox, "i-1")
        await system.send("inbox/i-1", go, "garbage")
        with pytest.raises(actors.ProcessFailed, match="cannot parse"):
            await handle.result()
        poison = await system.poison("inbox/i-1")
        assert poison is not None and "garbage" == poison.payload
    text = await cli("--journal", journal, "show", "inbox/i-1")
    assert "  failed at     step 'parse' (effect #2)" in text.splitlines()
    assert f'failed while handling #{poison.id} go (taken at effect #1)  "garbage"' in text
    mail = json.loads(await cli("--journal", journal, "--json", "mail", "inbox/i-1"))
    assert ("garbage", False) == (mail["handling"]["payload"], mail["failed_at"]["crashed"])
    body = await page(journal, "inbox/i-1")
    assert "failed at step 'parse' (effect #2)</p>" in body
    assert f"failed while handling message #{poison.id} go" in body
