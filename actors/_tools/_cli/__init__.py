"""The ``actors`` command line: look into a journal, and poke it, from a shell.

    python -m actors --journal ./state list --status suspended
    python -m actors --journal ./state show orders/o-17
    python -m actors --journal ./state send orders/o-17 approved '{"by": "ann"}'
    python -m actors --journal ./state cancel orders/o-17
    python -m actors --journal ./state retry orders/o-18 --input '{"amount": 5}'
    python -m actors --journal ./state resume-compensation trips/t-9
    python -m actors --journal ./state cleanup --older-than 30d
    python -m actors --journal ./state tail rooms/lobby --consumer archive --follow
    python -m actors --journal ./state consumers rooms/lobby
    python -m actors stats --journal ./state
    python -m actors --journal ./state export orders/o-17 > order-17.history
    python -m actors --journal ./laptop import order-17.history

Options go before or after the command. ``--json`` prints one JSON document
instead of text (``tail --follow --json``: one per value, a line each); times
in it are epoch seconds. ``--journal`` defaults to ``$ACTORS_JOURNAL``.

Reading (list, show, stats) opens the journal read-only
(``LMDBJournal(path, readonly=True)``): no owner lock, nothing written, so it
works beside a system that runs on the journal in another process; LMDB gives
each read a consistent snapshot.

Writing (send, cancel, retry, resume-compensation, abandon-compensation,
cleanup) goes one of two ways. When no system holds the journal, the CLI
opens it as a system would (taking the owner lock for the milliseconds the
write takes) and writes with the transactions of `actors._kernel._transactions`, as the
runtime does: ``send`` requires the instance to be live and appends
``[signal, payload, time]`` to its mailbox, where the instance finds it when
a system next opens the journal; ``cancel`` records the instance and its
live descendants as cancelled, children first, in one transaction, as
`ActorSystem.cancel` does for an instance not in memory; ``retry`` records a
failed or cancelled instance's next incarnation, running (`actors._system._retry`);
``resume-compensation`` puts a ``compensation_stuck`` instance back to
running (the next system to open the journal retries its compensation),
``abandon-compensation`` ends it failed, ``cleanup`` removes finished
instances. The CLI has no process definitions, so it cannot run anything
itself.

When a system holds the journal, the CLI does not write behind its back
(LMDB would let a second process commit, but the system keeps live
instances in memory and learns of mail only through its own ``send``): it
asks that system, through the control socket it serves in the journal's
directory (`actors._system._control`), to call the `ActorSystem` method of the same
name, and prints what it did with the same exit codes. A system opened with
``open_system(..., control=False)`` serves none: the CLI then refuses (exit
4), naming its pid. ``consumers --delete`` always refuses beside a running
system, which keeps open streams' cursors in memory. ``tail`` then prints
from the cursor without moving it, and says so on stderr (``--peek`` never
moves it); otherwise a value counts as consumed once printed, and the cursor
moves after each printed batch (so a crash in between prints that batch
again: at-least-once, as for `ActorSystem.stream`). Ctrl-C stops
``--follow`` between polls, never between printing a batch and moving the
cursor.

``signal`` (a signal routed by identity, see `actors._features._signals`) goes only
through a running system: which processes listen to a signal is the
application's code, which the CLI does not have. With no system running it
refuses (exit 2) and writes nothing.

Written directly, ``cancel`` also refuses an instance with saga compensations
pending anywhere in what it would cancel: only the application can run them.
``--force`` cancels without compensating (as `ActorSystem.cancel` does for an
instance that is not in memory). Through a running system the application
runs them, and records its own reason.

Records holding ``@actors.serializable`` classes decode as ``{"$class": ...}``
placeholders (`storage.lenient_decoding`) unless ``--import MODULE`` imports
the module that defines them. A record that does not decode is listed as
its indexes describe it; ``show`` of it reports the `JournalCorrupt` naming
database and key (exit 5).

The package, by concern: `_commands` (arguments, dispatch, exit codes);
the commands, which import no other command: `_inspect` (list, stats),
`_show` (show, show --incarnation), `_write` (send, cancel), `_retry` (retry,
and `_resume` for a parked instance), `_fork` (fork), `_signal` (signal),
`_mail` (mail), `_flow` (schedules, queues), `_repair` (resume-compensation,
abandon-compensation, cleanup), `_history` (export, import: see
docs/histories.md), `_tail` (tail, consumers), `_web` (web); and what they
share, below them: `_describe` (one instance's document, which the web
inspector shows too), `_records` (stored errors, signal names, a failed
run's message, in words), `_arguments` (JSON arguments, ``--import``ed
definitions), `_remote` (through a running system's control socket),
`_access` (opening the journal, finding an instance), `_errors` (exit codes)
and `_render` (JSON and text output). It reaches storage only through the public
`storage` API, and writes with the transactions of `actors._kernel._transactions`.

Exit codes: 0 done; 1 refused (not live, compensations pending); 2 bad usage;
3 not found (no journal at the path, no instance at the address); 4 the
journal is held by a running system that serves no control socket; 5 corrupt
records; 130 interrupted.
"""

from ._commands import main as main

__all__ = ["main"]
