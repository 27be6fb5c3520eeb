"""``python -m bench.shapes``: the throughput shapes' profile per operation."""

import pytest

from bench.shapes import SHAPES, main, profile


@pytest.mark.parametrize("shape", ["signals", "step1"])
def test_a_shape_is_profiled_per_operation_by_room(shape, capsys):
    lines = profile(shape, 0.4)
    head, calls, total, *rooms = lines
    assert head.startswith(f"{shape}: {SHAPES[shape][0]}")
    operations = int(head.split("; ")[1].split(" in the run")[0].replace(",", ""))
    assert operations > 0
    # Every operation makes Python calls of ours; the rooms' shares are listed
    # with ours among them.
    assert int(calls.split()[0]) > 10
    assert " us a run (profiled)" in total
    assert any("actors: actor" in line for line in rooms)
    assert any("storage" in line for line in rooms)


def test_the_command_prints_the_shapes_named(capsys):
    assert main(["step10", "--seconds", "0.3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step10: a 10-step process ended")


def test_an_unknown_shape_is_refused_naming_the_shapes(capsys):
    with pytest.raises(SystemExit):
        main(["signal"])
    assert "unknown shape(s) signal; choose from signals, many" in capsys.readouterr().err
