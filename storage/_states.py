"""Runtime state rows: small named values with a version, written with a
compare-and-set, beside the instances in the same transactions.

Queues (their holders and waiting entries) and schedules (their definition
and last tick) live here, so they survive restarts and, on a shared journal,
one row is one truth for every node. A row has a key (a short string), a
value (anything the codec carries) and a version that goes one up at every
write. `Txn.expect_state` makes a transaction conditional on a row's
version (0: absent), so two writers that read the same version cannot both
win: the second gets `Conflict` (reason ``"state"``) and nothing of its
transaction is written.

Layout per journal: memory, a dict; LMDB, the ``meta`` database under the
prefix ``state/`` (key: that prefix and the key's utf-8, value: version(8)
and the encoded value); PostgreSQL, the table ``states``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ._codec import encode
from .errors import Conflict

__all__ = ["DELETE_STATE", "PUT_STATE", "STATE_PREFIX", "StateOps", "StateRow", "check_expects"]

PUT_STATE = 13  # (op, key, value_bytes)  -- the row's version goes one up
DELETE_STATE = 14  # (op, key)  -- a missing row is ignored
STATE_PREFIX = b"state/"  # LMDB: where state rows live in the meta database


@attrs.frozen(slots=True)
class StateRow:
    """A state row as stored: its key, version (1 or more) and decoded value."""

    key: str
    version: int
    value: Any


class StateOps:
    """The state row writes of `storage.Txn` (a base of it); the check,
    `Txn.expect_state`, is Txn's own, beside the field it fills."""

    __slots__ = ()
    ops: list[tuple[Any, ...]]

    def put_state(self, key: str, value: Any) -> None:
        """Create or replace state row ``key``; its version goes one up."""
        self.ops.append((PUT_STATE, key, encode(value, what="state")))

    def delete_state(self, key: str) -> None:
        """Remove state row ``key`` (a missing one is ignored)."""
        self.ops.append((DELETE_STATE, key))


def check_expects(expects: Sequence[tuple[str, int]], version_of: Callable[[str], int]) -> None:
    """Raise `Conflict` for the first expected version that does not hold."""
    for key, version in expects:
        found = version_of(key)
        if found != version:
            raise Conflict(f"state {key!r} is at version {found}, not {version}", reason="state")


def track_versions(versions: dict[str, int], ops: Sequence[tuple[Any, ...]]) -> None:
    """Apply ``ops``' effect on the state versions in ``versions`` (for a
    journal that checks a batch's later transactions against earlier ones)."""
    for op in ops:
        if op[0] == PUT_STATE:
            versions[op[1]] = versions.get(op[1], 0) + 1
        elif op[0] == DELETE_STATE:
            versions[op[1]] = 0
