"""The journal on a PostgreSQL server (`PostgresJournal`), split by concern:

- `_journal`: `PostgresJournal`, which ties the pieces below together;
- `_server`: the DSN, connection settings, and errors that name the server;
- `_schema`: the tables, their versioned migrations, and every statement;
- `_writer`: the committer thread and group commit; `_plan` turns a batch
  into a few array statements and checks its preconditions and fences;
- `_reader`: the `Reader`, one snapshot on a pooled connection;
- `_leases`: a node's lease, heartbeat, claims and takeovers;
- `_pump`: notices of mail from other nodes (LISTEN/NOTIFY).
"""

from ._journal import PostgresJournal as PostgresJournal
from ._schema import SCHEMA_VERSION as SCHEMA_VERSION

__all__ = ["PostgresJournal"]
