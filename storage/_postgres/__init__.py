"""The journal on a PostgreSQL server (`PostgresJournal`), split by concern:

- `_journal`: `PostgresJournal`, which ties the pieces below together;
- `_server`: the DSN, connection settings, and errors that name the server;
- `_schema`: the tables, their versioned migrations, and every statement;
- `_writer`: the committer: PostgreSQL's side of the shared group commit
  (`storage._group_commit`), retries and the in-doubt policy;
  `_statements` writes a batch as one database transaction, `_plan` turns
  it into a few array statements and checks its preconditions and fences,
  `_failures` says what a failed statement means;
- `_reader`: the `Reader`, one snapshot on a pooled connection;
- `_leases`: a node's lease, heartbeat, claims and takeovers;
- `_pump`: notices of mail from other nodes (LISTEN/NOTIFY).
"""

from ._journal import PostgresJournal as PostgresJournal
from ._migrations import SCHEMA_VERSION as SCHEMA_VERSION

__all__ = ["PostgresJournal"]
