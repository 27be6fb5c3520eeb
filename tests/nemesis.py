"""Three nodes under a seeded nemesis, then an audit of what they promised.

    python -m tests.nemesis --seeds 1-5 [--duration 30] [--restart-server]

Each seed runs three node programs (tests/nemesis_node.py) on a fresh
schema of a private PostgreSQL server (tests/pg_cluster.py) for
``--duration`` seconds. A workload (``random.Random("workload-<seed>")``)
posts to the nodes that are up: plain, keyed and asked messages to
long-lived sinks (which continue as new every 25 messages), starts of
jobs, including the same fresh or completed jobs from two nodes at once
(with and without ``if_exists="error"``), pairs started with a message from
two nodes at once (fresh, or after a cancel), queued jobs and durable
timers. Idle instances passivate after 0.5 s, so mail and timers load
them again. A nemesis (``random.Random("nemesis-<seed>")``, its plan
printed with ``--verbose``) meanwhile does one thing at a time: SIGKILL a
node and start it again under its name; SIGSTOP one for 0.3-3 s (past its
lease, or not), and sometimes SIGKILL it while it is stopped; end some or
all of a node's server sessions (``pg_terminate_backend``); and with
``--restart-server`` stop the server (fast, or immediate: a crash) for up
to 2.5 s, at least once per seed, also while a node is stopped, or with a
killed node started again while the server is down.

The nodes write every outcome to files (one ``write()`` each, O_APPEND;
see tests/nemesis_node.py), so a SIGKILL loses no record of what was
acknowledged. After the run the faults are healed, the nodes get time to
settle, and the audit (tests/nemesis_audit.py) counts:

- ``lost``: acknowledged messages never handled, and acknowledged starts
  of jobs, queued jobs and sleepers that never completed;
- ``duplicated``: a message (or a job's, queued job's or timer's step)
  handled under two idempotency keys: taken twice. A step run again under
  the same key is the documented at-least-once of steps, not counted;
- ``overwritten``: a completed job whose stored result is not the one it
  completed with, or an address whose acknowledged starts name two
  incarnations where only one may exist (a race of starts, a job);
- ``node_deaths``: a node program that exited on its own (it is started
  again, and the run goes on);
- ``server_restarts``: real restarts of the server;

and after those, ``misreplied`` (an ask answered with another's reply),
``failed`` (an instance failed, corrupt or stuck: none of these processes
fails) and ``refused`` (a message to a live sink refused). Any of them
above zero is a broken promise.

One line per seed, ``seed N acknowledged=.. lost=.. duplicated=..
overwritten=.. node_deaths=.. server_restarts=..`` (then the others),
and the evidence of anything that broke; exit status 1 if anything broke.
A seed's plan of faults is the same on every run; timing is real, so the
interleavings differ; a failing seed keeps its directory (node logs,
record files, ``nemesis.log``) and is run again with ``--seeds N``.
``--tree DIR`` runs the nodes on another checkout's runtime (say a
``git archive`` of a commit, while the working tree is being edited).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from tests.nemesis_audit import ENDING, Audit, Records, read_journal

ROOT = Path(__file__).resolve().parent.parent
NODE_PROGRAM = Path(__file__).resolve().parent / "nemesis_node.py"
NAMES = ("a", "b", "c")
SINKS = 12


# -- node programs ------------------------------------------------------------------


class NodeProgram:
    """One node program, started again under its name after a kill."""

    def __init__(
        self, name: str, dsn: str, schema: str, workdir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name, self.dsn, self.schema, self.workdir = name, dsn, schema, workdir
        self.env = env or {}
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.launches = 0
        self.killed = False  # by us: its exit is no death
        self._cond = threading.Condition()
        self._replies: dict[Any, dict[str, Any]] = {}
        self._next = 0

    def launch(self) -> None:
        env = {**os.environ, **self.env}
        # NEMESIS_TREE: a checkout whose actors/ and storage/ the nodes run
        # (say, `git archive` of a commit), instead of this one's.
        paths = [env.get("NEMESIS_TREE"), str(ROOT), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        self.launches += 1
        with open(self.log, "ab") as log:
            log.write(f"--- launch {self.launches} at {time.time():.3f}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(NODE_PROGRAM),
                    self.dsn,
                    self.schema,
                    self.name,
                    str(self.workdir),
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        with self._cond:
            self.proc, self.killed = proc, False
            self._replies = {}
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                if proc is self.proc:
                    self._replies[message.get("id", "ready")] = message
                    self._cond.notify_all()
        with self._cond:
            if proc is self.proc:
                self._replies["exit"] = {}
                self._cond.notify_all()

    def wait_ready(self, timeout: float = 90.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while "ready" not in self._replies:
                if "exit" in self._replies or time.monotonic() > deadline:
                    return False
                self._cond.wait(0.05)
            return True

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def post(self, cmd: str, **args: Any) -> int | None:
        """Send a command; its id, or None if the program is gone."""
        with self._cond:
            self._next += 1
            ident = self._next
            proc = self.proc
        if proc is None or proc.stdin is None:
            return None
        try:
            proc.stdin.write((json.dumps({"id": ident, "cmd": cmd, **args}) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return None
        return ident

    def answer(self, ident: int | None, timeout: float) -> dict[str, Any] | None:
        """The reply to ``ident``, or None (no reply in time, or it exited)."""
        if ident is None:
            return None
        deadline = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                if "exit" in self._replies or time.monotonic() > deadline:
                    return None
                self._cond.wait(0.05)
            return self._replies.pop(ident)

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL (a stopped one too), and wait for it."""
        self.killed = True
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
            self.proc.wait()
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):  # a write of ours was cut off: nothing to flush
                    self.proc.stdin.close()

    def quit(self, timeout: float = 15.0) -> None:
        """Close the system cleanly (kill it if it does not within ``timeout``)."""
        if self.proc is None:
            return
        self.killed = True
        if self.alive():
            self.thaw()
            self.post("quit")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        self.kill()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# -- the workload ---------------------------------------------------------------------


class Workload:
    """Posts ops to the nodes that are up, at a seeded pace and mix."""

    MIX = (  # (weight, op)
        (30, "send"),
        (12, "ksend"),
        (8, "ask"),
        (10, "job_race"),
        (5, "job_again"),
        (7, "pair_race"),
        (4, "pair_cancel"),
        (5, "pair_restart"),
        (7, "queue"),
        (5, "timer"),
    )

    def __init__(
        self,
        seed: int,
        nodes: dict[str, NodeProgram],
        up: Callable[[], list[str]],
        records: Records,
        rate: float = 1.0,
    ) -> None:
        self.rng = random.Random(f"workload-{seed}")
        self.rate = rate
        self.nodes, self.up, self.records = nodes, up, records
        self.msg = 0
        self.serial = 0
        self.jobs: list[tuple[float, str]] = []  # (started at, id)
        self.cancelling: list[str] = []  # pair ids being started and cancelled
        self.restarted: set[str] = set()
        self.posted: dict[str, list[tuple[int, int]]] = defaultdict(list)  # node -> (launch, id)
        self.halt = threading.Event()
        self.counts: Counter[str] = Counter()

    def _next_msg(self) -> int:
        self.msg += 1
        return self.msg

    def _name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def post(self, node: str, ops: list[dict[str, Any]]) -> None:
        program = self.nodes[node]
        ident = program.post("batch", ops=ops)
        if ident is not None:
            self.posted[node].append((program.launches, ident))

    def run(self) -> None:
        weights = [w for w, _ in self.MIX]
        kinds = [k for _, k in self.MIX]
        while not self.halt.wait(self.rng.uniform(0.04, 0.16) / self.rate):
            kind = self.rng.choices(kinds, weights)[0]
            up = self.up()
            if not up:
                continue
            getattr(self, kind)(up)
            self.counts[kind] += 1

    def _sinks(self, n: int) -> list[str]:
        return [f"sink/s{self.rng.randrange(SINKS)}" for _ in range(n)]

    def send(self, up: list[str]) -> None:
        ops = [{"op": "send", "address": a, "msg": self._next_msg()} for a in self._sinks(4)]
        self.post(self.rng.choice(up), ops)

    def ksend(self, up: list[str]) -> None:
        ops = [{"op": "ksend", "address": a, "msg": self._next_msg()} for a in self._sinks(3)]
        self.post(self.rng.choice(up), ops)

    def ask(self, up: list[str]) -> None:
        ops = [
            {"op": "ask", "address": a, "msg": self._next_msg(), "timeout": 8}
            for a in self._sinks(2)
        ]
        self.post(self.rng.choice(up), ops)

    def _two(self, up: list[str]) -> list[str]:
        return self.rng.sample(up, 2) if len(up) > 1 else up

    def job_race(self, up: list[str]) -> None:
        ids = [self._name("j") for _ in range(6)]
        tag = self._name("race")
        for node in self._two(up):
            if_exists = self.rng.choice(["return", "error"])
            self.post(
                node,
                [
                    {"op": "start", "proc": "job", "id": i, "if_exists": if_exists, "tag": tag}
                    for i in ids
                ],
            )
        now = time.monotonic()
        self.jobs += [(now, i) for i in ids]

    def job_again(self, up: list[str]) -> None:
        old = [i for at, i in self.jobs if time.monotonic() - at > 2.0]
        if not old:
            return
        ids = self.rng.sample(old, min(6, len(old)))
        tag = self._name("again")
        for node in self._two(up):
            if_exists = self.rng.choice(["return", "error"])
            self.post(
                node,
                [
                    {"op": "start", "proc": "job", "id": i, "if_exists": if_exists, "tag": tag}
                    for i in ids
                ],
            )

    def pair_race(self, up: list[str]) -> None:
        ids = [self._name("p") for _ in range(4)]
        tag = self._name("pr")
        for node in self._two(up):
            self.post(
                node,
                [
                    {"op": "sws", "proc": "pair", "id": i, "msg": self._next_msg(), "tag": tag}
                    for i in ids
                ],
            )

    def pair_cancel(self, up: list[str]) -> None:
        ids = [self._name("c") for _ in range(3)]
        self.post(
            self.rng.choice(up),
            [{"op": "start_cancel", "proc": "pair", "id": i, "tag": "made"} for i in ids],
        )
        self.cancelling += ids

    def pair_restart(self, up: list[str]) -> None:
        self.records.refresh()
        cancelled = {c.address for c in self.records.cancels if c.cancelled}
        ready = [i for i in self.cancelling if f"pair/{i}" in cancelled and i not in self.restarted]
        if not ready:
            return
        ids = ready[:3]
        self.restarted.update(ids)
        tag = self._name("cr")
        for node in self._two(up):
            self.post(
                node,
                [
                    {"op": "sws", "proc": "pair", "id": i, "msg": self._next_msg(), "tag": tag}
                    for i in ids
                ],
            )

    def queue(self, up: list[str]) -> None:
        ops = [
            {
                "op": "start",
                "proc": "qjob",
                "id": self._name("q"),
                "queue": True,
                "input": {"seconds": round(self.rng.uniform(0.02, 0.2), 3)},
            }
            for _ in range(3)
        ]
        self.post(self.rng.choice(up), ops)

    def timer(self, up: list[str]) -> None:
        ops = [
            {
                "op": "start",
                "proc": "sleeper",
                "id": self._name("t"),
                "input": {"seconds": round(self.rng.uniform(0.1, 3.0), 3)},
            }
            for _ in range(2)
        ]
        self.post(self.rng.choice(up), ops)


# -- the nemesis ----------------------------------------------------------------------


@attrs.frozen
class Fault:
    """One fault of a seed's plan, ``at`` seconds into the run."""

    at: float
    kind: str  # kill, stop, terminate, stop_kill, server, stop_server, kill_server
    node: str | None = None
    down: float = 0.0  # seconds a killed node or the server stays down
    frozen: float = 0.0  # seconds a node stays stopped
    mode: str = "fast"  # how the server stops: fast, or immediate (a crash)
    which: str = "all"  # terminate: all, one, lease, all-but-lease
    pick: float = 0.0  # terminate one: which of the sessions, as a fraction


def plan_faults(seed: int, duration: float, restart_server: bool) -> list[Fault]:
    """The seed's faults, one at a time, the same on every run; with
    ``restart_server`` at least one of them restarts the server."""
    rng = random.Random(f"nemesis-{seed}")
    kinds = {"kill": 3, "stop": 3, "terminate": 2, "stop_kill": 1}
    if restart_server:
        kinds |= {"server": 2, "stop_server": 1, "kill_server": 1}
    plan: list[Fault] = []
    at = rng.uniform(1.0, 2.5)
    while at < duration - 3.0:
        kind = rng.choices(list(kinds), list(kinds.values()))[0]
        fault = Fault(round(at, 2), kind, node=None if kind == "server" else rng.choice(NAMES))
        if kind in ("kill", "stop_kill"):
            fault = attrs.evolve(fault, down=round(rng.uniform(0.2, 2.0), 2))
        if kind in ("stop", "stop_kill"):
            fault = attrs.evolve(fault, frozen=round(rng.uniform(0.3, 3.0), 2))
        if kind == "terminate":
            which = rng.choice(["all", "one", "lease", "all-but-lease"])
            fault = attrs.evolve(fault, which=which, pick=round(rng.random(), 3))
        if kind.endswith("server"):
            mode = rng.choice(["fast", "immediate"])
            fault = attrs.evolve(fault, mode=mode, down=round(rng.uniform(0.2, 2.5), 2))
        plan.append(fault)
        at += rng.uniform(1.5, 4.0) + fault.down + fault.frozen
    if restart_server and not any(f.kind.endswith("server") for f in plan):
        # At least one real restart: it takes the place of a fault mid-run.
        i = len(plan) // 2
        at = plan[i].at if plan else duration / 2
        mode = rng.choice(["fast", "immediate"])
        plan[i : i + 1] = [Fault(at, "server", mode=mode, down=round(rng.uniform(0.2, 2.5), 2))]
    return plan


# -- one seed -------------------------------------------------------------------------


@attrs.frozen
class Options:
    """How a seed runs."""

    duration: float = 30.0  # seconds of workload and faults
    restart_server: bool = False  # real server restarts among the faults
    settle: float = 45.0  # seconds allowed, after the run, for everything to finish
    lease: float = 1.0  # the nodes' lease_timeout
    rate: float = 1.0  # the workload's pace (2.0: twice as many ops a second)
    verbose: bool = False  # print each fault as it happens
    keep: bool = False  # keep the seed's directory even if nothing broke


@attrs.define
class Figures:
    """What a seed's audit counted (the line `summary` prints), and its evidence."""

    seed: int
    acknowledged: int = 0  # messages and starts
    lost: int = 0
    duplicated: int = 0
    overwritten: int = 0
    node_deaths: int = 0
    server_restarts: int = 0
    messages: int = 0
    starts: int = 0
    faults: dict[str, int] = attrs.Factory(dict)
    misreplied: int = 0
    failed: int = 0
    refused: int = 0
    seconds: float = 0.0
    broken: bool = False
    evidence: list[str] = attrs.Factory(list)
    workdir: str = ""

    def summary(self) -> str:
        faults = ",".join(f"{k}:{v}" for k, v in sorted(self.faults.items())) or "none"
        return (
            f"seed {self.seed} acknowledged={self.acknowledged} lost={self.lost} "
            f"duplicated={self.duplicated} overwritten={self.overwritten} "
            f"node_deaths={self.node_deaths} server_restarts={self.server_restarts} "
            f"messages={self.messages} starts={self.starts} faults={faults} "
            f"misreplied={self.misreplied} failed={self.failed} refused={self.refused} "
            f"seconds={self.seconds}"
        )


class SeedRun:
    """One seed's schema, nodes, workload, nemesis and audit."""

    def __init__(self, seed: int, server: Any, options: Options, workdir: Path) -> None:
        self.seed, self.server, self.options, self.workdir = seed, server, options, workdir
        self.dsn = server.dsn()
        self.schema = f"nemesis_{seed}_{uuid.uuid4().hex[:8]}"
        self.records = Records(workdir)
        # Idle instances passivate at once, so that mail and timers load them again.
        env = {"NEMESIS_PASSIVATE": "0.5", "NEMESIS_LEASE": str(options.lease)}
        self.nodes = {n: NodeProgram(n, self.dsn, self.schema, workdir, env) for n in NAMES}
        self._lock = threading.Lock()
        self._busy: set[str] = set()  # nodes the nemesis has taken down
        self.deaths: list[str] = []
        self.faults: Counter[str] = Counter()
        self.server_restarts = 0
        self._done = threading.Event()

    def say(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] seed {self.seed}: {text}"
        with open(self.workdir / "nemesis.log", "a") as f:
            f.write(line + "\n")
        if self.options.verbose:
            print(line, flush=True)

    def up(self) -> list[str]:
        """The nodes the workload may post to now."""
        with self._lock:
            return [n for n in NAMES if n not in self._busy and self.nodes[n].alive()]

    def _take(self, node: str) -> None:
        deadline = time.monotonic() + 90
        while True:
            with self._lock:
                if node not in self._busy or time.monotonic() > deadline:
                    self._busy.add(node)
                    return
            time.sleep(0.05)  # the watcher starts it again after a death

    def _give(self, node: str) -> None:
        with self._lock:
            self._busy.discard(node)

    def _watch(self) -> None:
        """Count node programs that exit on their own, and start them again."""
        while not self._done.wait(0.1):
            for name, node in self.nodes.items():
                with self._lock:
                    if name in self._busy or node.killed or node.proc is None or node.alive():
                        continue
                    self._busy.add(name)
                code = node.proc.returncode
                self.deaths.append(f"node {name} exited with {code}; its log:\n{node.log_tail()}")
                self.say(f"node {name} DIED (exit {code}); starting it again")
                try:
                    node.launch()
                    node.wait_ready()
                finally:
                    self._give(name)

    def _fault(self, fault: Fault) -> None:
        self.faults[fault.kind] += 1
        if fault.kind == "server":
            # The workload goes on posting: what the nodes are asked meanwhile
            # fails, or rides the outage out, and the audit sees which.
            self._restart_server(fault)
            return
        assert fault.node is not None
        node = self.nodes[fault.node]
        self._take(fault.node)
        try:
            if fault.kind in ("stop", "stop_kill"):
                self.say(f"SIGSTOP {node.name} for {fault.frozen} s")
                node.freeze()
                time.sleep(fault.frozen)
                if fault.kind == "stop":
                    node.thaw()
            if fault.kind in ("kill", "stop_kill"):  # stop_kill: it dies frozen, wherever it was
                self._kill(node, fault.down)
            elif fault.kind == "stop_server":  # frozen across the outage
                self.say(f"SIGSTOP {node.name} across a server restart")
                node.freeze()
                try:
                    self._restart_server(fault)
                    time.sleep(0.5)
                finally:
                    node.thaw()
            elif fault.kind == "kill_server":  # started again while the server is down
                self.say(f"SIGKILL {node.name} (pid {node.pid}) and stop the server ({fault.mode})")
                node.kill()
                self.server.stop(fault.mode)
                node.launch()
                time.sleep(fault.down)
                self.server.start()
                self.server_restarts += 1
                ok = node.wait_ready()
                self.say(f"server up; {node.name} is pid {node.pid}{'' if ok else ', NOT READY'}")
            elif fault.kind == "terminate":
                self._terminate(node, fault)
        finally:
            self._give(fault.node)

    def _kill(self, node: NodeProgram, down: float) -> None:
        self.say(f"SIGKILL {node.name} (pid {node.pid}), down {down} s")
        node.kill()
        time.sleep(down)
        node.launch()
        ok = node.wait_ready()
        self.say(f"{node.name} started again (pid {node.pid}){'' if ok else ': NOT READY'}")

    def _restart_server(self, fault: Fault) -> None:
        self.say(f"server stop ({fault.mode}), down {fault.down} s")
        self.server.restart(fault.mode, down=fault.down)
        self.server_restarts += 1
        self.say("server up again")

    def _terminate(self, node: NodeProgram, fault: Fault) -> None:
        import psycopg

        from tests.pg_cluster import node_sessions

        if node.pid is None:
            return
        sessions = sorted(node_sessions(self.dsn, node.pid, self.server.port))
        lease = [s for s in sessions if s[1].startswith("actors lease")]
        chosen = {
            "one": sessions[int(fault.pick * len(sessions)) :][:1],
            "lease": lease,
            "all-but-lease": [s for s in sessions if s not in lease],
        }.get(fault.which, sessions)
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            for pid, _app in chosen:
                conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        self.say(
            f"terminated {len(chosen)} of {node.name}'s {len(sessions)} sessions "
            f"({fault.which}): {[app for _, app in chosen]}"
        )

    def _setup(self) -> None:
        for node in self.nodes.values():
            node.launch()
        for node in self.nodes.values():
            if not node.wait_ready():
                raise RuntimeError(f"node {node.name} did not open:\n{node.log_tail()}")
        ops: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for i in range(SINKS):
            ops[NAMES[i % len(NAMES)]].append({"op": "start", "proc": "sink", "id": f"s{i}"})
        for name, batch in ops.items():
            node = self.nodes[name]
            if node.answer(node.post("batch", ops=batch), 30) is None:
                raise RuntimeError(f"node {name} did not start its sinks:\n{node.log_tail()}")

    def _settled(self) -> bool:
        self.records.refresh()
        handled = self.records.handled("W")
        if any(f"W:{msg}" not in handled for msg in self.records.acked):
            return False
        finished = self.records.finished()
        return all(
            s.address in finished for s in self.records.starts if s.address.split("/")[0] in ENDING
        )

    def run(self) -> Figures:
        began = time.monotonic()
        plan = plan_faults(self.seed, self.options.duration, self.options.restart_server)
        self.say(f"schema {self.schema}; plan: {plan}")
        self._setup()
        watcher = threading.Thread(target=self._watch, daemon=True)
        watcher.start()
        workload = Workload(self.seed, self.nodes, self.up, self.records, self.options.rate)
        loader = threading.Thread(target=workload.run, daemon=True)
        loader.start()
        t0 = time.monotonic()
        try:
            for fault in plan:
                time.sleep(max(0.0, t0 + fault.at - time.monotonic()))
                self._fault(fault)
            time.sleep(max(0.0, t0 + self.options.duration - time.monotonic()))
        finally:
            workload.halt.set()
            loader.join()
        # Heal: the server up, every node running; then let them finish.
        if not self.server.running():
            self.server.start()
        for node in self.nodes.values():
            node.thaw()
        self.say(f"workload stopped ({dict(workload.counts)}); letting the nodes settle")
        deadline = time.monotonic() + 30
        for name, node in self.nodes.items():
            for launch, ident in workload.posted[name]:
                if launch == node.launches:  # an earlier launch's never comes
                    node.answer(ident, max(0.1, deadline - time.monotonic()))
        deadline = time.monotonic() + self.options.settle
        while time.monotonic() < deadline and not self._settled():
            time.sleep(0.5)
        for node in self.nodes.values():  # a second handling is recorded by then
            if node.alive():
                node.answer(node.post("batch", ops=[{"op": "quiescent"}]), 20)
        self._done.set()
        watcher.join()
        self.records.refresh()
        audit = Audit(self.records, *read_journal(self.dsn, self.schema))
        for node in self.nodes.values():
            node.quit()
        self._drop_schema()
        r = self.records
        return Figures(
            self.seed,
            acknowledged=len(r.acked) + len(r.starts),
            lost=len(audit.lost),
            duplicated=len(audit.duplicated),
            overwritten=len(audit.overwritten),
            node_deaths=len(self.deaths),
            server_restarts=self.server_restarts,
            messages=len(r.acked),
            starts=len(r.starts),
            faults=dict(self.faults),
            misreplied=len(audit.misreplied),
            failed=len(audit.failed),
            refused=len(audit.refused),
            seconds=round(time.monotonic() - began, 1),
            broken=audit.broken or bool(self.deaths),
            evidence=audit.evidence() + [f"  node_death: {d}" for d in self.deaths],
        )

    def _drop_schema(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        except psycopg.Error:
            pass

    def end(self) -> None:
        self._done.set()
        for node in self.nodes.values():
            node.kill()


def run_seed(seed: int, server: Any, options: Options) -> Figures:
    """Run one seed on ``server`` (a `tests.pg_cluster.PgCluster`); its figures.
    Its directory (``figures.workdir``) is kept if it broke, or with ``keep``."""
    workdir = Path(tempfile.mkdtemp(prefix=f"nemesis-{seed}-"))
    run = SeedRun(seed, server, options, workdir)
    try:
        figures = run.run()
    finally:
        run.end()
    figures.workdir = str(workdir)
    if not figures.broken and not options.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


def parse_seeds(text: str) -> list[int]:
    """``"1-5"``, ``"2,7"``, ``"1-3,9"``: the seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.nemesis", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--seeds", default="1", help="e.g. 1-5 or 2,7 (default 1)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of faults per seed")
    parser.add_argument("--restart-server", action="store_true", help="restart the server too")
    parser.add_argument("--settle", type=float, default=45.0, help="seconds allowed to settle")
    parser.add_argument("--lease", type=float, default=1.0, help="the nodes' lease_timeout")
    parser.add_argument("--rate", type=float, default=1.0, help="the workload's pace (x)")
    parser.add_argument("--keep", action="store_true", help="keep every seed's directory")
    parser.add_argument("--verbose", "-v", action="store_true", help="print each fault")
    parser.add_argument(
        "--tree", help="run the nodes on the actors/ and storage/ of this checkout (NEMESIS_TREE)"
    )
    args = parser.parse_args(argv)
    if args.tree:
        os.environ["NEMESIS_TREE"] = str(Path(args.tree).resolve())
        sys.path.insert(0, os.environ["NEMESIS_TREE"])  # the audit reads with its storage too
    options = Options(
        duration=args.duration,
        restart_server=args.restart_server,
        settle=args.settle,
        lease=args.lease,
        rate=args.rate,
        verbose=args.verbose,
        keep=args.keep,
    )

    from tests.pg_cluster import PgCluster

    broke = False
    with PgCluster() as server:
        for seed in parse_seeds(args.seeds):
            figures = run_seed(seed, server, options)
            print(figures.summary(), flush=True)
            for line in figures.evidence:
                print(line, flush=True)
            if figures.broken or options.keep:
                print(f"  records and node logs: {figures.workdir}", flush=True)
            broke = broke or figures.broken
    return 1 if broke else 0


if __name__ == "__main__":
    sys.exit(main())
