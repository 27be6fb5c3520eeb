"""`bench.instructions`: its workloads run, and its arithmetic takes the
right differences. Nothing here runs valgrind."""

from __future__ import annotations

import pytest
import trio

from bench import _workloads, instructions


@pytest.mark.parametrize("workload", sorted({f.workload for f in instructions.FIGURES}))
def test_every_workload_runs_on_this_tree(workload, monkeypatch):
    monkeypatch.setattr(_workloads, "POLL", 0.001)
    monkeypatch.setenv("CANCEL", "1")
    trio.run(_workloads.run, workload, 3)


def test_a_figure_is_the_difference_of_its_two_runs_per_operation(monkeypatch, tmp_path):
    # A fake count: 1000 instructions to start, then a fixed cost per
    # operation by workload, and a fixed cost for the cancel of a tree.
    per_op = {"call": 7, "proc": 5, "create": 3, "wake": 3 + 11, "send": 17, "many": 19}

    def fake(tree, workload, n, env):
        if workload == "cascade":
            return 1000 + (13 * (n + n * n + 1) if env.get("CANCEL") else 0)
        return 1000 + per_op[workload] * n

    monkeypatch.setattr(instructions, "count", fake)
    found = instructions.measure([tmp_path], instructions.FIGURES)
    assert {
        "ctx.call child": 7,
        "1-step process": 5,
        "create passivated": 3,
        "wake passivated": 11,
        "cancel, per instance of a tree": 13,
        "send, taken by a live instance": 17,
        "send_many, per message taken": 19,
    } == {name: row[str(tmp_path)] for name, row in found.items()}
