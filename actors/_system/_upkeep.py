"""`Upkeep` reads the journal's instances and tidies it: the bodies of
`ActorSystem.query`, `cleanup`, and settling stuck compensations
(`resume_compensation`, `abandon_compensation`; see `_operations`).

It is a part of `ActorSystem` (``system.upkeep``, made in `_facade`),
handed what it uses: the journal, the registry's live table and its
`activate`, the node view's `trusted`, the statuses' `changed` and
`drop_end`, and the system's clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, cast

import trio

from storage import (
    STATUSES,
    TERMINAL_STATUSES,
    CorruptRecord,
    InstanceRow,
    Journal,
    Status,
    Txn,
    instance_id,
)

from .._kernel import _transactions
from .._kernel._checks import check_many, check_name, check_seconds
from .._kernel._interfaces import ActorAPI
from .._kernel._process import ProcessDef
from .._kernel._values import InstanceInfo
from ..errors import InvalidArguments
from . import _cleanup
from ._registry import YIELD_EVERY

__all__ = ["Upkeep"]


class Upkeep:
    """Queries and tidying: a part of `ActorSystem` (see the module docstring)."""

    def __init__(
        self,
        journal: Journal,
        live: Mapping[bytes, ActorAPI],
        *,
        activate: Callable[[bytes], None],
        trusted: Callable[[bytes], bool],
        changed: Callable[[bytes], None],
        drop_end: Callable[[bytes], None],
        epoch_now: Callable[[], float],
    ) -> None:
        self.journal, self.live, self.activate, self.trusted = journal, live, activate, trusted
        self.changed, self.drop_end, self.epoch_now = changed, drop_end, epoch_now

    async def query(
        self, status: str | None = None, process: ProcessDef[..., Any] | str | None = None
    ) -> AsyncIterator[InstanceInfo]:
        """The body of `ActorSystem.query`."""
        template = None
        if process is not None:
            template = process.template if isinstance(process, ProcessDef) else process
            check_name(template, "query(process=...)")
        if status is not None and status not in STATUSES:
            raise InvalidArguments(f"status must be one of {STATUSES}, not {status!r}")
        broken: list[CorruptRecord] = []  # a record that does not decode hides only itself
        rows = await self.journal.read(lambda r: list(r.instances(None, template, corrupt=broken)))
        for bad in broken:
            if bad.address is not None and status in (None, "corrupt"):
                yield InstanceInfo(
                    id=bad.address,
                    process=bad.process,
                    status="corrupt",
                    created=None,
                    updated=None,
                    last_error=str(bad.error),
                )
        for n, row in enumerate(rows, 1):
            if n % YIELD_EVERY == 0:
                await trio.lowlevel.checkpoint()  # a long listing starves no one
            actor = self.live.get(row.iid)
            mine = actor is not None and actor.loaded and self.trusted(row.iid)
            current = actor.status if mine else row.status  # type: ignore[union-attr]
            record = actor.record if mine else row.record  # type: ignore[union-attr]
            if status is not None and current != status:
                continue
            yield InstanceInfo(
                id=row.address,
                process=row.process,
                status=cast(Status, current),  # (one of STATUSES: what was stored)
                created=record.created,
                updated=record.updated,
                last_error=record.last_error,
            )

    async def resume_compensation(self, address: str) -> bool:
        """The body of `ActorSystem.resume_compensation`."""
        iid = await self._settle_stuck(
            address, "resume_compensation", _transactions.resume_compensation_txn
        )
        if iid is None:
            return False
        self.activate(iid)
        return True

    async def abandon_compensation(self, address: str) -> bool:
        """The body of `ActorSystem.abandon_compensation`."""
        found = await self._settle_stuck(
            address, "abandon_compensation", _transactions.abandon_compensation_txn
        )
        return found is not None

    async def _settle_stuck(
        self, address: str, call: str, build: Callable[[InstanceRow, float], Txn]
    ) -> bytes | None:
        """Commit ``build(row, now)`` for the stuck instance at ``address``;
        its id, or None if it is not stuck."""
        iid = instance_id(check_name(address, f"{call}'s address"))
        row = await self.journal.read(lambda r: r.instance(iid))
        if row is None or row.status != "compensation_stuck":
            return None
        await self.journal.commit(build(row, self.epoch_now()), durable=True)
        self.changed(iid)
        return iid

    async def cleanup(
        self,
        older_than: float,
        statuses: Iterable[str] = tuple(sorted(TERMINAL_STATUSES)),
    ) -> int:
        """The body of `ActorSystem.cleanup`."""
        wanted = tuple(check_many(statuses, "cleanup(statuses=...)", "status names"))
        for status in wanted:
            if status not in TERMINAL_STATUSES:
                raise InvalidArguments(
                    f"cleanup removes finished instances only; {status!r} is not one of "
                    "'completed', 'failed', 'cancelled'"
                )
        cutoff = self.epoch_now() - check_seconds(older_than, "cleanup(older_than=...)")

        found = await self.journal.read(lambda r: _cleanup.families(r, wanted, cutoff))
        for family in found:
            for iid, _ in family.members:
                self.drop_end(iid)
        return await _cleanup.remove(self.journal, found, wanted)
