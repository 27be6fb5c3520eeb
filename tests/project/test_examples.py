"""Run each program in examples/ as a user would, so the examples cannot rot.

Each runs in a subprocess on a journal in tmp_path, in real time (the
examples keep their timers short), and must exit 0 printing its key lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: object, timeout: float = 20) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert 0 == done.returncode, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def test_order_saga(tmp_path):
    lines = [line.strip() for line in run_example("order_saga.py", tmp_path / "journal", 0.5)]
    assert "o-1: charged 100 on attempt 2" in lines  # the retry took over after attempt 1
    completed = "o-1: completed: {'order': 'o-1', 'charge': 'charge-o-1', 'approved_by': 'ann'}"
    assert completed in lines
    assert not any(line.startswith("o-1: compensating") for line in lines)
    compensations = [line for line in lines if line.startswith("o-2: compensating")]
    assert [
        "o-2: compensating: release reservation-o-2",
        "o-2: compensating: refund 250 of charge-o-2",
    ] == compensations  # newest step first
    assert lines[-1] == "o-2: failed: 'orders/o-2' failed: NotApproved: no approval within 0.5 s"


def test_chat_room(tmp_path):
    lines = run_example("chat_room.py", tmp_path / "journal")
    phone = [line.split("phone: ")[1] for line in lines if "phone: #" in line]
    assert [
        "#1 (run 0) ann join",
        "#2 (run 0) bob join",
        "#3 (run 0) ann say: hi bob",
        # disconnected after #3; the reconnect continues right after its cursor
        "#4 (run 0) bob say: hi!",
        "#5 (run 1) cy join",
        "#6 (run 1) cy say: what did I miss?",
        "#7 (run 1) bob leave",
        "#8 (run 1) ann say: bye bob",
    ] == phone
    reconnect = lines.index("phone reconnects and continues from its cursor")
    assert lines[reconnect + 1] == "  phone: #4 (run 0) bob say: hi!"
    assert "archive read every event live: [1, 2, 3, 4, 5, 6, 7, 8]" in lines
    assert lines[-1] == "room closed after 8 events; exports {'members': ['ann', 'cy']}"


def test_fan_out(tmp_path):
    lines = run_example("fan_out.py", tmp_path / "journal")
    assert lines[0].startswith("scope finished 100 children in ")
    assert "batch result: {'items': 100, 'sum': 328350, 'max': 9801}" in lines
    hb = "batches/b1/heartbeat/hb"
    assert (
        f"{hb} was restarted: restart 1 after RuntimeError('lost the connection to the monitor')"
    ) in lines
    assert f"{hb} is suspended after 1 restart(s)" in lines
    assert f"{hb} is cancelled: parent batches/b1 completed" in lines
    assert lines[-1].startswith("100 item children completed, e.g. batches/b1/items/")


def test_typed_orders(tmp_path):
    # CI also checks this program with mypy --strict (pyproject's [tool.mypy] files).
    lines = run_example("typed_orders.py", tmp_path / "journal")
    assert [
        "orders/o-1: completed",
        "  3 x book at 12.50",
        "  total 37.50, reservation-book-3",
    ] == lines
    again = run_example("typed_orders.py", tmp_path / "journal")
    assert lines == again  # the finished order and its Receipt read back from the journal


def test_accounts(tmp_path):
    lines = run_example("accounts.py", tmp_path / "journal")
    assert [
        "ann deposits 50: {'ok': True, 'balance': 150}",
        "bob after a retried deposit: 30",  # the retry with the same key stored nothing
        "bob withdraws 80: {'ok': False, 'why': 'bob has 30, not 80'}",
        "-- closed and opened again --",
        "ann's balance: 150",
        "t1: moved 120 from ann to bob",
        "t2: refused: bob has 150, not 500",
        "ann's balance: 30",
        "bob's balance: 150",
        "cy: unknown",
    ] == lines


@pytest.mark.slow  # two interpreters, a SIGKILL and real-time sleeps: about 3 s
def test_restart_demo(tmp_path):
    lines = run_example("restart_demo.py", "demo", tmp_path / "journal", timeout=30)
    keys = [f"counters/demo/1/0/tick/{n}" for n in range(1, 7)]
    assert any(line.startswith("killed pid ") and "exit status -9" in line for line in lines)
    killed = next(i for i, line in enumerate(lines) if line.startswith("killed pid "))
    first, second = lines[:killed], lines[killed + 1 :]
    assert [f"step {n} ran: key {keys[n - 1]} attempt 1" for n in (1, 2, 3)] == [
        line.split("]  ", 1)[1].strip() for line in first if "step " in line
    ]
    assert any("found counters/demo" in line for line in second)  # resumed, not started anew
    assert [f"step {n} ran: key {keys[n - 1]} attempt 1" for n in (4, 5, 6)] == [
        line.split("] ", 1)[1].strip() for line in second if "] step " in line
    ]  # steps 1-3 were recorded, so they did not run again
    assert any(line.endswith("counters/demo finished, total 21") for line in second)
    assert lines[-1] == "steps run twice: none"


def test_queue_fan_out(tmp_path):
    lines = run_example("queue_fan_out.py", tmp_path / "journal")
    assert lines[0].startswith("queued: ")
    assert "page urgent" in lines
    assert "200 fetches done; at most 10 at once" in lines
    assert int(lines[-1].split("ahead of ")[1].split(" ")[0]) > 0  # it jumped the line


def test_nightly_schedule(tmp_path):
    lines = run_example("nightly_schedule.py", tmp_path / "journal")
    assert lines[0].startswith("schedule eu-reports: next tick 20")
    count = int(lines[1].split()[0])
    assert 3 <= count <= 6  # about one a second, the missed one caught up once
    reports = [line.strip() for line in lines[2 : 2 + count]]
    assert all(line.startswith("report for eu at 20") for line in reports)
    assert len(set(reports)) == count
    assert lines[-1].startswith("paused after reports/eu/20")


def test_shipping(tmp_path):
    assert [
        "shipped o-17: 4 instances reached",
        "ann earns 10 points for o-17",
        "closed; opening again",
        "the shipping service retried: 0 instances reached",
        "o-17 shipped by DHL; p1 delivered (JD0142), p2 delivered (JD0142)",
        "warehouse unread: []",
    ] == run_example("shipping.py", tmp_path / "journal")


def test_billing(tmp_path):
    lines = run_example("billing.py", tmp_path)
    sections: dict[str, list[str]] = {"start": []}
    for line in lines:  # within a day, the processes print in no fixed order
        if line.startswith(("day ", "-- ")):
            sections[line] = []
        else:
            sections[list(sections)[-1]].append(line.strip())
    assert {
        "start": [],
        "day 3:": sorted(
            [
                "email to cy: cancelled during the trial; you were not charged",
                "bank: charged ann 10",  # the trial ended on day 14
                "email to bob: your card was declined for month 1; please send a new one",
            ]
        ),
        "day 16:": ["bank: charged bob 10"],  # the new card, at once
        "day 20:": sorted(
            [
                "bank: charged ann 20",
                "bank: charged bob 90",
                "email to ann: you are on pro now",
                "email to bob: the upgrade to enterprise failed; we refunded 90",
            ]
        ),
        # the journal was closed on day 30 and opened again: month 2's charges
        # (days 44 and 46) come from the reopened journal, each made once
        "day 30:": [],
        "-- closed; the journal opened again --": ["bank: charged ann 30", "bank: charged bob 10"],
        "day 50:": sorted(
            [
                "email to bob: cancelled; basic runs to the end of month 2",
                "bank: charged ann 30",
                "ann: 3 months, ending on pro",
                "bob: cancelled in month 2 on basic",
                "cy: cancelled during the trial",
            ]
        ),
        "day 110:": [
            "ann paid 90, refunded 0",
            "bob paid 20, refunded 90",
            "charges made twice: none",
        ],
    } == {day: sorted(got) if day != "day 110:" else got for day, got in sections.items()}


HELPED = [
    *[("examples", path.name) for path in sorted((ROOT / "examples").glob("*.py"))],
    *[
        ("docs/examples", path.name)
        for path in sorted((ROOT / "docs" / "examples").glob("*.py"))
        if path.name != "testing_example.py"
    ],  # a pytest module, run by pytest
    ("-m", "actors"),
    ("-m", "actors web"),
    ("-m", "bench"),
    ("-m", "bench.instructions"),
    ("-m", "bench.journal_cpu"),
    ("-m", "bench.wake_cpu"),
    ("-m", "tests.simulation"),
]


@pytest.mark.parametrize("where, name", HELPED, ids=[f"{w}/{n}" for w, n in HELPED])
def test_every_example_and_command_takes_help(tmp_path, where, name):
    """`--help` prints a usage and exits 0, creating nothing: no journal named '--help'."""
    if where == "-m":
        command = [sys.executable, "-m", *name.split(), "--help"]
    else:
        command = [sys.executable, str(ROOT / where / name), "--help"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert (0, "") == (done.returncode, done.stderr)
    assert done.stdout.startswith("usage: "), done.stdout
    assert [] == list(tmp_path.iterdir())
