"""Several nodes sharing one PostgreSQL schema: leases, claims, fencing,
mail notices, takeover.

The first tests drive `PostgresJournal` objects in this process, each a
node (a node "freezes" when its heartbeat stops); one runs two systems in
this process. The rest (marked slow) run three node programs
(tests/multinode_node.py) on one schema and kill (SIGKILL) or freeze
(SIGSTOP) one of them. Each handling of a message is a step that appends
``<node> <tag> <id> <idempotency key> <attempt> <time>`` to a side file with one
``write()``, the external effect the tests audit.

These talk to a real server (see tests/pg.py) and run in real time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio

import actors
from actors.testing import wait_quiescent
from storage import Conflict, InstanceRecord, JournalLocked, Txn, instance_id
from tests.pg import fresh_schema

if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
    pytest.importorskip("psycopg", reason="PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")

X = instance_id("orders/x")
Y = instance_id("orders/y")
Z = instance_id("orders/z")
LEASE = 0.5  # seconds: a short lease, so that the in-process tests are quick


@pytest.fixture
def pg(request):
    """``(dsn, schema)`` of a schema of this test's own."""
    return fresh_schema(request)


@pytest.fixture
def node(pg):
    """A factory of node journals on this test's schema: ``node("a")``."""
    from storage import PostgresJournal

    dsn, schema = pg

    def make(name: str | None, **kw) -> PostgresJournal:
        journal = PostgresJournal(dsn, **{"schema": schema, "lease_timeout": LEASE, **kw})
        if name is not None:
            journal.set_node(name)
        return journal

    return make


def sql(dsn: str, query: str, params=None) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def owner(pg, iid: bytes) -> tuple[str | None, int] | None:
    dsn, schema = pg
    rows = sql(dsn, f'SELECT owner, epoch FROM "{schema}".instances WHERE iid = %s', [iid])
    return rows[0] if rows else None


def put(txn: Txn, iid: bytes, status: str = "suspended") -> None:
    txn.put_instance(
        iid,
        address=iid.hex(),
        process="orders/:id",
        status=status,
        record=InstanceRecord(params=[iid.hex()]),
    )


async def create(journal, *iids: bytes, status: str = "suspended") -> None:
    txn = Txn()
    for iid in iids:
        put(txn, iid, status)
    await journal.commit(txn)


def fenced_log(iid: bytes, epoch: int, seq: int = 1) -> Txn:
    txn = Txn()
    txn.fence(iid, epoch)
    txn.put_log(iid, 0, seq, {"k": "step"})
    return txn


def freeze(journal) -> None:
    """Stop a node's heartbeat, as SIGSTOP would: the server ends its idle
    lease session after ``lease_timeout`` and the lease is free."""
    journal._lease.heartbeat_stop.set()
    journal._lease.heartbeat_thread.join()


async def until(predicate, timeout: float = 5.0, what: str = "condition") -> float:
    """Poll ``predicate`` (sync or async) until true; the seconds it took."""
    start = trio.current_time()
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return trio.current_time() - start
            await trio.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# -- one process, several journals -------------------------------------------


async def test_a_node_name_runs_once(node):
    async with node("a"):
        with pytest.raises(JournalLocked, match="node 'a' is already running"):
            await node("a").open()
        async with node("b"):
            pass
    async with node("a"):  # the first one is closed: its lease is free
        pass


async def test_node_names_are_checked_and_set_before_open(node):
    with pytest.raises(ValueError, match="node name"):
        node(None).set_node("")
    journal = node("a")
    async with journal:
        with pytest.raises(ValueError, match="before opening"):
            journal.set_node("b")


async def test_a_journal_without_a_node_is_a_single_owner(node, pg):
    async with node(None) as j:
        await create(j, X)
        assert (None, 0) == owner(pg, X)
        assert 0 == await j.claim(X)
        await j.commit(fenced_log(X, 12345))  # fences always hold
        assert [] == await j.orphans()


async def test_new_instances_belong_to_their_creator_and_claims_bump_the_epoch(node, pg):
    async with node("a") as a, node("b") as b:
        await create(a, X)
        assert ("a", 0) == owner(pg, X)
        await a.commit(fenced_log(X, 0))  # the creator may write at epoch 0 at once
        assert await b.claim(X) is None  # a is alive
        first = await a.claim(X)
        second = await a.claim(X)  # claiming one's own: a new epoch all the same
        assert 0 < first < second
        assert ("a", second) == owner(pg, X)
        with pytest.raises(Conflict) as caught:
            await a.commit(fenced_log(X, first))
        assert "epoch" == caught.value.reason
        await a.commit(fenced_log(X, second, seq=2))
        assert await a.claim(Y) is None  # no such instance
        many = await trio_gather(*[a.claim(X) for _ in range(20)])  # in a few batches
        assert min(many) > second and ("a", max(many)) == owner(pg, X)


async def trio_gather(*awaitables):
    results = [None] * len(awaitables)

    async def run(i, aw):
        results[i] = await aw

    async with trio.open_nursery() as nursery:
        for i, aw in enumerate(awaitables):
            nursery.start_soon(run, i, aw)
    return results


@pytest.mark.parametrize("savepoints", [False, True], ids=["fast", "savepoints"])
async def test_a_failed_fence_fails_its_transaction_only(node, pg, savepoints):
    async with node("a") as a:
        a._writer.force_savepoints = savepoints
        await create(a, X, Y)
        epoch = await a.claim(X)
        stale, good, other = fenced_log(X, epoch - 1), fenced_log(X, epoch, 2), Txn()
        put(other, Z)
        tickets = [a.submit(t) for t in (stale, good, other)]  # one batch
        with pytest.raises(Conflict, match="no longer owns"):
            await tickets[0].wait()
        await tickets[1].wait()
        await tickets[2].wait()
        with a.reader() as r:
            assert {2: {"k": "step"}} == r.log(X, 0)
            assert r.instance(Z) is not None
        with pytest.raises(Conflict):  # a fence alone is checked too
            empty = Txn()
            empty.fence(Y, 999)
            await a.commit(empty)


async def test_a_frozen_node_loses_its_instances_and_its_late_writes(node, pg):
    async with node("a") as a, node("b") as b:
        await create(a, X, Y)
        await create(a, Z, status="completed")
        epoch = await a.claim(X)
        assert [] == await b.orphans()
        freeze(a)
        took = await until(b.orphans, what="a's lease to lapse")
        assert took < LEASE * 3
        assert {X, Y} == set(await b.orphans())  # live ones only
        taken = await b.claim(X)
        assert taken > epoch and ("b", taken) == owner(pg, X)
        with pytest.raises(Conflict) as caught:  # a's late write is refused
            await a.commit(fenced_log(X, epoch))
        assert "epoch" == caught.value.reason and "'b' owns it" in str(caught.value)
        # a comes back: it takes its lease again, but X stays b's.
        assert await a.claim(X) is None
        assert [] == await a.orphans()  # never one's own
        assert [] == await b.orphans()  # a is alive again
        assert await b.claim(Y) is None
        assert {a._lease.conn.info.backend_pid} == lease_holders(pg, "a")


@pytest.mark.slow  # a commit frozen for 3 s of real time
async def test_a_node_frozen_mid_commit_does_not_keep_its_row_locks(node, pg, monkeypatch):
    from storage._postgres import _plan

    async with node("a") as a, node("b") as b:
        await create(a, X)
        epoch = await a.claim(X)
        stall = threading.Event()
        number = _plan._Plan.number

        def stalled(plan, before):  # a's committer, between its two round trips
            if stall.is_set():
                stall.clear()
                time.sleep(LEASE * 6)  # frozen, holding the row lock on X
            number(plan, before)

        monkeypatch.setattr(_plan._Plan, "number", stalled)
        freeze(a)  # and its lease lapses
        stall.set()
        outcome = []

        async def late_write():
            try:
                await a.commit(fenced_log(X, epoch))
            except Conflict as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(late_write)
            await until(lambda: not stall.is_set(), what="a to stall")
            took = await until(lambda: b.claim(X), timeout=LEASE * 5, what="b's claim")
            assert took < LEASE * 4  # not held up until a wakes (LEASE * 6)
        assert ["epoch"] == [exc.reason for exc in outcome]  # a's batch, redone, is refused
        assert "b" == owner(pg, X)[0]
        with a.reader() as r:
            assert {} == r.log(X, 0)


async def test_the_lease_term_grows_when_the_lease_is_taken_again(node):
    async with node("a") as a:
        assert 0 == a.lease_term()
        await create(a, X)
        freeze(a)
        # Trusted up to three quarters of a lease after its last confirmation,
        # never past it: checked against that moment, not against the time
        # this task took to look (which a loaded machine stretches).
        confirmed = a._lease.confirmed_at  # the heartbeat is stopped: final
        with trio.fail_after(5):
            while True:
                before = time.monotonic()
                term = a.lease_term()
                after = time.monotonic()
                if term is None:
                    assert after - confirmed > 0.75 * LEASE  # not given up early
                    break
                assert before - confirmed <= 0.75 * LEASE  # not trusted late
                await trio.sleep(0.01)
        await trio.sleep(LEASE * 2)  # the server ends the silent session
        assert await a.claim(X) > 0  # finds it gone and takes the lease again
        assert 1 == a.lease_term()


async def test_a_claim_of_a_row_a_writer_holds_gives_up_soon_and_claims_it_later(node, pg):
    import psycopg

    from storage._postgres._leases import _BUSY

    async with node("a") as a:
        await create(a, X, Y)
        holder = psycopg.connect(pg[0])  # a writer, frozen while it holds X's row
        try:
            holder.execute(f'SELECT 1 FROM "{pg[1]}".instances WHERE iid = %s FOR UPDATE', [X])
            start = trio.current_time()
            found = await trio.to_thread.run_sync(a._lease._claim_sync, [X, Y])  # pipelined
            assert _BUSY == found[X] and found[Y] > 0
            # The lease connection's lock_timeout (LEASE / 4) gave up on X's
            # row, which its holder keeps until told otherwise: a bound far
            # above it, for a loaded machine, still tells giving up from waiting.
            assert trio.current_time() - start < 4 * LEASE
            assert [] == await a.orphans()  # the lease connection still serves
            late = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, holder.rollback)  # the writer ends
                epoch = await a.claim(X)  # busy at first, claimed once the row is free
            assert epoch > found[Y] and ("a", epoch) == owner(pg, X)
            assert trio.current_time() - late < 5 * LEASE
        finally:
            holder.close()


def lease_holders(pg, name: str) -> set[int]:
    """The server processes that hold node ``name``'s lease lock."""
    from storage._postgres._schema import _node_key

    key = _node_key(pg[1], name)  # an advisory lock keeps a bigint in two halves
    rows = sql(
        pg[0],
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
        [(key >> 32) & 0xFFFF_FFFF, key & 0xFFFF_FFFF],
    )
    return {pid for (pid,) in rows}


async def test_a_node_that_outlives_its_idle_timeout_keeps_its_lease(node):
    async with node("a") as a, node("b") as b:
        await create(a, X)
        await trio.sleep(LEASE * 3)  # the heartbeat keeps the session busy
        assert await b.claim(X) is None
        assert [] == await b.orphans()


@pytest.mark.parametrize("savepoints", [False, True], ids=["fast", "savepoints"])
async def test_mail_for_another_nodes_instance_notifies_it(node, savepoints):
    async with node("a") as a, node("b") as b:
        b._writer.force_savepoints = savepoints
        seen: list[bytes] = []
        a.on_mail(seen.append)
        await create(a, X, Z)
        await create(b, Y)
        txn = Txn()
        txn.require(X, frozenset({"running", "suspended"}))
        txn.append_message(X, ["work", 1, 0.0])
        txn.append_message(Y, ["work", 2, 0.0])  # b's own: no notice
        await b.commit(txn)
        await until(lambda: seen, what="the notice")
        refused = Txn()
        refused.require(X, frozenset({"completed"}))
        refused.append_message(X, ["work", 3, 0.0])
        with pytest.raises(Conflict):
            await b.commit(refused)
        mine = Txn()
        mine.append_message(X, ["work", 4, 0.0])
        await a.commit(mine)  # a's own: no notice
        # A last notice, from b: notices come in commit order, so one for
        # the refused or for a's own commit would have come before it.
        last = Txn()
        last.append_message(Z, ["work", 5, 0.0])
        await b.commit(last)
        await until(lambda: Z in seen, what="the last notice")
        assert [X, Z] == seen


async def test_many_notices_in_one_batch(node):
    async with node("a") as a, node("b") as b:
        seen: set[bytes] = set()
        a.on_mail(seen.add)
        iids = [instance_id(f"orders/{i}") for i in range(450)]
        await create(a, *iids)
        txn = Txn()
        for iid in iids:
            txn.append_message(iid, ["work", None, 0.0])
        await b.commit(txn)
        await until(lambda: len(seen) == len(iids), what="450 notices")


async def test_notices_before_the_callback_wait_for_it(node):
    async with node("a") as a, node("b") as b:
        await create(a, X)
        txn = Txn()
        txn.append_message(X, ["work", 1, 0.0])
        await b.commit(txn)
        await until(lambda: a._mail.backlog, what="the notice")
        seen: list[bytes] = []
        a.on_mail(seen.append)
        assert [X] == seen


async def test_after_a_lost_mail_connection_owned_mail_is_reported(node, pg):
    async with node("a") as a, node("b") as b:
        await create(a, X, Y)
        txn = Txn()
        txn.append_message(X, ["work", 1, 0.0])
        await a.commit(txn)  # a's own mail: no notice
        seen: list[bytes] = []
        a.on_mail(seen.append)
        sql(pg[0], "SELECT pg_terminate_backend(%s)", [a._mail.conn.info.backend_pid])
        await until(lambda: X in seen, what="the rescan")
        assert [X] == seen
        later = Txn()  # and notices work again on the new connection
        later.append_message(Y, ["work", 2, 0.0])
        await b.commit(later)
        await until(lambda: Y in seen, what="a notice on the new connection")


async def test_a_lost_lease_connection_is_taken_again(node, pg):
    async with node("a") as a, node("b") as b:
        await create(a, X)
        old = a._lease.conn.info.backend_pid
        sql(pg[0], "SELECT pg_terminate_backend(%s)", [old])
        await until(lambda: lease_holders(pg, "a") - {old}, what="a new lease")
        assert await b.claim(X) is None
        assert 0 < await a.claim(X)


async def test_gone_nodes_that_own_nothing_are_forgotten(node, pg):
    async with node("a") as a:
        async with node("gone") as gone:
            await create(gone, X)
        async with node("idle"):
            pass
        assert {X} == set(await a.orphans())  # closing gave the lease up at once
        names = {n for (n,) in sql(pg[0], f'SELECT name FROM "{pg[1]}".nodes')}
        assert {"a", "gone"} == names  # "idle" owned nothing live
        assert await a.claim(X) > 0
        a._lease.pruned_at = 0
        await a.orphans()
        assert {("a",)} == set(sql(pg[0], f'SELECT name FROM "{pg[1]}".nodes'))


# -- two systems in this process --------------------------------------------------

handled_here: list[int] = []


def note(n: int) -> None:
    handled_here.append(n)


@actors.process("box/:id")
async def box(ctx: actors.Context, id: str) -> None:
    while True:
        _signal, payload = await ctx.receive(actors.Signal("work"))
        await ctx.step(note, payload["n"])


async def test_a_notice_during_an_unfinished_take_does_not_deliver_it_twice(node):
    work = actors.Signal("work")
    handled_here.clear()
    a_journal, b_journal = node(None), node(None)
    gate = threading.Event()
    gate.set()
    write = a_journal._writer.write

    def gated_write(batch):  # holds a's commits while the gate is shut
        gate.wait(10)
        write(batch)

    a_journal._writer.write = gated_write
    async with (
        actors.open_system(a_journal, processes=[box], node="a") as a,
        actors.open_system(b_journal, processes=[box], node="b") as b,
    ):
        handle = await a.start(box, "1")
        await until(lambda: handle.status == "suspended", what="the box to wait")
        await a_journal.flush()
        actor = a.registry.live[instance_id("box/1")]
        gate.clear()
        await b.send("box/1", work, {"n": 1})  # seq 1: a takes it, the take waits at the gate
        await until(lambda: a_journal._writer.inflight, what="a's step to wait for its take")
        await b.send("box/1", work, {"n": 2})  # seq 2: its notice makes a read the mailbox
        await until(lambda: 2 in actor.mailbox.messages, what="the second message to reach a")
        gate.set()
        await until(lambda: 2 in handled_here, what="both messages handled")
        # A second handling of either would come before both are quiescent.
        await wait_quiescent(a)
        await wait_quiescent(b)
    assert [1, 2] == handled_here


async def test_sends_to_another_nodes_instance_cost_the_sender_no_claim(node):
    work = actors.Signal("work")
    handled_here.clear()
    # A lease long enough that a busy machine never lets a's lapse meanwhile.
    a_journal, b_journal = node(None, lease_timeout=3.0), node(None, lease_timeout=3.0)
    claims: list[bytes] = []
    claim = b_journal.claim

    async def counted(iid: bytes) -> int | None:
        claims.append(iid)
        return await claim(iid)

    b_journal.claim = counted
    async with actors.open_system(b_journal, processes=[box], node="b") as b:
        async with actors.open_system(a_journal, processes=[box], node="a") as a:
            await a.start(box, "1")
            for n in range(30):
                await b.send("box/1", work, {"n": n})
            await until(
                lambda: len(handled_here) == 30, timeout=15, what="a to handle every message"
            )
            assert len(claims) <= 1, claims  # the first send learns that a owns it
        # a is gone. b still takes it for a's, so its send only writes; b's
        # takeover scan finds box/1 and that mail.
        await b.send("box/1", work, {"n": 30})
        await until(lambda: 30 in handled_here, timeout=15, what="b to take box/1 over")
        assert b.registry.live[instance_id("box/1")].loaded
    # (A step cut short by a's close may run again on b: at least once, keyed.)
    assert list(range(31)) == sorted(set(handled_here))


# -- three node programs ---------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
NODE_PROGRAM = Path(__file__).resolve().parents[1] / "multinode_node.py"
ALL = "sink,sleeper,parent,kid,tree"
TAKEOVER = 2.0  # seconds: a dead or frozen node's instances run elsewhere by then


class Node:
    """One node program, driven by JSON lines on its stdin."""

    def __init__(
        self, cluster: Cluster, name: str, procs: str, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.log = cluster.workdir / f"{name}.log"
        env = {**os.environ, **(env or {})}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(NODE_PROGRAM),
                    cluster.node_dsn,
                    cluster.schema,
                    name,
                    str(cluster.workdir),
                    procs,
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self._replies: dict[Any, dict] = {}
        self._cond = threading.Condition()
        self._next = 0
        self._sent: dict[int, tuple[str, dict[str, Any]]] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            message = json.loads(line)
            with self._cond:
                self._replies[message.get("id", "ready")] = message
                self._cond.notify_all()
        with self._cond:
            self._replies["exit"] = {}
            self._cond.notify_all()

    def _wait(self, key: Any, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        with self._cond:
            while key not in self._replies:
                if "exit" in self._replies or time.monotonic() > deadline:
                    why = "it exited" if "exit" in self._replies else "timeout"
                    raise AssertionError(
                        f"node {self.name} gave no answer ({why}); its log:\n{self.log.read_text()}"
                    )
                self._cond.wait(0.05)
            return self._replies.pop(key)

    def ready(self, timeout: float = 20.0) -> Node:
        self._wait("ready", timeout)
        return self

    def call(self, cmd: str, timeout: float = 20.0, **args: Any) -> Any:
        return self.answer(self.post(cmd, **args), timeout)

    def post(self, cmd: str, **args: Any) -> int:
        """Send a command without waiting; its id, for `answer`."""
        self._next += 1
        self._sent[self._next] = (cmd, args)
        request = {"id": self._next, "cmd": cmd, **args}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return self._next

    def answer(self, ident: int, timeout: float = 20.0) -> Any:
        """The result of the command ``ident`` (raises if it failed)."""
        reply = self._wait(ident, timeout)
        if not reply["ok"]:
            cmd, args = self._sent[ident]
            raise AssertionError(f"node {self.name}: {cmd} {args} failed: {reply['error']}")
        return reply["result"]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()


class Cluster:
    """Node programs on one schema, their shared side and acks files."""

    def __init__(self, pg: tuple[str, str], workdir: Path) -> None:
        self.dsn, self.schema = pg
        self.node_dsn = self.dsn  # what the nodes connect to (a proxy, say)
        self.workdir = workdir
        self.nodes: list[Node] = []

    def start(self, *names: str, procs: str = ALL, env: dict[str, str] | None = None) -> list[Node]:
        nodes = [Node(self, name, procs, env) for name in names]
        self.nodes += nodes
        return [n.ready() for n in nodes]

    def end(self) -> None:
        for n in self.nodes:
            n.end()

    def quiescent(self) -> None:
        """Wait until every running node has nothing left to do
        (`actors.testing.wait_quiescent` in each): a message handled a
        second time, by whichever node, is in the side file by then."""
        for n in self.nodes:
            if n.proc.poll() is None:
                n.call("quiescent")

    def query(self, query: str, params=None) -> list[tuple]:
        return sql(self.dsn, query.replace("{s}", f'"{self.schema}"'), params)

    def owner(self, address: str) -> str | None:
        rows = self.query("SELECT owner FROM {s}.instances WHERE iid = %s", [instance_id(address)])
        return rows[0][0] if rows else None

    def status(self, address: str) -> str | None:
        from storage import STATUSES

        rows = self.query("SELECT status FROM {s}.instances WHERE iid = %s", [instance_id(address)])
        return STATUSES[rows[0][0] - 1] if rows else None

    def live_owned_by(self, node: str) -> int:
        rows = self.query(
            "SELECT count(*) FROM {s}.instances WHERE owner = %s AND status IN (1, 2)", [node]
        )
        return rows[0][0]

    def side(self) -> list[tuple[str, str, str, str, int]]:
        """(node, tag, id, key, attempt) for each complete line of the side file."""
        return [line[:5] for line in self.side_timed()]

    def side_timed(self) -> list[tuple[str, str, str, str, int, float]]:
        """(node, tag, id, key, attempt, epoch time) for each complete line of the side file."""
        path = self.workdir / "side"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().split("\n")[:-1]:
            node, tag, ident, key, attempt, at = line.split(" ")
            out.append((node, tag, ident, key, int(attempt), float(at)))
        return out

    def handled(self, tag: str = "W") -> dict[str, list[tuple[str, str, int]]]:
        """id -> [(node, key, attempt), ...] of that tag's lines, in file order."""
        found: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
        for node, t, ident, key, attempt in self.side():
            if t == tag:
                found[ident].append((node, key, attempt))
        return found

    def emitted(self) -> dict[str, list[str]]:
        """id -> the addresses whose stream holds it (each sink emits the id
        of each message it handles), over every stream in the schema."""
        from storage._reading import decode_record

        found: dict[str, list[str]] = defaultdict(list)
        rows = self.query(
            "SELECT i.address, s.iid, s.value FROM {s}.stream s JOIN {s}.instances i USING (iid)"
        )
        for address, iid, value in rows:
            found[decode_record(value, "stream", bytes(iid))].append(address)
        return found

    def acks(self) -> tuple[set[str], list[str], set[str]]:
        """(acknowledged ids, error lines, nodes whose senders are done)."""
        path = self.workdir / "acks"
        acked, errors, done = set(), [], set()
        if path.exists():
            for line in path.read_text().split("\n")[:-1]:
                kind, rest = line.split(" ", 1)
                if kind == "S":
                    acked.add(rest.split()[0])
                elif kind == "E":
                    errors.append(rest)
                elif kind == "D":
                    done.add(rest)
        return acked, errors, done


@pytest.fixture
def cluster(pg, tmp_path):
    made = Cluster(pg, tmp_path)
    yield made
    made.end()  # before the schema is dropped


def wait_for(predicate, timeout: float, what: str) -> float:
    """Poll ``predicate`` until true; the seconds it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - start


def wait_moved(cluster: Cluster, node: str, since: float, what: str) -> float:
    """Wait until ``node`` owns no live instance; seconds since ``since``."""
    wait_for(lambda: cluster.live_owned_by(node) == 0, 10, what)
    return time.monotonic() - since


@pytest.mark.slow
def test_a_signal_sent_on_one_node_reaches_the_owner_on_another(cluster):
    a, b, c = cluster.start("a", "b", "c")
    c.call("start", proc="sink", params=["r1"])
    assert "c" == cluster.owner("sink/r1")
    for msg_id, sender in enumerate([a, b, a], start=1):
        sender.call("send", address="sink/r1", payload={"id": msg_id})
        took = wait_for(lambda i=str(msg_id): i in cluster.handled(), 5, f"message {msg_id}")
        assert took < 2.0  # its NOTIFY woke c at once
    assert {str(i): ["c"] for i in (1, 2, 3)} == {
        i: [n for n, _, _ in lines] for i, lines in cluster.handled().items()
    }
    assert "c" == cluster.owner("sink/r1")  # nobody else claimed it meanwhile


def audit_exactly_once(
    cluster: Cluster, acked: set[str], killed: str | None = None, *, cut_short: bool = False
) -> list[str]:
    """Every acknowledged message was handled once: one idempotency key per
    id, one run of the step per node that was not ``killed`` (a step cut
    short by the kill runs again, as the same step, on its new owner). With
    ``cut_short`` (a fault that cut steps short on every node, such as a
    database outage) a step may run again anywhere, with the same key and
    the next attempt number: steps are at least once, keyed.

    Returns the ids taken twice by the node that owned the instance (in the
    same run, under a later key: a late re-delivery of a taken message);
    any other departure fails here."""
    handled = cluster.handled()
    missing = acked - set(handled)
    assert not missing, f"acknowledged but never handled: {sorted(missing)[:20]}"
    doubled = []
    for ident in sorted(acked):
        lines = handled[ident]
        keys = [key for _, key, _ in lines]
        if len(set(keys)) > 1:
            runs = {key.rsplit("/", 2)[0] for key in keys}
            nodes = {n for n, _, _ in lines}
            assert len(nodes) == 1 and len(runs) == 1 and len(keys) == len(set(keys)), (
                f"message {ident} was taken more than once: {lines}"
            )
            doubled.append(ident)
            continue
        survivors = [n for n, _, _ in lines if n != killed]
        assert len(survivors) <= 1 or cut_short, f"message {ident} was handled twice: {lines}"
        attempts = [attempt for _, _, attempt in lines]
        assert attempts == sorted(set(attempts)), f"message {ident}: {lines}"
    return doubled


@pytest.mark.slow
def test_sigkill_under_load_loses_nothing_and_moves_the_instances(cluster):
    a, b, c = cluster.start("a", "b", "c")
    sinks = {n.name: [f"sink/{n.name}{i}" for i in range(k)] for n, k in ((a, 6), (b, 2), (c, 2))}
    for n in (a, b, c):
        for address in sinks[n.name]:
            n.call("start", proc="sink", params=[address.split("/")[1]])
    targets = [address for group in sinks.values() for address in group]
    b.call("load", targets=targets, first=0, count=60, tasks=4, pace=0.01)
    c.call("load", targets=targets, first=100_000, count=60, tasks=4, pace=0.01)
    wait_for(lambda: len(cluster.acks()[0]) >= 150, 20, "150 acknowledged sends")
    wait_for(lambda: any(ls[0][0] == "a" for ls in cluster.handled().values()), 5, "a at work")
    killed_at = time.monotonic()
    a.signal(signal.SIGKILL)
    moved = wait_moved(cluster, "a", killed_at, "a's instances to move")
    print(f"takeover after SIGKILL: {moved:.3f} s")
    assert moved < TAKEOVER
    assert {"b", "c"} >= {cluster.owner(address) for address in sinks["a"]}
    wait_for(lambda: cluster.acks()[2] == {"b", "c"}, 30, "the senders to finish")
    acked, errors, _ = cluster.acks()
    assert not errors
    assert len(acked) == 2 * 4 * 60
    wait_for(lambda: acked <= set(cluster.handled()), 30, "every acknowledged message handled")
    cluster.quiescent()  # anything handled twice is in the side file by now
    doubled = audit_exactly_once(cluster, acked, killed="a")
    wait_for(lambda: acked <= set(cluster.emitted()), 5, "every handled message's emit")
    emitted = cluster.emitted()
    assert {} == {i: addresses for i, addresses in emitted.items() if len(addresses) != 1}
    after = [i for i, lines in cluster.handled().items() if lines[-1][0] != "a"]
    assert after, "nothing was handled after the kill"
    assert not doubled, f"messages handled twice: {', '.join(doubled[:5])}"


@pytest.mark.slow
def test_sigstop_past_the_lease_moves_the_instances_and_fences_the_sleeper(cluster):
    a, b, c = cluster.start("a", "b", "c")
    frozen = [f"sink/f{i}" for i in range(4)]
    for address in frozen:
        a.call("start", proc="sink", params=[address.split("/")[1]])
    for i, address in enumerate(frozen):
        b.call("send", address=address, payload={"id": i})
    wait_for(lambda: len(cluster.handled()) == 4, 5, "a to handle the first messages")
    a.call("quiescent")  # a is idle: its instances wait for mail
    stopped_at = time.monotonic()
    a.signal(signal.SIGSTOP)
    try:
        moved = wait_moved(cluster, "a", stopped_at, "a's instances to move")
        print(f"takeover after SIGSTOP: {moved:.3f} s")
        assert moved < TAKEOVER
        for i, address in enumerate(frozen):  # served by their new owners
            c.call("send", address=address, payload={"id": 10 + i})
        wait_for(lambda: len(cluster.handled()) == 8, 5, "the new owners to handle mail")
    finally:
        a.signal(signal.SIGCONT)
    # a wakes up believing it still runs its instances. Mail it sends them
    # reaches its stale copies too; their writes are refused, and they step aside.
    for i, address in enumerate(frozen):
        a.call("send", address=address, payload={"id": 20 + i})
    wait_for(lambda: len(cluster.handled()) == 12, 5, "the mail a sent after waking")
    wait_for(lambda: a.log.read_text().count("gave up 'sink/f") == 4, 5, "a to give them up")
    cluster.quiescent()
    handled = cluster.handled()
    assert all(len(lines) == 1 for lines in handled.values()), handled
    late = [str(i) for i in range(10, 24) if str(i) in handled]  # sent once a was frozen
    assert {n for i in late for n, _, _ in handled[i]} <= {"b", "c"}
    assert {"b", "c"} >= {cluster.owner(address) for address in frozen}
    assert "Traceback" not in a.log.read_text()
    # ... and goes on serving cleanly.
    a.call("start", proc="sink", params=["later"])
    b.call("send", address="sink/later", payload={"id": 99})
    wait_for(lambda: "99" in cluster.handled(), 5, "a to handle new work")
    assert [("a", "sink/later/1/0/W/1", 1)] == cluster.handled()["99"]


@pytest.mark.slow
def test_a_timer_due_while_its_owner_is_dead_fires_once_elsewhere(cluster):
    (a,) = cluster.start("a")
    sleepers = [f"sleeper/t{i}" for i in range(6)]
    for address in sleepers:
        a.call("start", proc="sleeper", params=[address.split("/")[1]], input={"seconds": 1.0})
    wait_for(
        lambda: all(cluster.status(s) == "suspended" for s in sleepers), 5, "the sleepers to wait"
    )
    a.signal(signal.SIGKILL)
    a.proc.wait()
    time.sleep(1.5)  # every timer falls due while its owner is dead
    assert not cluster.side()
    cluster.start("b", "c")
    wait_for(lambda: len(cluster.handled("T")) == len(sleepers), 10, "the timers to fire")
    wait_for(lambda: all(cluster.status(s) == "completed" for s in sleepers), 5, "completion")
    cluster.quiescent()
    fired = cluster.handled("T")
    assert {s.split("/")[1] for s in sleepers} == set(fired)
    assert all(len(lines) == 1 and lines[0][0] in ("b", "c") for lines in fired.values()), fired


@pytest.mark.slow
def test_cancelling_a_parent_reaches_its_child_on_another_node(cluster):
    # c runs only kids, so when a dies the kid moves to c and its parent
    # waits for b, which starts later and takes the parent.
    a, c = cluster.start("a", procs="parent,kid") + cluster.start("c", procs="kid")
    a.call("start", proc="parent", params=["p1"])
    kid = "parent/p1/kid/p1"
    wait_for(lambda: cluster.status(kid) == "suspended", 5, "the kid to start")
    a.signal(signal.SIGKILL)
    wait_for(lambda: cluster.owner(kid) == "c", 5, "c to take the kid")
    (_b,) = cluster.start("b", procs="parent,kid")
    wait_for(lambda: cluster.owner("parent/p1") == "b", 5, "b to take the parent")
    assert "c" == cluster.owner(kid)
    assert c.call("cancel", address="parent/p1") is True
    wait_for(lambda: cluster.status(kid) == "cancelled", 5, "the cascade to reach the kid")
    assert "cancelled" == cluster.status("parent/p1")
    assert "c" == cluster.owner(kid)  # cancelled where it ran
