"""The web inspector: ``python -m actors web --journal PATH [--port 8080] [--host 127.0.0.1]
[--allow-actions]``
(PATH: an LMDB journal's directory, or ``postgresql://USER@HOST:PORT/DATABASE``
with ``--schema NAME``).

Pages over a journal, read-only unless told otherwise: the instances (filtered by status, process
and address prefix, counted by status, most recently updated first, paged)
and each instance's status, input, result or error with its traceback,
supervision tree and restart history, effect log, unread mail, timers,
stream cursors, exports and compensations. Pages refresh themselves: a
small script polls the server and swaps in what changed.

It opens the journal read-only: an LMDB one as the other reading commands
do (``LMDBJournal(path, readonly=True)``: no owner lock, nothing written), a
PostgreSQL one with ``PostgresJournal(url, schema=NAME, readonly=True)`` (no
migration, read-only sessions, the schema's version checked). So it runs
beside the systems that use the journal in other processes. It builds its
documents with the same helpers as ``list`` and ``show``
(`actors._tools._cli._inspect`). It binds to
127.0.0.1 unless ``--host`` says otherwise; on every address it answers
only a Host header that is an IP address, localhost, the ``--host`` name,
this machine's name (bound beyond it) or an ``--allow-host`` name (against
DNS rebinding); it escapes every value it renders, and forbids inline
script.

With ``--allow-actions`` (LMDB journals; off by default) an instance's page
also offers cancel (with or without its compensations), retry, fork after
a log entry, send a signal, drop a message, and resume or abandon a stuck
compensation. Each is confirmed on a page that says what will happen, then
POSTed with the session's token from this origin (`_guard`), done by the
command line's own command (`_actions`), and logged on ``actors.control``.

It reads only what it shows: the list pages one listing of the journal
shared by every tab and read again at most once per poll interval after a
change, an instance's page reads a page of its unread mail, a long value is
cut with a link to a page that shows it whole, and a poll of an unchanged
page is answered 304 (`_index`).

The package: `_query` (query strings), `_index` (the shared listing, the
polls' validators), `_values` (one value read whole), `_pages` (HTML),
`_assets` (CSS and the polling script), `_guard` (session tokens, the Origin check), `_actions`
(what each action does and says), `_action_pages` (their HTML), `_app` (the
starlette app) and `_serve` (hypercorn's trio worker and the ``web``
command). It needs the ``web`` extra.
"""

from ._app import create_app as create_app
from ._serve import serve_app as serve_app, web as web

__all__ = ["create_app", "serve_app", "web"]
