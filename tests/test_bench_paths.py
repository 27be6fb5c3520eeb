"""``python -m bench.paths``: the calls on the signal and 1-step paths."""

from bench.paths import measure


async def test_the_paths_count_calls_and_modules_ours_among_them():
    found = await measure(runs=1)
    assert set(found) == {"signal", "1-step"}
    for name, (calls, modules, ours, our_modules) in found.items():
        assert calls > ours > 0, name
        assert modules > our_modules > 1, name
        assert calls > modules and ours > our_modules, name
    # Starting a process and running its step goes through more of the
    # runtime than a send does.
    assert found["1-step"][2] > found["signal"][2]
