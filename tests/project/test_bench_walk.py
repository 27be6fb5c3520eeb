"""``python -m bench walk``: the calls of the hot flows."""

from bench.walk import _zigzags, measure


async def test_the_walks_count_our_calls_modules_and_zigzags():
    found = await measure(runs=1)
    assert set(found) == {"send -> wait", "start -> result", "ask"}
    for name, walk in found.items():
        assert walk.all_calls > walk.calls > walk.modules > 1, name
        assert walk.all_modules > walk.modules, name
        assert 0 <= walk.zigzags < walk.calls, name
        # The profile by module adds up to the flow, one row per module.
        assert sum(calls for _, calls in walk.by_module) == walk.calls, name
        assert len(walk.by_module) == walk.modules, name
        assert all(m.startswith(("actors/", "storage/")) for m, _ in walk.by_module), name
    # Starting a process and running its step goes through more of the
    # runtime than a send does.
    assert found["start -> result"].calls > found["send -> wait"].calls


def test_a_zigzag_is_a_return_into_a_module_left_before():
    # a -> b -> a -> (back to b: a zig-zag, b was entered under a) ...
    events = [("call", "a"), ("call", "b"), ("call", "a"), ("return", "a"), ("return", "b")]
    assert _zigzags(events) == 0  # back to b from a: b is not below itself
    events = [("call", "a"), ("call", "b"), ("call", "a"), ("call", "b"), ("return", "b")]
    assert _zigzags(events) == 1  # back into a, which the flow had left for b
    # Calls within one module, and straight returns down the stack, are no zig-zag.
    events = [("call", "a"), ("call", "a"), ("return", "a"), ("call", "b"), ("return", "b")]
    assert _zigzags(events) == 0
