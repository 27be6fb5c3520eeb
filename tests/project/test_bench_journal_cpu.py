"""``python -m bench.journal_cpu``: CPU time per durable commit, as a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.journal_cpu import cpu_per_commit, main


@pytest.mark.parametrize("writers", [1, 8])
def test_cpu_per_commit_counts_the_commits_of_every_writer(tmp_path: Path, writers: int) -> None:
    total, user, system = cpu_per_commit(tmp_path, writers, commits=80)
    assert total > 0
    assert user >= 0 and system >= 0


def test_the_table_has_a_row_per_writer_count(tmp_path: Path, capsys) -> None:
    main(["--commits", "40", "--runs", "1", "--dir", str(tmp_path), "1", "4"])
    lines = capsys.readouterr().out.splitlines()
    assert ["writers", "1", "4"] == [line.split()[0] for line in lines]
