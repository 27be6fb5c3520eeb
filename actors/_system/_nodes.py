"""What a node knows of the other nodes sharing its journal.

- *Lease terms.* The journal's lease term (`Journal.lease_term`) grows each
  time this node takes its lease again after losing it (say it was frozen
  past its lease). Each live instance is noted with the term it was claimed
  in; its memory is trusted (handles and `query` read it) only while that
  term holds, else they read the journal. Once the lease is back, the
  instances claimed in an earlier term are let go (passivated when idle;
  a write they still owe meets the fence if another node took them) and
  load again, claimed afresh, when something needs them.
- *Owned elsewhere.* A claim that says another live node owns an instance
  is remembered, so that later mail to it is one write whose NOTIFY wakes
  the owner: no read and no claim on the sender per send. Forgotten when
  this node claims the instance (a takeover) or is told of its mail.
- *Noticed mail.* Notices that arrive while a mailbox read is in flight
  wait for the next read, which serves them all (`Reader.mailboxes`).
- *A single owner* (a journal with no node: LMDB, memory, PostgreSQL
  without ``node=``): its lease term is 0 for good (`Journal.lease_term`)
  and no other node owns anything, so its memory is always current and
  nothing is noted: the lease-term methods return at once, and the hot
  paths (a start, an end) do not call them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from storage import Journal
from storage.errors import JournalUnavailable

from .._kernel import _reports

if TYPE_CHECKING:
    from .._kernel._outages import JournalWatch
    from ._registry import Registry

_ELSEWHERE_KEPT = 100_000  # instances remembered as owned elsewhere, oldest out


class NodeView:
    """One system's view of its lease and of the instances other nodes own."""

    def __init__(
        self,
        journal: Journal,
        registry: Registry,
        outages: JournalWatch,
        changed: Callable[[bytes], None],
    ) -> None:
        self.journal = journal
        self.registry = registry
        self.outages = outages
        self.changed = changed  # `Statuses.changed` (the statuses ask `trusted` of this view)
        self._terms: dict[bytes, int | None] = {}  # live instance -> term claimed in
        self._term_seen: int | None = None
        self._stale: set[bytes] = set()  # claimed in a lost term, still in memory
        self._elsewhere: OrderedDict[bytes, None] = OrderedDict()  # oldest first
        self._noticed: dict[bytes, None] = {}
        self._reading = False  # a task reads noticed mail

    # -- lease terms --------------------------------------------------------------

    def claimed(self, iid: bytes, epoch: int | None) -> None:
        """A claim of ``iid`` answered ``epoch`` (None: another live node owns it)."""
        journal = self.journal
        if journal.node is None:
            return  # (a single owner: see the module docstring)
        if epoch is None:
            self._elsewhere[iid] = None
            if len(self._elsewhere) > _ELSEWHERE_KEPT:
                self._elsewhere.popitem(last=False)
            return
        self._elsewhere.pop(iid, None)
        self._terms[iid] = journal.lease_term()  # the claim just confirmed it

    def running(self, iid: bytes) -> None:
        """An instance made on this node starts (a child: no claim of its own)."""
        journal = self.journal
        if journal.node is not None and iid not in self._terms:  # (claimed: noted)
            self._terms[iid] = journal.lease_term()

    def trusted(self, iid: bytes) -> bool:
        """Whether this node's memory of the live instance ``iid`` is current:
        it was claimed in the lease term that holds now (always, for a
        single owner)."""
        journal = self.journal
        if journal.node is None:
            return True
        term = journal.lease_term()
        return term is not None and self._terms.get(iid, -1) == term

    def forgotten(self, iid: bytes) -> None:
        """The instance left memory."""
        if self.journal.node is None:
            return  # (a single owner noted nothing)
        self._terms.pop(iid, None)
        if iid in self._stale:
            self._stale.discard(iid)
            self.changed(iid)  # its handles read the journal now

    def let_go_of_the_lost(self) -> None:
        """Once the lease is back after a loss, let go of what was claimed
        before it (called now and then by the takeover scan)."""
        term = self.journal.lease_term()
        live = self.registry.live
        if term is not None and term != self._term_seen:
            first, self._term_seen = self._term_seen is None, term
            if first:  # the journal has just opened
                return
            lost = [iid for iid in live if self._terms.get(iid, -1) != term]
            self._stale.update(lost)
            for iid in lost:
                _reports.lease_lost(self.journal.node, live[iid].address)
        for iid in list(self._stale):
            actor = live.get(iid)
            if actor is None:
                self._stale.discard(iid)
            else:
                actor.request_passivation()  # when idle; a busy one meets the fence

    # -- mail ---------------------------------------------------------------------

    def owned_elsewhere(self, iid: bytes) -> bool:
        """Whether a claim said another live node owns ``iid`` (its mail
        notice then wakes that node; nothing more is to be done here)."""
        return iid in self._elsewhere

    def mail_noticed(self, iid: bytes) -> None:
        """Another node added mail for ``iid``, which this node owns."""
        self._elsewhere.pop(iid, None)
        if iid not in self.registry.live:
            self.registry.activate_for_mail(iid)  # its load reads the mailbox
            return
        self._noticed[iid] = None
        if not self._reading:
            self._reading = True
            self.registry.spawn_system_task(self._read_noticed)

    async def _read_noticed(self) -> None:
        try:
            while self._noticed:
                await self._read_mail_of(list(self._noticed))
        finally:
            self._reading = False

    async def _read_mail_of(self, iids: list[bytes]) -> None:
        # Invariant: an id leaves _noticed before the read that serves it
        # begins, so a notice that arrives during the read is read again.
        for iid in iids:
            del self._noticed[iid]
        try:
            mail = await self.journal.read(lambda r: r.mailboxes(iids))
        except JournalUnavailable:  # the notices are not lost: read once it answers
            self._noticed.update(dict.fromkeys(iids))
            await self.outages.back()
            return
        for iid in iids:
            actor = self.registry.live.get(iid)
            if actor is None:
                self.registry.activate_for_mail(iid)
                continue
            for seq, message in mail.get(iid, ()):
                actor.arrivals.deliver(seq, message)  # (its stored form)
