"""`SimulatedNode`: one node's `SimulatedJournal` on a store several nodes
share, with the PostgreSQL journal's semantics for them.

Each node commits through its own committer (its own connection, in
PostgreSQL's terms), and all of them apply to one store, as transactions
from several connections interleave at one server. What the nodes share
beside the data is a `Cluster`:

- *Leases*: a node holds its lease from `open` until `close` or its crash
  (a killed process's session ends at once); each opening is a new term.
- *Owners*: every instance row has an owner node and a fencing epoch. A new
  row belongs to the node that writes it, at epoch 0; `claim` makes the
  claiming node the owner with a new epoch unless another node owns it and
  holds its lease, and so does a commit that creates the row with
  `Txn.claim_created`. `Txn.fence` is checked in the commit, so a node that
  lost an instance writes to it no more (`Conflict`, reason ``"epoch"``).
- *Mail notices*: a committed message for an instance another node owns,
  and each `Txn.wake`, calls that node's `on_mail` callback.
- *Orphans*: live instances whose owner's lease is not held.

- *Lapses*: `lapse` ends a node's lease while it runs on, unknowing (a node
  frozen past its lease, then resumed); `resume` gives it a new term and
  the notices for its mail that it missed.
- *Stale writes*: a write to a live instance another node owns, not fenced
  by a claim of the writer's, is recorded in `Cluster.stale`: there must be
  none. (An ended one has no runner to race: anyone may start it afresh.)

What it leaves out: notices later than their commit's outcome (they come
with it, so a batch late with `JournalFaults.late`; while a lease has
lapsed, never).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable

import attrs
import trio

from . import _journal as j
from ._journal import Durability, Txn
from ._simulated import SimulatedJournal
from ._simulated_faults import JournalFaults
from ._statuses import LIVE_STATUSES, STATUS_CODE
from ._write_log import _OP_NAMES, WriteLog
from .errors import Conflict

__all__ = ["Cluster", "SimulatedNode", "simulated_nodes"]

_LIVE_CODES = frozenset(STATUS_CODE[s] for s in LIVE_STATUSES)
#: Writes that only an instance's owner makes (mail and starts are anyone's).
_OWNED_OPS = frozenset(
    {
        j.PUT_INSTANCE,
        j.SET_STATUS,
        j.PUT_LOG,
        j.DROP_LOG,
        j.TAKE_MESSAGE,
        j.ADD_TIMER,
        j.CANCEL_TIMER,
        j.DELETE_INSTANCE,
    }
)


@attrs.define
class Cluster:
    """What the nodes of one simulated store share beside its data."""

    owners: dict[bytes, tuple[str, int]] = attrs.Factory(dict)  # iid -> (node, epoch)
    epoch: int = 0  # the last epoch given (a sequence: epochs never repeat)
    terms: dict[str, int] = attrs.Factory(dict)  # node -> its lease's latest term
    held: set[str] = attrs.Factory(set)  # nodes whose lease holds
    listeners: dict[str, Callable[[bytes], None]] = attrs.Factory(dict)
    #: writes to an instance another node owned, not fenced by this node's
    #: claim (a node that lost an instance wrote to it): none, ever
    stale: list[str] = attrs.Factory(list)


#: The store's data, as `MemoryJournal` keeps it: shared by every node.
_DATA = (
    "_instances",
    "_logs",
    "_mail",
    "_mail_next",
    "_timers",
    "_timer_heap",
    "_streams",
    "_cursors",
    "_states",
    "_state_keys",
)


class SimulatedNode(SimulatedJournal):
    """One node's journal on a store shared with other nodes (see the
    module docstring); make them with `simulated_nodes`."""

    shared = True
    poll_scale = 8.0  # (see Journal.poll_scale: a takeover scan every 2 s)

    def __init__(
        self, store: SimulatedJournal, node: str, cluster: Cluster, random: _random.Random
    ) -> None:
        super().__init__(random, faults=store.faults, durability=store.durability, log=store.log)
        for name in _DATA:
            setattr(self, name, getattr(store, name))
        self.node = node
        self.cluster = cluster
        self._notices: list[tuple[str, bytes]] = []
        self.lapsed = False  # the lease lapsed; the node has not noticed (`lapse`)
        self._kept: Callable[[bytes], None] | None = None  # its listener, back at `resume`

    reads_at_once = False  # a node claims before it runs an instance, as on PostgreSQL

    def describe(self) -> str:
        return f"SimulatedNode({self.node!r}, durability={self.durability!r})"

    # -- the lease --------------------------------------------------------------------

    async def open(self) -> None:
        await super().open()
        self.lapsed, self._kept = False, None
        cluster, node = self.cluster, self._name()
        cluster.terms[node] = cluster.terms.get(node, 0) + 1
        cluster.held.add(node)
        self.log.event(f"node {node} takes its lease (term {cluster.terms[node]})")

    async def close(self) -> None:
        let_go = self._open and not self.crashed  # (a crash let go already)
        await super().close()
        if let_go:
            self._let_go()

    def crash(self, why: str = "crash") -> None:
        if not self.crashed:
            self._let_go()  # a killed process's session ends at once
            # What it wrote notified the others all the same: PostgreSQL
            # sends a transaction's NOTIFY at its COMMIT, whoever then dies.
            self._settled()
        super().crash(why)

    def _let_go(self) -> None:
        node = self._name()
        self.cluster.held.discard(node)
        self.cluster.listeners.pop(node, None)
        self.log.event(f"node {node} lets go of its lease")

    def lease_term(self) -> int | None:
        node = self._name()
        if self.lapsed:
            return self.cluster.terms.get(node)  # it has not noticed yet
        return self.cluster.terms.get(node) if node in self.cluster.held else None

    # -- a lease that lapses while the node runs on -----------------------------------

    def lapse(self) -> None:
        """The lease lapses while this node runs on, not knowing (frozen past
        it and resumed, or cut off from its lease connection): other nodes
        may claim its instances (its writes to them are then refused by
        their fences), its claims and takeover scans, which go over the
        lease's connection, fail with `JournalUnavailable`, and mail notices
        to it are lost, until `resume`."""
        node = self._name()
        if self.crashed or not self._open or node not in self.cluster.held:
            return
        self.cluster.held.discard(node)
        self.lapsed, self._kept = True, self.cluster.listeners.pop(node, None)
        self.log.event(f"node {node}'s lease lapses while it runs on")

    def resume(self) -> None:
        """The node notices and takes its lease again, a new term (as the
        PostgreSQL journal's heartbeat reconnects); its mail connection,
        back, tells it of every instance it owns that has mail."""
        listener, lapsed, self._kept, self.lapsed = self._kept, self.lapsed, None, False
        if not lapsed or self.crashed or not self._open:
            return
        cluster, node = self.cluster, self._name()
        cluster.terms[node] += 1
        cluster.held.add(node)
        self.log.event(f"node {node} takes its lease again (term {cluster.terms[node]})")
        if listener is None:
            return
        cluster.listeners[node] = listener
        for iid, (owner, _) in sorted(cluster.owners.items()):
            if owner == node and self._mail.get(iid):
                listener(iid)

    def on_mail(self, callback: Callable[[bytes], None]) -> None:
        self.cluster.listeners[self._name()] = callback

    def _name(self) -> str:
        assert self.node is not None
        return self.node

    # -- owners -----------------------------------------------------------------------

    async def claim(self, iid: bytes) -> int | None:
        self._check_open()
        await trio.lowlevel.checkpoint()
        if self._down():
            raise self._unavailable()
        cluster, node = self.cluster, self._name()
        if self.lapsed:  # (claims go over the lease's connection, which is gone)
            raise self._unavailable()
        if node not in cluster.held:
            return None  # no claims while this node's lease is lost
        owner = cluster.owners.get(iid)
        if owner is not None and owner[0] != node and owner[0] in cluster.held:
            return None
        cluster.epoch += 1
        cluster.owners[iid] = (node, cluster.epoch)
        return cluster.epoch

    async def orphans(self, limit: int = 1000) -> list[bytes]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        if self._down() or self.lapsed:
            raise self._unavailable()
        cluster = self.cluster
        found = []
        for iid in sorted(self._instances):
            owner = cluster.owners.get(iid)
            if self._instances[iid][0] in _LIVE_CODES and (
                owner is None or owner[0] not in cluster.held
            ):
                found.append(iid)
                if len(found) >= limit:
                    break
        return found

    # -- commits ----------------------------------------------------------------------

    def _run(self, txn: Txn) -> list[int] | Exception:
        owners = self.cluster.owners
        for iid, epoch in txn.fences:
            owner = owners.get(iid)
            if owner is None or owner[1] != epoch:
                return Conflict(
                    f"node {self.node} no longer owns the instance (epoch {epoch}, now "
                    f"{owner}); nothing of this transaction was written",
                    reason="epoch",
                )
        node = self._name()
        fenced = {iid for iid, _ in txn.fences}
        stale = [
            f"node {node} wrote {_OP_NAMES.get(op[0], op[0])} to an instance node "
            f"{owners[op[1]][0]} owns (epoch {owners[op[1]][1]}), with no claim of its own"
            for op in txn.ops
            if op[0] in _OWNED_OPS
            and op[1] not in fenced
            and self._runs(op[1])
            and owners.get(op[1], (node,))[0] != node
        ]
        outcome = super()._run(txn)
        if isinstance(outcome, Exception):
            return outcome
        self.cluster.stale += stale
        for op in txn.ops:
            code = op[0]
            if code == j.PUT_INSTANCE and op[1] not in owners:
                owners[op[1]] = (node, 0)
            elif code == j.DELETE_INSTANCE:
                owners.pop(op[1], None)
            elif code == j.APPEND_MESSAGE:
                owner = owners.get(op[1])
                if owner is not None and owner[0] != node:
                    self._notices.append((owner[0], op[1]))
        for iid, other in txn.wakes:
            if other != node:
                self._notices.append((other, iid))
        if txn.claims is not None:
            # Claimed in its creating commit, whatever the lease (as the
            # PostgreSQL committer does): the runtime checks the lease.
            self.cluster.epoch += 1
            owners[txn.claims] = (node, self.cluster.epoch)
            outcome[-1] = self.cluster.epoch
        return outcome

    def _runs(self, iid: bytes) -> bool:
        """Whether ``iid`` is live: what its owner runs, and so only it may
        write. An ended one is anyone's to start afresh or delete (a
        precondition on its status keeps two such writers apart)."""
        row = self._instances.get(iid)
        return row is not None and row[0] in _LIVE_CODES

    def _settled(self) -> None:
        # Once a batch's callers know its outcome: the notices it sent.
        notices, self._notices = self._notices, []
        for node, iid in notices:
            listener = self.cluster.listeners.get(node)
            if listener is not None:
                listener(iid)


def simulated_nodes(
    random: _random.Random,
    nodes: list[str],
    *,
    faults: JournalFaults | None = None,
    durability: Durability = "sync",
    log: WriteLog | None = None,
) -> list[SimulatedNode]:
    """The journals of ``nodes`` on one new simulated store (see the module
    docstring); every choice comes from ``random``, through each node's
    own source derived from it."""
    store = SimulatedJournal(random, faults=faults, durability=durability, log=log)
    cluster = Cluster()
    return [
        SimulatedNode(store, node, cluster, _random.Random(f"{random.random()}:{node}"))
        for node in nodes
    ]
