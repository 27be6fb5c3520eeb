"""Which process's code is running right now.

The driver runs process code by hand, one ``coro.send`` at a time, inside
the actor's task. Awaiting a trio primitive there (a handle's ``result()``,
say) would register the actor's task with that primitive, and its later
wake-up would reschedule a task trio is not waiting on: an internal error
that ends the whole run. So the runtime's own awaitables ask `refuse`
first, and process code gets a `ContextError` that says what to use.
"""

from __future__ import annotations

import threading

from ..errors import ContextError

# Thread ident -> the address whose process code is being stepped in that
# thread, or None. Set by the driver around each ``coro.send``/``coro.throw``
# (no task switch can happen inside one, so one slot serves every actor of
# a run). Per thread, so that systems run by trio in two threads never see
# each other's: per run in effect (one trio run per thread). Not a trio
# RunVar, nor a threading.local: set and reset around every step of every
# process (each replayed effect of a wake), a RunVar costs 4.1 µs a pair
# here, a threading.local attribute 0.09 µs, a dict item half that.
stepping: dict[int, str | None] = {}


def refuse(what: str, instead: str) -> None:
    """Raise `ContextError` if called from process code.

    Args:
        what: the call, as the user wrote it (``"handle.result()"``).
        instead: what process code should use instead.
    """
    address = stepping.get(threading.get_ident())
    if address is not None:
        raise ContextError(
            f"process {address!r} awaited {what}, which is not a ctx effect: process "
            f"code may only await ctx effects; {instead}"
        )
