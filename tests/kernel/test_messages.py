"""The mailbox record's stored form (actors/_kernel/_mailbox.py): every form a
journal holds reads back, and what the runtime writes is what it wrote
before the record had a class (so journals are unchanged). A message's
extra is carried as stored; an ask's (actors/_features/_ask_forms.py) reads
as an `Asker`."""

from __future__ import annotations

from hypothesis import given, strategies as st

from actors._features._ask_forms import Asker
from actors._kernel._mailbox import StoredMessage
from storage import decode, encode

texts = st.text(max_size=20)
payloads = st.none() | st.integers() | texts | st.lists(st.integers(), max_size=3)
askers = st.builds(Asker, texts, texts, st.none() | texts)
extras = askers.map(Asker.to_stored)  # the one kind of extra there is
messages = st.builds(
    StoredMessage,
    texts,
    payloads,
    st.none() | st.floats(allow_nan=False),
    st.none() | texts,
    st.none() | extras,
)


@given(messages)
def test_a_message_reads_back_as_it_was_stored(message):
    assert StoredMessage.from_stored(decode(encode(message.to_stored()))) == message


@given(askers)
def test_an_asker_reads_back_from_its_stored_form(asker):
    stored = decode(encode(asker.to_stored()))
    assert stored == [asker.ask_id, asker.reply_to, asker.node]
    assert Asker.from_stored(stored) == asker


@given(messages)
def test_the_stored_form_is_the_one_journals_hold(message):
    # [signal, payload, sent, trace, extra]: a trace only when there is one or
    # an extra follows it; an ask's extra as [id, reply-to, node].
    expected = [message.signal, message.payload, message.sent_at]
    if message.extra is not None:
        expected += [message.trace, message.extra]
    elif message.trace is not None:
        expected.append(message.trace)
    assert message.to_stored() == expected
    assert (
        StoredMessage.stored(
            message.signal, message.payload, message.sent_at, message.trace, message.extra
        )
        == expected
    )


def test_older_shorter_forms_read():
    assert StoredMessage.from_stored(["s", 1]) == StoredMessage("s", 1)
    assert StoredMessage.from_stored(["s", 1, 2.0]) == StoredMessage("s", 1, 2.0)
    assert StoredMessage.from_stored(["s", 1, 2.0, "t"]) == StoredMessage("s", 1, 2.0, "t")
    # An ask written before asks named their node: carried as stored, read
    # by the feature.
    old = StoredMessage.from_stored(["s", 1, 2.0, None, ["id", "asker/1"]])
    assert old.extra == ["id", "asker/1"]
    assert Asker.from_stored(old.extra) == Asker("id", "asker/1", None)
    # An empty extra is none.
    assert StoredMessage.from_stored(["s", 1, 2.0, None, []]).extra is None
