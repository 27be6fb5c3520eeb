"""Bugs this project once had, planted back one at a time, to show that the
simulation finds them.

A plant is a patch of one function's source, applied in the process that
runs the seeds and never in the shipped code: the function is compiled
again from its source with one snippet replaced, and put back when the
plant is lifted. A snippet that is no longer in the source is an error, so
a plant cannot silently stop planting anything once the code moves on.

``python -m tests.simulation --plant NAME --seeds 1-500 --first`` sweeps
until the first seed that fails (the figures in docs/simulation.md);
tests/whole/test_simulation_plants.py replays each plant's recorded seed.
"""

from __future__ import annotations

import importlib
import inspect
import os
import textwrap
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import attrs

#: The environment variable that plants a bug in the process that reads it
#: (sweep workers included); the CLI's ``--plant`` sets it.
ENV = "ACTORS_SIMULATION_PLANT"


@attrs.frozen
class Plant:
    """Replace ``old`` with ``new`` in the source of ``module.qualname``."""

    module: str
    qualname: str
    old: str
    new: str
    what: str  # the bug, as it was
    nodes: int = 1  # the node count the simulation finds it with
    #: Further patches planted with this one (a bug that lived in two places).
    also: tuple[Plant, ...] = ()
    #: Modules that import the function by name (``from .x import f``): their
    #: name for it is replaced too.
    aliases: tuple[str, ...] = ()

    @contextmanager
    def planted(self) -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(self._patched())
            for other in self.also:
                stack.enter_context(other.planted())
            yield

    @contextmanager
    def _patched(self) -> Iterator[None]:
        module = importlib.import_module(self.module)
        *owner_path, name = self.qualname.split(".")
        owner: Any = module
        for part in owner_path:
            owner = getattr(owner, part)
        real = owner.__dict__[name]
        source = textwrap.dedent(inspect.getsource(real))
        old, new = textwrap.dedent(self.old).strip("\n"), textwrap.dedent(self.new).strip("\n")
        lines = source.splitlines()
        # The snippet matches whole lines, whatever their indent in the source.
        for start in range(len(lines)):
            window = lines[start : start + len(old.splitlines())]
            indent = len(window[0]) - len(window[0].lstrip()) if window else 0
            if textwrap.dedent("\n".join(window)) == old:
                lines[start : start + len(window)] = textwrap.indent(new, " " * indent).splitlines()
                break
        else:
            raise AssertionError(f"plant {self.qualname}: the snippet is no longer in its source")
        space: dict[str, Any] = {}
        code = compile("\n".join(lines) + "\n", f"<planted {self.qualname}>", "exec")
        exec(code, vars(module), space)  # noqa: S102 - a test's patch of our own source
        setattr(owner, name, space[name])
        importers = [importlib.import_module(alias) for alias in self.aliases]
        for importer in importers:
            assert getattr(importer, name) is real, f"{importer.__name__}.{name} is another"
            setattr(importer, name, space[name])
        try:
            yield
        finally:
            setattr(owner, name, real)
            for importer in importers:
                setattr(importer, name, real)


PLANTS: dict[str, Plant] = {
    # A leaf whose work waits for the actor's task (a step awaited alone)
    # let its instance park without a task, so the work never ran (not a
    # bug we had; the runner that steps parked instances, workload 7).
    "parked-with-work": Plant(
        "actors._actor._runner",
        "may_park",
        old="""
            not actor.busy
            and actor.inline is None
            and not actor.tasks_to_start
            and (nursery is None or not nursery.child_tasks)
        """,
        new="""
            (nursery is None or not nursery.child_tasks)  # planted: not its own work
        """,
        what="an instance parks without a task while its step waits for that task",
    ),
    # A run that stopped for a nursery and then raised in it was taken for
    # parked (5a9270b, before it landed): the instance never left memory
    # and was never loaded again.
    "raised-in-nursery": Plant(
        "actors._actor._activation",
        "Activation.main",
        old="""
                if held and self.tasks_to_start:
        """,
        new="""
                parked = held  # planted: parked until the nursery's run says
                if held and self.tasks_to_start:
        """,
        what="a run that raised in the nursery it stopped for is taken for parked",
    ),
    # An admitted instance run twice (391ba4c): mail that activated it
    # between its queue's admission and the pump's call ran it to its end;
    # the pump then ran it again from the row it read before, and that
    # run's "suspended" went over the completed end.
    "admitted-twice": Plant(
        "actors._system._registry",
        "Registry.run_admitted",
        old="""
            if (
                proc is None
                or row.iid in self.live
                or row.iid in self.activating
                or self.journal.reads_at_once
            ):
                self.activate(row.iid)
                return
            self.routed_absent.add(row.iid)  # its actor loads it: see run_created
            self.run_created(row.iid, row.address, proc, row.record, epoch)
        """,
        new="""
            if proc is None or row.iid in self.live or row.iid in self.activating:
                self.activate(row.iid)
                return
            from .._kernel._mailbox import StoredMessage  # planted: run from the row read before
            with self.journal.reader() as r:
                mail = r.mailbox(row.iid)
            actor = self.run_created(row.iid, row.address, proc, row.record, epoch)
            for seq, message in mail:
                actor.arrivals.deliver(seq, StoredMessage.from_stored(message))
        """,
        what="an admitted instance that mail ran to its end runs again",
    ),
    # The creation race (fixed with the registry's `routed_absent`): a message routed
    # between an instance's commit and its actor's making found no actor,
    # asked for an activation that the start held off, and the new actor
    # never read its mailbox.
    "creation-race": Plant(
        "actors._system._registry",
        "Registry.run_created",
        old="loaded = iid not in self.routed_absent",
        new="loaded = True  # planted: mail routed meanwhile is never read",
        what="a message routed between a start's commit and its actor stays unread",
    ),
    # A cancel lost to a racing restart (f65a239): an actor told to cancel
    # as it crashed wrote its restart and left memory; the cancel returned.
    "cancel-restart": Plant(
        "actors._system._lifecycle",
        "Lifecycle.cancel_iid",
        old="continue  # it left memory still live (restarted): cancel that",
        new="return actor.status == 'cancelled'  # planted: the restart runs on",
        what="a cancel that meets a restart returns while the instance runs on",
    ),
    # A live payload aliased with the stored one (aed007f): a live receiver
    # got the sender's own object, so the sender's later mutation changed
    # what the process saw, while its replay reads the stored bytes.
    "aliased-payload": Plant(
        "actors._features._sending",
        "Router.send_iid",
        old="txn.then = partial(self.route, notice)",
        new="""
            def then(results):
                receiver = self.system.registry.live.get(iid)
                if receiver is not None and not receiver.done:  # planted: the sender's object
                    aliased = StoredMessage(signal.name, payload, None, None, ask)
                    receiver.arrivals.deliver(results[0], aliased)
                else:
                    self.route(notice, results)
            txn.then = then
        """,
        what="a live receiver gets the sender's object, not the stored bytes",
    ),
    # An ambiguous commit redone (dd36110): the committer took a connection
    # lost after COMMIT for a failed statement and ran the batch again.
    "redone-commit": Plant(
        "storage._simulated",
        "SimulatedJournal._outcomes",
        old="""
            applied = frozenset(
                id(txn) for txn in txns if written and not isinstance(self._run(txn), Exception)
            )
            return [
        """,
        new="""
            applied = frozenset(
                id(txn) for txn in txns if written and not isinstance(self._run(txn), Exception)
            )
            if not written: return [  # planted: a written batch runs again below
        """,
        what="a batch whose commit may have been written runs again",
    ),
    # A start whose caller was cancelled after its commit (64@2): written
    # 'running', never run here, and never taken over (its node lives).
    "cancelled-start": Plant(
        "actors._system._lifecycle",
        "Lifecycle.start",
        old="""
            start.txn.in_doubt = lambda _: registry.spawn_system_task(
                registry.reload_when_back, iid
            )
            results = await journal.commit(start.txn)
        """,
        new="results = await journal.commit(start.txn)  # planted: no in-doubt path",
        what="a start committed as its caller is cancelled is never run",
        nodes=2,
    ),
    # Not a bug this project had: the fence that keeps a node whose lease
    # lapsed from writing to an instance another node took over.
    "unfenced-barrier": Plant(
        "actors._actor._writes",
        "Writes._own",
        old="""
            if actor.fenced:
                txn.fence(actor.iid, actor.epoch)
        """,
        new="pass  # planted: an actor's writes carry no fence",
        what="an actor's own writes carry no fencing epoch",
        nodes=2,
    ),
    # Not a bug this project had: a round that admits several instances
    # counts one start against the rate (workload 5's rated queue).
    "rate-per-round": Plant(
        "actors._features._queues",
        "QueueService._admit",
        old="""
            if queue.rate is not None:
                starts.append(now)
        """,
        new="""
            if queue.rate is not None and now not in starts:  # planted: once a round
                starts.append(now)
        """,
        what="a round that admits several instances counts one start against the rate",
    ),
    # Not a bug this project had: a ``ctx.send`` whose transaction carries
    # the message but not the sender's log entry, so every replay of the
    # sender reaches the send with no entry and sends it again.
    "duplicate-send": Plant(
        "actors._features._sends",
        "_commit",
        old="txn.put_log(actor.iid, actor.run, send.seq, entry.to_stored())",
        new="pass  # planted: the message is written, the sender's entry is not",
        what="a ctx.send writes its message without its log entry: each replay sends again",
    ),
    # Not a bug this project had: a cleanup that keeps no floor, so the
    # next start at the address begins again at incarnation 1 and its
    # steps' idempotency keys repeat the removed incarnation's (workload 6).
    "cleanup-floor": Plant(
        "actors._kernel._transactions",
        "cleanup_txn",
        old="txn.put_state(floor_key(iid), incarnation)",
        new="pass  # planted: no floor",
        what="a cleanup keeps no floor: a new start repeats the removed incarnation's keys",
    ),
    # Workload 8's bugs, fixed after fef4ff8 (seeds.txt's N/w8).
    # A retry that replaced the mailbox (d27e44f): the failed run's unread
    # mail was gone.
    # A cancel's record refused after the instance's own start was lost
    # (an "async" start that met a full journal): the Conflict took the
    # system down instead of the instance leaving memory to be reloaded.
    "lost-start-cancel": Plant(
        "actors._actor._ends",
        "Ends.broke",
        old="if actor.lost is not None and _alone(exc, Conflict) is not None:",
        new="if False:  # planted: a refused write after a lost one is a bug",
        what="a cancel begun after the instance's own start was lost takes the system down",
    ),
    "retry-lost-mail": Plant(
        "actors._system._fork_plan",
        "read_for_fork",
        old='unread = [_copied(m) for _, m in r.mailbox(iid) if not m[0].startswith("\\x00")]',
        new="unread = []  # planted: the new incarnation's mailbox starts empty",
        aliases=("actors._system._fork", "actors._system._retry"),
        what="a retry starts with an empty mailbox: the failed run's unread mail is gone",
    ),
    # A fork to another address given the source's mail (d27e44f), taken
    # messages put back included: the fork took them again.
    "fork-copied-mail": Plant(
        "actors._system._fork_plan",
        "read_for_fork",
        old="if target_iid == iid:",
        new="if True:  # planted: a fork to another address copies the mail",
        aliases=("actors._system._fork", "actors._system._retry"),
        what="a fork to another address copies the source's mail, taken messages included",
    ),
    # A cleanup that removed a finished child on its own age and status
    # (ebd2d86), though its parent was live and had still to join it.
    "cleanup-removed-child": Plant(
        "actors._system._cleanup",
        "families",
        old="verdict = gone[up]",
        new="verdict = True  # planted: a child goes whatever its parent",
        what="a cleanup removes a finished child of a live parent",
        also=(
            Plant(
                "actors._kernel._transactions",
                "cleanup_txn",
                old="txn.require_absent(parent)",
                new="pass  # planted: the parent may be there",
                what="(with cleanup-removed-child)",
            ),
        ),
    ),
    # A handle of a completed instance that a cleanup removed said
    # "cancelled" (ea16b09): it forgot the end it saw.
    "completed-cancelled": Plant(
        "actors._kernel._handles",
        "Handle._state",
        old='elif status in ("unknown", "unread") and self._end is not None:',
        new="elif False:  # planted: the end it saw is forgotten once removed",
        what="the handle of a completed instance a cleanup removed reports 'cancelled'",
    ),
    # Not a bug this project had, the one 5984f96 and 3bc1fb9 keep out: a
    # drop of a message that the actor in memory holds unread does not hold
    # it back, so the actor takes it after the drop returned.
    "drop-not-withheld": Plant(
        "actors._system._drop",
        "drop_message",
        old="held = actor.arrivals.withhold(message_id)",
        new="held = None  # planted: the actor in memory may still take it",
        what="a drop does not hold the message back from the actor in memory",
    ),
    # A drop refused as "dropped already" by a dead letter of an earlier
    # incarnation with the same id (3bc1fb9 bound a drop to the
    # incarnation it read: ids are an incarnation's own, and a retry
    # numbers the mail it carries anew).
    "drop-any-incarnation": Plant(
        "actors._system._drop",
        "drop_refusal",
        old="d.message.id == message_id and d.incarnation == plan.row.record.incarnation",
        new="d.message.id == message_id  # planted: any incarnation's dead letter",
        what="a drop is refused by a dead letter of an earlier incarnation with that id",
    ),
    # Two nodes: a drop of a live instance from a node that does not own it
    # written with no claim (24e0670), while the owner held its mail.
    "drop-unclaimed": Plant(
        "actors._system._drop",
        "drop_message",
        old="if epoch is None and system.journal.shared and plan.row.status in LIVE_STATUSES:",
        new="if False:  # planted: no claim, no fence",
        what="a drop from a node that does not own the instance is written with no claim",
        nodes=2,
    ),
    # Workload 9's, not bugs this project had: the rules of signals routed
    # by identity (#48). A signal's commit not conditional on the buckets'
    # generations, so a start between its read and its commit misses it.
    "signal-generation": Plant(
        "actors._features._signals",
        "signal_txn",
        old="txn.expect_state(gen, version)",
        new="pass  # planted: a start meanwhile is not seen",
        what="a signal commits whatever started since it read its recipients",
    ),
    # A ``ctx.signal`` whose messages are written without its log entry, so
    # each replay of the emitter signals again.
    "signal-unlogged": Plant(
        "actors._features._signals",
        "_run",
        old="txn.put_log(actor.iid, actor.run, effect.seq, effect.describe(value=count).to_stored())",
        new="pass  # planted: the messages are written, the emitter's entry is not",
        what="a ctx.signal writes its messages without its log entry: each replay signals again",
    ),
    # The cache of decoded logs checked by length and last row only (#50,
    # before it landed): an entry rewritten in the middle of a log (a
    # started record replaced by its outcome after later effects) was
    # answered from the cache as it was before.
    "log-cache-length": Plant(
        "storage._log_cache",
        "LogCache.entries",
        old="hit = kept is not None and len(rows) >= count and rows[:count] == kept.rows",
        new=(
            "hit = kept is not None and len(rows) >= count"
            " and rows[count - 1 : count] == kept.rows[-1:]  # planted: length, last row"
        ),
        what="a cached log is checked by its length and last row: a rewritten entry is missed",
    ),
}


@contextmanager
def planted(name: str | None) -> Iterator[None]:
    """Plant the bug ``name`` (None or a workload's own plant: nothing here)."""
    plant = PLANTS.get(name) if name else None
    if plant is None:
        yield
        return
    with plant.planted():
        yield


def from_environment() -> str | None:
    """The plant `ENV` names, checked against the known ones."""
    name = os.environ.get(ENV) or None
    if name is not None and name not in PLANTS and name != "forget-compensation":
        known = ", ".join(sorted([*PLANTS, "forget-compensation"]))
        raise SystemExit(f"{ENV}={name!r} names no plant; the plants are {known}")
    return name
