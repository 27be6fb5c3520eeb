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
  holds its lease. `Txn.fence` is checked in the commit, so a node that
  lost an instance writes to it no more (`Conflict`, reason ``"epoch"``).
- *Mail notices*: a committed message for an instance another node owns,
  and each `Txn.wake`, calls that node's `on_mail` callback.
- *Orphans*: live instances whose owner's lease is not held.

What it leaves out: a node frozen past its lease (the lease lapses while it
runs on), late or lost notifications, and the re-read of owned mailboxes a
reconnect does.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
import attrs
import trio

from . import _journal as j
from ._journal import Txn
from ._simulated import JournalFaults, SimulatedJournal, WriteLog
from ._statuses import LIVE_STATUSES, STATUS_CODE
from .errors import Conflict

__all__ = ["Cluster", "SimulatedNode", "simulated_nodes"]

_LIVE_CODES = frozenset(STATUS_CODE[s] for s in LIVE_STATUSES)


@attrs.define
class Cluster:
    """What the nodes of one simulated store share beside its data."""

    owners: dict[bytes, tuple[str, int]] = attrs.Factory(dict)  # iid -> (node, epoch)
    epoch: int = 0  # the last epoch given (a sequence: epochs never repeat)
    terms: dict[str, int] = attrs.Factory(dict)  # node -> its lease's latest term
    held: set[str] = attrs.Factory(set)  # nodes whose lease holds
    listeners: dict[str, Callable[[bytes], None]] = attrs.Factory(dict)


#: The store's data, as `MemoryJournal` keeps it: shared by every node.
_DATA = (
    "_instances", "_logs", "_mail", "_mail_next", "_timers", "_timer_heap", "_streams",
    "_cursors", "_states",
)  # fmt: skip


class SimulatedNode(SimulatedJournal):
    """One node's journal on a store shared with other nodes (see the
    module docstring); make them with `simulated_nodes`."""

    shared = True

    def __init__(
        self, store: SimulatedJournal, node: str, cluster: Cluster, random: _random.Random
    ) -> None:
        super().__init__(random, faults=store.faults, durability=store.durability, log=store.log)
        for name in _DATA:
            setattr(self, name, getattr(store, name))
        self.node = node
        self.cluster = cluster
        self._notices: list[tuple[str, bytes]] = []

    @property
    def reads_at_once(self) -> bool:
        return False  # a node claims before it runs an instance, as on PostgreSQL

    def describe(self) -> str:
        return f"SimulatedNode({self.node!r}, durability={self.durability!r})"

    # -- the lease --------------------------------------------------------------------

    async def open(self) -> None:
        await super().open()
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
        super().crash(why)

    def _let_go(self) -> None:
        node = self._name()
        self.cluster.held.discard(node)
        self.cluster.listeners.pop(node, None)
        self.log.event(f"node {node} lets go of its lease")

    def lease_term(self) -> int | None:
        node = self._name()
        return self.cluster.terms.get(node) if node in self.cluster.held else None

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
        if self._down():
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
        outcome = super()._run(txn)
        if isinstance(outcome, Exception):
            return outcome
        node = self._name()
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
        return outcome

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
    durability: str = "sync",
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
