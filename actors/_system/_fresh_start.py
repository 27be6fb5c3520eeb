"""A fresh start: the usual start, of an address never used, made with no
read before its commit and no claim after it (see `fresh_start`)."""

from __future__ import annotations

from storage import Journal, Txn

from .._kernel import _transactions

__all__ = ["FRESH_REFUSED", "fresh_start"]

# `Conflict.reason`s of a fresh start (`fresh_start`) that found something
# at its address: an instance, or a cleanup's floor ("state").
FRESH_REFUSED = _transactions.START_RACED | {"state"}


def fresh_start(txn: Txn, iid: bytes, journal: Journal) -> int | None:
    """Make ``txn``, a start over nothing (`_transactions.start_txn` with no
    previous instance and floor 0), one that needs no read before it and no
    claim after it: the usual start, of an address never used. Returns the
    index of its claim's epoch in the commit's results (None where a claim
    is not a round trip: ``journal.reads_at_once``).

    Read nothing first: the commit checks what the read would have. Its
    ``require_absent`` fails (``"exists"``) if an instance is there, and
    the expectation that the address's floor row is absent (version 0)
    fails (``"state"``) if a cleanup left one, so a start that commits is
    the first incarnation, as one that read (None, 0) would make; on a
    failure the caller reads and starts as usual, over what is there. Two
    starts of the address, here or on two nodes, are kept apart as any two
    are: the journal checks both conditions at commit, under the lock of
    the address (on PostgreSQL: the advisory lock every start and cleanup
    takes before its row locks, see `_SQL.lock_starts`, then the floor
    key's lock), so one commits and the other fails, writing nothing.

    Claim nothing after: `Txn.claim_created` makes the committing node the
    owner at a new epoch in the same commit, drawn as `Journal.claim` draws
    one (epochs never repeat), so a write fenced with it is refused once
    another node claims the instance, as after any claim. A node claims
    only under its lease: the caller does this only while its lease holds,
    and uses the epoch only if the same term holds after the commit (else
    it claims as usual, which waits for the lease).

    On a journal that reads at once (LMDB, memory) the read is no round
    trip, but it is a read transaction in the trio thread, whose every
    page access lets the writer thread take the GIL: the commit checks
    what the read would have, in the writer, and the claim after it is
    free (`Journal.claim` gives 0 at once). Only with "sync" durability
    there: an "async" journal acknowledges a start that read once it is
    queued, and this one would wait for its commit (`Txn.must_wait`).
    """
    txn.expect_state(_transactions.floor_key(iid), 0)
    return None if journal.reads_at_once else txn.claim_created(iid)
