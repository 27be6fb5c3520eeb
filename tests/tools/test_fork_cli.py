"""The command line's ``fork`` and ``mail``: one address or every failed
instance of a process after a named step, with a dry run that writes
nothing; directly to a journal no system holds (with the process's code
from ``--import``) and through a running system's control socket."""

from __future__ import annotations

import json

import pytest
import trio

import actors
from storage import LMDBJournal
from tests.system.test_fork import BUG, RAN, order_no_compensation, stop, waits
from tests.system.test_mail import inbox, item, other, picky, until_status
from tests.tools.test_cli import run_cli, run_json

PROCS = [order_no_compensation, waits, picky, inbox]


async def _failed_orders(path, *ids):
    async with actors.open_system(LMDBJournal(path), processes=PROCS) as system:
        BUG.add("ship")
        handles = [await system.start(order_no_compensation, i) for i in ids]
        for handle in handles:
            with pytest.raises(actors.ProcessFailed):
                await handle.result()
        BUG.clear()
        done = await system.start(order_no_compensation, "o-ok")
        await done.result()


def cli(path, *args):
    return trio.to_thread.run_sync(lambda: run_cli(path, *args))


async def test_bulk_fork_after_a_step_with_a_dry_run_first(tmp_path):
    path = tmp_path / "journal"
    await _failed_orders(path, "o-1", "o-2", "o-3")
    bulk = (
        "fork",
        "--process",
        "orders/:order_id",
        "--status",
        "failed",
        "--after-step",
        "charge_card",
    )
    done = await cli(path, *bulk, "--dry-run")
    assert 2 == done.returncode, done.stdout
    assert "pass --import MODULE for the module that defines 'orders/:order_id'" in done.stderr
    done = await cli(path, *bulk, "--dry-run", "--import", "tests.system.test_fork")
    assert 2 == done.returncode
    assert (
        "the --import'ed modules define 'orders/:order_id' 3 times (order, "
        "order_no_compensation, order_changed); import only the module"
    ) in done.stderr
    done = await cli(path, *bulk, "--dry-run", "--import", "tests.tools.test_fork_cli")
    assert 0 == done.returncode, done.stderr
    lines = done.stdout.splitlines()
    assert [
        f"would fork orders/o-{n} (failed) from effect 2: keeps step reserve, step "
        "charge_card; runs again emit, step ship"
        for n in (1, 2, 3)
    ] == lines
    async with actors.open_system(LMDBJournal(path), processes=PROCS) as system:
        assert ["failed"] * 3 == [system.get(f"orders/o-{n}").status for n in (1, 2, 3)]
    RAN.clear()
    doc = json.loads(
        (await cli(path, "--json", *bulk, "--import", "tests.tools.test_fork_cli")).stdout
    )
    assert [2, 2, 2] == [f["incarnation_made"] for f in doc["forks"]]
    assert not doc["dry_run"] and not doc["through_system"]
    async with actors.open_system(LMDBJournal(path), processes=PROCS) as system:
        for n in (1, 2, 3):
            result = await system.get(f"orders/o-{n}").result()
            assert f"shipped o-{n}" == result["steps"][2]
        assert 0 == RAN["charge_card"] + RAN["reserve"]
        assert 3 == RAN["ship"]


async def test_fork_of_one_address_directly_and_through_a_running_system(tmp_path):
    path = tmp_path / "journal"
    await _failed_orders(path, "o-4", "o-5")
    done = await cli(
        path, "fork", "orders/o-4", "--from", "9", "--import", "tests.tools.test_fork_cli"
    )
    assert 2 == done.returncode
    assert "its log ends at position 4; fork from 0 to 4" in done.stderr
    done = await cli(path, "fork", "orders/o-4", "--from", "1")
    assert 2 == done.returncode  # no system runs, and the process's code was not given
    assert "pass --import MODULE" in done.stderr
    done = await cli(
        path, "fork", "orders/o-4", "--from", "1", "--import", "tests.tools.test_fork_cli"
    )
    assert 0 == done.returncode, done.stderr
    assert done.stdout.startswith("forked orders/o-4 (failed) from effect 1 as incarnation 2")
    async with actors.open_system(LMDBJournal(path), processes=PROCS) as system:
        assert "shipped o-4" == (await system.get("orders/o-4").result())["steps"][2]
        # Through the running system, which checks the replay on its own code.
        doc = json.loads(
            (await cli(path, "--json", "fork", "orders/o-5", "--after-step", "charge_card")).stdout
        )
        assert doc["through_system"]
        assert 2 == doc["forks"][0]["incarnation_made"]
        assert "shipped o-5" == (await system.get("orders/o-5").result())["steps"][2]
        live = await system.start(waits, "w-1")
        done = await cli(path, "fork", "waits/w-1", "--from", "0")
        assert 2 == done.returncode
        assert "cannot fork 'waits/w-1': it is" in done.stderr
        await system.send("waits/w-1", stop, None)
        await live.result()


async def test_mail_lists_drops_and_shows_the_dead_letters(tmp_path):
    path = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(path), processes=PROCS) as system:
        await system.start(picky, "p-1")
        await system.send("picky/p-1", other, {"bad": True})
        await system.send("picky/p-1", other, {"bad": False})
        first = (await system.mail("picky/p-1"))[0]
        doc = json.loads((await cli(path, "--json", "mail", "picky/p-1")).stdout)
        assert [{"bad": True}, {"bad": False}] == [m["payload"] for m in doc["unread"]]
        # Through the running system.
        done = await cli(path, "mail", "picky/p-1", "--drop", str(first.id))
        assert 0 == done.returncode, done.stderr
        assert "through the running system" in done.stdout
        assert [{"bad": False}] == [m.payload for m in await system.mail("picky/p-1")]
    # Directly, with no system running.
    second = run_json(path, "mail", "picky/p-1")["unread"][0]["id"]
    done = await cli(path, "mail", "picky/p-1", "--drop", str(second))
    assert 0 == done.returncode, done.stderr
    done = await cli(path, "mail", "picky/p-1", "--drop", str(second))
    assert 3 == done.returncode
    assert "has no unread message" in done.stderr
    doc = run_json(path, "mail", "picky/p-1", "--dropped")
    assert [{"bad": True}, {"bad": False}] == [d["payload"] for d in doc["dropped"]]
    shown = run_cli(path, "show", "picky/p-1").stdout
    assert "dropped: 2 messages ('actors mail picky/p-1 --dropped')" in shown
    async with actors.open_system(LMDBJournal(path), processes=PROCS) as system:
        await system.send("picky/p-1", item, "go")
        assert "go" == await system.get("picky/p-1").result()


async def test_show_names_the_message_a_crash_looping_instance_was_handling(tmp_path):
    path = tmp_path / "journal"
    async with actors.open_system(LMDBJournal(path), processes=PROCS) as system:
        await system.start(inbox, "i-1")
        for n in range(4):
            await system.send("inbox/i-1", item, f"bad {n}")
        await until_status(system, "inbox/i-1", "failed")
        poison = await system.poison("inbox/i-1")
    shown = run_cli(path, "show", "inbox/i-1").stdout
    assert (
        f'failed while handling #{poison.id} item (taken at effect #1, after 3 restarts)  "bad 3"'
    ) in shown
    doc = run_json(path, "mail", "inbox/i-1")
    assert {"id": poison.id, "signal": "item", "payload": "bad 3", "sent": None} == doc["handling"]
    assert 0 == run_cli(path, "mail", "inbox/i-1", "--drop", str(poison.id)).returncode
    assert ["bad 3"] == [
        d["payload"] for d in run_json(path, "mail", "inbox/i-1", "--dropped")["dropped"]
    ]
