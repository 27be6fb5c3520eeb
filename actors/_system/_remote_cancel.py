"""A cancel of an instance another live node owns: asked of its owner,
which cancels it; taken over here if the owner dies or freezes meanwhile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from storage import LIVE_STATUSES

from .._features import _supervision as _sup

if TYPE_CHECKING:
    from .._kernel._interfaces import SystemAPI

__all__ = ["REMOTE_CANCEL_WAIT", "REMOTE_CLAIM_EVERY", "cancel_remote"]

# A cancel of an instance another live node owns waits this long for it to
# end (its owner may be in a long step), and meanwhile tries to claim it
# this often (times `Journal.poll_scale`), as the takeover scan does: once
# the owner's lease lapses, the cancel is written here within that time.
REMOTE_CANCEL_WAIT = 10.0
REMOTE_CLAIM_EVERY = 0.25


async def cancel_remote(
    system: SystemAPI, iid: bytes, address: str, reason: str, compensate: bool = False
) -> bool | None:
    """Cancel an instance another live node owns: ask it, and wait (a
    while) for it to end. None: its owner died or froze meanwhile and
    this node claimed it (the caller cancels it here, holding off its
    activation as before: so a node left alone with it never waits for
    a takeover that its own cancel holds off)."""
    payload: dict[str, Any] = {"reason": reason}
    if compensate:
        payload["compensate"] = True
    await system.router.send_system(iid, address, _sup.CANCEL, payload)
    claim_every = REMOTE_CLAIM_EVERY * system.journal.poll_scale
    with trio.move_on_after(REMOTE_CANCEL_WAIT):
        next_claim = trio.current_time() + claim_every
        while True:
            row = await system.journal.read(lambda r: r.instance(iid))
            if row is None or row.status not in LIVE_STATUSES:
                return row is not None and row.status == "cancelled"
            if trio.current_time() >= next_claim:
                # Invariant: a claim succeeds only once the owner's lease
                # has lapsed, so the owner cannot be cancelling it too.
                if await system.journal.claim(iid) is not None:
                    return None
                next_claim = trio.current_time() + claim_every
            await trio.sleep(0.02)
    return False
