"""The mailbox keeps its invariants under any order of arrivals, waits,
abandons and reloads: checked against a plain model, operation by operation."""

from __future__ import annotations

import random

import pytest

from actors import Signal
from actors._kernel._effects import Wait
from actors._kernel._mailbox import Mailbox

NAMES = ["a", "b", "c"]


class Model:
    """What the mailbox must do, written the slow and obvious way."""

    def __init__(self) -> None:
        self.unread: dict[int, str] = {}
        self.taken: set[int] = set()
        self.floor = 0
        self.waits: list[Wait] = []

    def take_match(self, live):
        for wait in sorted(self.waits, key=lambda w: w.seq):
            if wait not in live:
                continue
            for seq in sorted(self.unread):
                if wait.matches(self.unread[seq]) is not None:
                    name = self.unread.pop(seq)
                    self.waits.remove(wait)
                    self.taken.add(seq)
                    return wait, name, seq
        return None


def _wait(seq: int, rng: random.Random) -> Wait:
    names = rng.sample(NAMES, rng.randint(1, 2))
    return Wait(seq, tuple(Signal(n) for n in names), pair=rng.random() < 0.5)


@pytest.mark.parametrize("seed", range(60))
def test_the_mailbox_matches_the_model(seed):
    rng = random.Random(seed)
    box, model = Mailbox(remember_taken=True), Model()
    live: set[Wait] = set()
    next_message, next_wait = 1, 1
    for _ in range(200):
        op = rng.random()
        if op < 0.35:  # a message arrives (sometimes out of commit order)
            seq = next_message + (rng.randint(0, 2) if rng.random() < 0.2 else 0)
            next_message = max(next_message, seq + 1)
            name = rng.choice(NAMES)
            expected = seq not in model.unread and seq not in model.taken and seq > model.floor
            assert expected == box.put(seq, name, {"seq": seq})
            if expected:
                model.unread[seq] = name
        elif op < 0.6:  # a wait starts
            wait = _wait(next_wait, rng)
            next_wait += 1
            box.add_wait(wait)
            model.waits.append(wait)
            live.add(wait)
        elif op < 0.7 and model.waits:  # a wait loses a race
            wait = rng.choice(model.waits)
            box.remove_wait(wait)
            model.waits.remove(wait)
            live.discard(wait)
        elif op < 0.75:  # a reload from the journal: what is unread there now
            floor = next_message - 1
            listed = [(s, (n, {"seq": s}, 0.0)) for s, n in sorted(model.unread.items())]
            added = box.reload(floor, listed)
            assert [] == added  # nothing new: the journal lists what is here
            model.floor = floor
        else:
            found = box.take_match(live)
            expected = model.take_match(live)
            if expected is None:
                assert found is None
            else:
                wait, signal, seq, payload = found
                assert expected == (wait, signal.name, seq)
                assert {"seq": seq} == payload
                live.discard(wait)
        # The invariants, after every operation.
        assert sorted(box.messages) == box.order
        assert {s: n for s, (n, _) in box.messages.items()} == model.unread
        assert not set(box.messages) & (box.taken or set())
        assert sorted(w.seq for w in model.waits) == [w.seq for w in box.waits]


def test_a_reload_drops_what_was_taken_meanwhile_and_adds_what_is_new():
    box = Mailbox(remember_taken=False)
    box.put(1, "a", 1)
    box.put(2, "a", 2)
    # The journal says: 1 was taken (not listed, at or below the floor), 3 is new.
    added = box.reload(3, [(2, ("a", 2, 0.0)), (3, ("b", 3, 0.0))])
    assert [(3, "b", 3)] == added
    assert [2, 3] == box.order
    assert not box.put(1, "a", 1)  # a late hand-over of a taken message is dropped
    assert [2, 3] == box.order
    assert box.put(4, "a", 4)


def test_a_message_after_the_only_unread_one_was_withheld_is_unread():
    box = Mailbox(remember_taken=False)
    box.put(1, "a", 1)
    assert ("a", 1) == box.withhold(1)  # the mailbox's dict is empty now
    assert box.put(2, "a", 2)
    assert [2] == box.order
    box.release(1, ("a", 1), dropped=False)  # unread again, before 2
    assert [1, 2] == box.order
