"""The journal in an embedded LMDB environment (`LMDBJournal`), split by concern:

- `_journal`: `LMDBJournal`'s lifecycle: the private directory, the owner
  lock and who holds it, opening (read-only too) and closing, read snapshots;
- `_writer`: LMDB's side of group commit (the batching, the writer thread,
  deferred transactions and the "async" window are the shared
  `storage._group_commit`): applying a batch, map growth, and the careful
  path that isolates a transaction that fails;
- (`storage._handoff`, shared with PostgreSQL: the trio side of the writer
  thread: the doorbell that hands committed batches back, and the watch
  that lends it the GIL;)
- `_applier`: a `Txn`'s operations as puts and deletes in one LMDB
  write transaction;
- `_reader`: the `Reader`, one LMDB read transaction;
- `_layout`: the databases, their key packing, and the journal format.
"""

from .._group_commit import (
    ASYNC_WINDOW_SECONDS as ASYNC_WINDOW_SECONDS,
    ASYNC_WINDOW_TXNS as ASYNC_WINDOW_TXNS,
)
from ._journal import LMDBJournal as LMDBJournal
from ._locks import JournalHolder as JournalHolder

__all__ = ["JournalHolder", "LMDBJournal"]
