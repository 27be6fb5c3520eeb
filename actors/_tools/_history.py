"""Histories you can take home: an instance's records in a portable file.

``python -m actors export ADDRESS`` writes one; `actors.testing.replay_history`
replays it against local code, and ``python -m actors import FILE`` puts it
into another journal, where a system resumes the instance. docs/histories.md
documents the format field by field; this module is its only reader and
writer.

The file is one JSON document (UTF-8): ``{"format": "actors-history",
"version": 1, "exported": ..., "address": ..., "instances": [...]}``, the
exported instance first, then its descendants (the children its runs name
that are still in the journal, depth first). Each instance carries its
record, every run's log the journal holds, unread mail, timers, stream,
consumer cursors, send keys, and the records of earlier incarnations a
retry kept. Nothing in it is the journal's own encoding: records and log
entries have their fields' full names, values are JSON, and a value JSON
cannot carry (a tuple, bytes, a datetime, a ``@serializable`` class, ...)
is an object with one ``"$tag"`` key (see `_history_values`). A reader refuses a
``version`` it does not know, with `HistoryFormatError`, rather than
misreading it, and a file that fails the checks `start` makes of the same
things (`_history_checks`: addresses, names, statuses, times, depth).

Importing writes every instance of the file in one transaction, on
condition that none exists at its address (or, with ``replace``, that each
one there is still what was read): all or nothing. Unread messages get new
ids in the new journal, in their order (the log never refers to an unread
one); an asked message is imported as sent (its asker is in the other
journal).

The file's document is `_history_document`'s, its bytes `_history_file`'s,
reading a journal and importing into one `_history_journal`'s; this module
holds them all.
"""

from __future__ import annotations

from ._history_document import (
    FORMAT as FORMAT,
    VERSION as VERSION,
    History as History,
    InstanceHistory as InstanceHistory,
    Message as Message,
    Timer as Timer,
)
from ._history_file import dumps as dumps, loads as loads
from ._history_journal import (
    ImportPlan as ImportPlan,
    import_history as import_history,
    import_txn as import_txn,
    read_for_import as read_for_import,
    read_from as read_from,
    read_history as read_history,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "History",
    "ImportPlan",
    "InstanceHistory",
    "Message",
    "Timer",
    "dumps",
    "import_history",
    "import_txn",
    "loads",
    "read_for_import",
    "read_from",
    "read_history",
]
