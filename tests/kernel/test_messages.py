"""The mailbox record's stored form (actors/_kernel/_mailbox.py): every form a
journal holds reads back, and what the runtime writes is what it wrote
before the record had a class (so journals are unchanged)."""

from __future__ import annotations

from hypothesis import given, strategies as st

from actors._kernel._mailbox import Asker, StoredMessage
from storage import decode, encode

texts = st.text(max_size=20)
payloads = st.none() | st.integers() | texts | st.lists(st.integers(), max_size=3)
askers = st.builds(Asker, texts, texts, st.none() | texts)
messages = st.builds(
    StoredMessage,
    texts,
    payloads,
    st.none() | st.floats(allow_nan=False),
    st.none() | texts,
    st.none() | askers,
)


@given(messages)
def test_a_message_reads_back_as_it_was_stored(message):
    assert StoredMessage.from_stored(decode(encode(message.to_stored()))) == message


@given(messages)
def test_the_stored_form_is_the_one_journals_hold(message):
    # [signal, payload, sent, trace, ask]: a trace only when there is one or
    # an ask follows it; an ask as [id, reply-to, node].
    expected = [message.signal, message.payload, message.sent_at]
    if message.asker is not None:
        asker = message.asker
        expected += [message.trace, [asker.ask_id, asker.reply_to, asker.node]]
    elif message.trace is not None:
        expected.append(message.trace)
    assert message.to_stored() == expected
    assert (
        StoredMessage.stored(
            message.signal, message.payload, message.sent_at, message.trace, message.asker
        )
        == expected
    )


def test_older_shorter_forms_read():
    assert StoredMessage.from_stored(["s", 1]) == StoredMessage("s", 1)
    assert StoredMessage.from_stored(["s", 1, 2.0]) == StoredMessage("s", 1, 2.0)
    assert StoredMessage.from_stored(["s", 1, 2.0, "t"]) == StoredMessage("s", 1, 2.0, "t")
    # An ask written before asks named their node.
    old = StoredMessage.from_stored(["s", 1, 2.0, None, ["id", "asker/1"]])
    assert old.asker == Asker("id", "asker/1", None)
    # An empty ask is none.
    assert StoredMessage.from_stored(["s", 1, 2.0, None, []]).asker is None
