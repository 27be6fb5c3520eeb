"""The inspector suite: the web inspector's pages over a big LMDB journal.

``python -m bench inspector`` (opt-in: it needs the ``web`` extra). One
journal is built per run (durability "async": its fsyncs are not what is
measured): 50,000 instances of four processes
and statuses, and one instance with 300 unread messages of 500 KB each. The
app (`actors._tools._web.create_app`, read-only, as ``actors web`` opens it) is
called directly as an ASGI app, so the figures are the inspector's own work,
without a socket:

- ``list, first``: ``/`` on an inspector that has no listing yet (the scan
  of every instance, decoding each record's updated time to sort by);
- ``list, again``: ``/`` once more, as another tab or a page of the list;
- ``list, after 10 changed``: ``/`` once 10 instances were updated (the
  scan again, decoding only the changed records, and one merge);
- ``list poll, unchanged``: the polling script's request with the ETag it
  got, answered 304 (targets: the list under 200 ms, the poll under 20 ms);
- ``mailbox page``: the instance page of the 300 x 500 KB messages, its
  size, and the memory it allocates at its peak (tracemalloc; targets:
  under 0.5 s and 50 MB);
- ``8 tabs polling + a page``: an instance page while 8 tabs poll the
  list, each its own task (the page waits for none of them).

Each figure is the median of the run's samples; times are wall-clock on a
shared machine (the table marks a noisy figure).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from actors._tools._web import create_app
from storage import InstanceRecord, LMDBJournal, Txn, instance_id

from ._registry import Options, Result, Target, at_most, progress, suite

__all__ = ["build", "call"]

_PROCESSES = ("orders/:id", "payments/:id", "shipments/:id", "users/:id")
_STATUSES = ("suspended", "completed", "failed", "running")
MAILBOX = "mail/m-1"
_MESSAGES, _MESSAGE_SIZE = 300, 500_000
_TABS = 8
_INSTANCES = 50_000
_CHANGED = 10  # instances updated between two requests of the list


async def build(path: Path, instances: int) -> None:
    """A journal at ``path`` with ``instances`` instances and `MAILBOX`'s unread mail."""
    t0 = time.time() - 86400
    async with LMDBJournal(path, map_size=1 << 33, durability="async") as journal:
        for start in range(0, instances, 5000):
            txn = Txn()
            for i in range(start, min(instances, start + 5000)):
                process = _PROCESSES[i % 4]
                address = process.replace(":id", f"x-{i}")
                record = InstanceRecord.new(
                    params=[f"x-{i}"],
                    input={"amount": i},
                    created=t0 + i,
                    updated=t0 + (i * 7919) % 80_000,
                    last_error="the card was declined" if i % 4 == 2 else None,
                )
                txn.put_instance(
                    instance_id(address),
                    address=address,
                    process=process,
                    status=_STATUSES[i % 4],
                    record=record,
                )
            await journal.commit(txn)
        iid = instance_id(MAILBOX)
        txn = Txn()
        record = InstanceRecord.new(params=["m-1"], created=t0, updated=t0)
        txn.put_instance(
            iid, address=MAILBOX, process="mail/:id", status="suspended", record=record
        )
        await journal.commit(txn)
        for n in range(_MESSAGES):
            txn = Txn()
            txn.append_message(iid, ["note", f"{n:06d}" + "x" * (_MESSAGE_SIZE - 6), t0 + n])
            await journal.commit(txn)


async def _touch(journal: LMDBJournal, count: int) -> None:
    """Update ``count`` of the instances (their updated time moves to now),
    and wait until a reader sees it."""
    txn = Txn()
    with journal.reader() as r:
        before = r.change_marker()
        for i in range(count):
            address = _PROCESSES[i % 4].replace(":id", f"x-{i}")
            row = r.instance(instance_id(address))
            assert row is not None
            record = row.record.evolve(updated=time.time())
            txn.put_instance(
                row.iid, address=address, process=row.process, status=row.status, record=record
            )
    await journal.commit(txn)
    while True:
        with journal.reader() as r:
            if r.change_marker() != before:
                return
        await trio.sleep(0.001)


async def call(
    app: Any, target: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One GET through the ASGI app: (status, headers, body)."""
    path, _, query = target.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    got = await fn()
    return (time.perf_counter() - start) * 1000, got


async def _sample(path: Path) -> dict[str, float]:
    """One sample of every figure, on a fresh inspector over ``path``."""
    figures: dict[str, float] = {}
    # Writable, to change it between requests (an inspector opens it
    # read-only, and reads it the same way); a poll interval of 0, so each
    # request after a change reads a new listing.
    async with LMDBJournal(path, map_size=1 << 33, durability="async") as journal:
        app = create_app(journal, source=str(path), poll=0.0)
        figures["list, first"], (status, headers, _) = await _timed(lambda: call(app, "/"))
        figures["list, again"], _ = await _timed(lambda: call(app, "/"))
        await _touch(journal, _CHANGED)
        figures[f"list, after {_CHANGED} changed"], _ = await _timed(lambda: call(app, "/"))
        _, headers, _ = await call(app, "/")
        tag = headers[b"etag"]
        polled = (b"if-none-match", tag)
        figures["list poll, unchanged"], (status, _, _) = await _timed(
            lambda: call(app, "/?partial=1", (polled,))
        )
        if status != 304:
            progress(f"inspector: the unchanged poll was answered {status}, not 304")
        page = f"/instance?address={MAILBOX}"
        tracemalloc.start()
        try:
            figures["mailbox page"], (_, _, body) = await _timed(lambda: call(app, page))
            figures["mailbox page: memory"] = tracemalloc.get_traced_memory()[1] / 1e6
        finally:
            tracemalloc.stop()
        figures["mailbox page: size"] = len(body) / 1e3
        done = trio.Event()

        async def tab() -> None:
            tag = b""
            while not done.is_set():
                _status, headers, _ = await call(app, "/?partial=1", ((b"if-none-match", tag),))
                tag = headers.get(b"etag", tag)
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for _ in range(_TABS):
                nursery.start_soon(tab)
            figures[f"{_TABS} tabs polling + a page"], _ = await _timed(lambda: call(app, page))
            done.set()
    return figures


_UNITS = {"mailbox page: memory": "MB", "mailbox page: size": "KB"}
_TARGETS: dict[str, Target] = {
    "list, first": at_most(200),
    f"list, after {_CHANGED} changed": at_most(200),
    "list poll, unchanged": at_most(20),
    "mailbox page": at_most(500),
    "mailbox page: memory": at_most(50),
}


def _meanings(instances: int) -> dict[str, str]:
    mail = f"an instance's page with {_MESSAGES} unread messages of {_MESSAGE_SIZE // 1000} KB"
    return {
        "list, first": f"/ over {instances:,} instances, the inspector's first read",
        f"list, after {_CHANGED} changed": f"/ again once {_CHANGED} of them changed",
        "list, again": f"/ over {instances:,} instances, another tab (the shared listing)",
        "list poll, unchanged": "a live page's poll while nothing changed (304)",
        "mailbox page": mail,
        "mailbox page: memory": "the most that page allocates at once (tracemalloc)",
        "mailbox page: size": "that page's HTML",
        f"{_TABS} tabs polling + a page": f"that page while {_TABS} tabs poll the list",
    }


@suite("inspector")
def inspector_suite(options: Options) -> list[Result]:
    instances = _INSTANCES
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-", dir=options.workdir) as directory:
        path = Path(directory) / "journal"
        progress(f"inspector: building {instances:,} instances and {_MESSAGES} messages")
        trio.run(build, path, instances)
        for round_ in range(options.repeats):
            progress(f"inspector: round {round_ + 1}/{options.repeats}")
            for name, value in trio.run(_sample, path).items():
                samples.setdefault(name, []).append(value)
    meanings = _meanings(instances)
    return [
        Result(
            suite="inspector",
            name=name,
            value=statistics.median(values),
            unit=_UNITS.get(name, "ms"),
            samples=tuple(values),
            target=_TARGETS.get(name),
            meaning=meanings[name],
        )
        for name, values in samples.items()
    ]
