"""``python -m bench walk``: the calls of the hot flows."""

from bench.walk import _zigzags, measure


async def test_the_walks_count_our_calls_modules_and_zigzags():
    measured = await measure(runs=1, timed=10)
    assert set(measured) == {"send -> wait", "send -> parked again", "start -> result", "ask"}
    found = {name: walk for name, (walk, _) in measured.items()}
    for name, (walk, profile) in measured.items():
        assert walk.all_calls > walk.calls > walk.modules > 1, name
        assert walk.all_modules > walk.modules, name
        assert 0 <= walk.zigzags < walk.calls, name
        # The profile by module adds up to the flow, one row per module.
        assert sum(calls for _, calls in walk.by_module) == walk.calls, name
        assert len(walk.by_module) == walk.modules, name
        assert all(m.startswith(("actors/", "storage/")) for m, _ in walk.by_module), name
        # --time: each flow's time by room, ours among them, most first (the
        # send's profile is its whole run's).
        if name == "send -> wait":
            assert profile is None
            continue
        assert profile is not None and profile.runs == 10, name
        rooms = dict(profile.by_room)
        assert {"storage", "actors: actor", "actors: kernel", "trio"} <= set(rooms), name
        assert all(seconds >= 0 for seconds in rooms.values()), name
        assert [s for _, s in profile.by_room] == sorted(rooms.values(), reverse=True), name
        assert len(profile.lines()) == 1 + len(profile.by_room) + len(profile.top), name
    # Starting a process and running its step goes through more of the
    # runtime than a send does; a send's walk to the receive's return is the
    # beginning of its walk on to the receiver's next park, up to where the
    # process resumes.
    assert found["start -> result"].calls > found["send -> parked again"].calls
    to_return, on = found["send -> wait"], found["send -> parked again"]
    assert to_return.calls < on.calls
    assert to_return.sequence == on.sequence[: to_return.calls]
    assert to_return.sequence[-1] == "actors/_kernel/_effect.py:send"  # resumes the process
    assert to_return.sequence[-1] == "actors/_kernel/_effect.py:send"  # resumes the process


def test_a_zigzag_is_a_return_into_a_module_left_before():
    # a -> b -> a -> (back to b: a zig-zag, b was entered under a) ...
    events = [("call", "a"), ("call", "b"), ("call", "a"), ("return", "a"), ("return", "b")]
    assert _zigzags(events) == 0  # back to b from a: b is not below itself
    events = [("call", "a"), ("call", "b"), ("call", "a"), ("call", "b"), ("return", "b")]
    assert _zigzags(events) == 1  # back into a, which the flow had left for b
    # Calls within one module, and straight returns down the stack, are no zig-zag.
    events = [("call", "a"), ("call", "a"), ("return", "a"), ("call", "b"), ("return", "b")]
    assert _zigzags(events) == 0
