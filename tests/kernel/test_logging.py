"""What the runtime logs under ``actors``: each event of the vocabulary in
`actors._kernel._reports`, at its level, naming the address in the message and
carrying it as ``record.actors_address``; DEBUG records only when enabled."""

from __future__ import annotations

import logging

import pytest
import trio

import actors
from actors import Context, OneForOne, Retry, Signal, process
from actors._kernel import _reports
from storage import instance_id
from tests.runtime_helpers import wait_status
from tests.system.test_corrupt_records import BAD, _start_all_as_if_crashed_mid_run, damage, echo

go = Signal("go")


def events(caplog, level: int | None = None) -> list[tuple[str, int, str | None, str]]:
    """(logger, level, actors_address, message) of each record under ``actors``."""
    return [
        (r.name, r.levelno, getattr(r, "actors_address", "MISSING"), r.getMessage())
        for r in caplog.records
        if r.name.startswith("actors") and (level is None or r.levelno == level)
    ]


@pytest.fixture(autouse=True)
def _capture(caplog):
    caplog.set_level(logging.INFO, logger="actors")


# -- crashes, restarts, escalation, failure -----------------------------------------


@process("flaky/:name")
async def flaky(ctx: Context, name: str) -> None:
    await ctx.step(_noop)
    raise RuntimeError(f"flaky {name} broke")


def _noop() -> None:
    pass


@process("boss/:name", supervision=OneForOne(max_restarts=2, within=60))
async def boss(ctx: Context, name: str) -> None:
    await ctx.spawn(flaky, "k", restart="permanent")
    await ctx.wait(go)


async def test_a_child_crashing_past_the_limit_logs_each_crash_restart_and_the_escalation(
    opener, autojump_clock, caplog
):
    async with opener(boss, flaky) as system:
        handle = await system.start(boss, "b")
        with pytest.raises(actors.ProcessFailed):
            await handle.result()
    kid = "boss/b/flaky/k"
    warnings = events(caplog, logging.WARNING)
    crashes = [w for w in warnings if "crashed" in w[3] and w[2] == kid]
    # Two restarts allowed: three runs of the child crash.
    assert 3 == len(crashes)
    assert (
        "actors.supervision",
        logging.WARNING,
        kid,
        f"child {kid!r} of 'boss/b' crashed: RuntimeError: flaky k broke",
    ) == crashes[0]
    crash_records = [r for r in caplog.records if r.getMessage() == crashes[0][3]]
    assert None is crash_records[0].exc_info  # its own raise: one line (traceback at DEBUG)
    restarts = [w[3] for w in warnings if w[3].startswith("restarting")]
    assert [
        f"restarting {kid!r} (restart 1, restart 1 after RuntimeError('flaky k broke')) in "
        "0.1 s under OneForOne(max_restarts=2, within=60)",
        f"restarting {kid!r} (restart 2, restart 2 after RuntimeError('flaky k broke')) in "
        "0.2 s under OneForOne(max_restarts=2, within=60)",
    ] == restarts
    errors = events(caplog, logging.ERROR)
    assert [
        (
            "actors.supervision",
            logging.ERROR,
            kid,
            f"child {kid!r} failed past the restart limit of 'boss/b' (2 within 60 s under "
            "OneForOne(max_restarts=2, within=60)): RuntimeError('flaky k broke'); the "
            "parent crashes with ChildFailed",
        ),
        (
            "actors.supervision",
            logging.ERROR,
            "boss/b",
            "process 'boss/b' failed: ChildFailed: child 'boss/b/flaky/k' crashed past its "
            "restart limit (2 within 60 s): RuntimeError('flaky k broke')",
        ),
    ] == errors
    # The parent's crash (ChildFailed) is a warning of its own before its failure.
    assert ["boss/b"] == [w[2] for w in warnings if "crashed" in w[3] and w[2] != kid]


async def test_a_top_level_crash_is_a_warning_and_its_failure_an_error(opener, caplog):
    async with opener(flaky) as system:
        handle = await system.start(flaky, "t")
        with pytest.raises(actors.ProcessFailed):
            await handle.result()
    assert [
        (
            "actors.supervision",
            logging.WARNING,
            "flaky/t",
            "process 'flaky/t' crashed: RuntimeError: flaky t broke",
        ),
        (
            "actors.supervision",
            logging.ERROR,
            "flaky/t",
            "process 'flaky/t' failed: RuntimeError: flaky t broke",
        ),
    ] == [e for e in events(caplog) if e[1] >= logging.WARNING]


@process("unsendable/:name")
async def unsendable(ctx: Context, name: str) -> object:
    return object()  # a result the codec cannot carry: the runtime fails it, not the code


async def test_a_crash_the_process_raised_is_one_line_with_its_traceback_at_debug(opener, caplog):
    caplog.set_level(logging.DEBUG, logger="actors.supervision")
    async with opener(flaky) as system:
        with pytest.raises(actors.ProcessFailed):
            await (await system.start(flaky, "d")).result()
    records = [
        r
        for r in caplog.records
        if getattr(r, "actors_address", None) == "flaky/d" and r.name == "actors.supervision"
    ]
    assert [
        (logging.WARNING, "process 'flaky/d' crashed: RuntimeError: flaky d broke", None),
        (
            logging.DEBUG,
            "traceback of the crash of 'flaky/d': RuntimeError: flaky d broke",
            RuntimeError,
        ),
        (logging.ERROR, "process 'flaky/d' failed: RuntimeError: flaky d broke", None),
    ] == [(r.levelno, r.getMessage(), r.exc_info and r.exc_info[0]) for r in records]
    trace = logging.Formatter().formatException(records[1].exc_info)
    assert 'raise RuntimeError(f"flaky {name} broke")' in trace  # down to the process's line


async def test_a_crash_the_runtime_raised_around_the_process_keeps_its_traceback_on_the_warning(
    opener, caplog
):
    async with opener(unsendable) as system:
        with pytest.raises(actors.ProcessFailed):
            await (await system.start(unsendable, "u")).result()
    crashes = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING
        and r.getMessage().startswith("process 'unsendable/u' crashed: EncodeError")
    ]
    assert 1 == len(crashes)
    assert actors.EncodeError == crashes[0].exc_info[0]  # not the process's code: shown at once


# -- stuck compensations ------------------------------------------------------------------


def _charge(order: str) -> str:
    return f"ch-{order}"


def _refund_never(order: str) -> None:
    raise ConnectionError(f"refund of {order} refused")


@process("stuck/:id")
async def stuck(ctx: Context, id: str) -> None:
    await ctx.step(_charge, id, compensate=_refund_never, retry=Retry(attempts=2, backoff=0.1))
    await ctx.wait(go)
    raise ValueError("declined")


async def test_a_compensation_that_gives_up_is_an_error_naming_the_instance(
    opener, autojump_clock, caplog
):
    async with opener(stuck) as system:
        handle = await system.start(stuck, "s1")
        await system.send("stuck/s1", go)
        assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")
    errors = events(caplog, logging.ERROR)
    assert 1 == len(errors)
    name, _level, address, message = errors[0]
    assert ("actors.supervision", "stuck/s1") == (name, address)
    assert message.startswith("instance 'stuck/s1' is parked compensation_stuck: ")
    assert "refund of s1 refused" in message
    assert message.endswith("resume_compensation or abandon_compensation decides")


# -- the system: open, close, corrupt records ----------------------------------------------


@process("hang/:id")
async def hang(ctx: Context, id: str) -> None:
    await ctx.step(_forever)


attempts_started: list[int] = []


async def _forever() -> None:
    attempts_started.append(1)
    await trio.sleep_forever()


async def test_open_and_close_are_info_with_what_recovery_found(opener, caplog):
    attempts_started.clear()
    async with opener(hang, echo) as system:
        await system.start(hang, "h")
        await system.start(echo, "e")
        await wait_status(system.get("echo/e"), "suspended")
        while not attempts_started:
            await trio.sleep(0.01)
    path = repr(str(opener.path))
    assert [
        (
            "actors.system",
            logging.INFO,
            None,
            f"system opened on LMDBJournal({path}): resumed 0, stuck 0, 0 orphaned "
            "child(ren) to cancel, 0 corrupt",
        ),
        (
            "actors.system",
            logging.INFO,
            None,
            f"system closing on LMDBJournal({path}): 2 live instance(s) stay as they are and "
            "resume on the next open",
        ),
    ] == events(caplog)
    caplog.clear()
    async with opener(hang, echo):
        pass
    # The step cut short by the close runs again; the waiting one stays on disk.
    assert (
        f"system opened on LMDBJournal({path}): resumed 1, stuck 0, 0 orphaned "
        "child(ren) to cancel, 0 corrupt"
    ) == events(caplog)[0][3]


async def test_a_corrupt_record_found_at_open_is_an_error_naming_the_address(opener, caplog):
    await _start_all_as_if_crashed_mid_run(opener)
    damage(opener.path, b"instances", instance_id(f"echo/{BAD}"), "record")
    caplog.clear()
    async with opener(echo):
        pass
    errors = events(caplog, logging.ERROR)
    assert 1 == len(errors)
    name, _, address, message = errors[0]
    assert ("actors.system", f"echo/{BAD}") == (name, address)
    assert message.startswith(f"instance 'echo/{BAD}' is corrupt and is not recovered: ")
    assert "1 corrupt" in events(caplog, logging.INFO)[0][3]


# -- DEBUG: deliveries and effects ------------------------------------------------------------


async def test_debug_records_deliveries_and_effects_only_when_enabled(opener, caplog):
    caplog.set_level(logging.WARNING, logger="actors")
    async with opener(echo) as system:
        assert system.log_debug is False  # cached at open: nothing on the hot path
        await system.start(echo, "quiet")
        await system.send("echo/quiet", go, 1)
        assert "hello quiet 1" == await system.get("echo/quiet").result()
    assert [] == events(caplog)

    caplog.set_level(logging.DEBUG, logger="actors")
    async with opener(echo) as system:
        assert system.log_debug is True
        await system.start(echo, "loud")
        await system.send("echo/loud", go, 2)
        assert "hello loud 2" == await system.get("echo/loud").result()
    debug = events(caplog, logging.DEBUG)
    assert [
        (
            "actors.instance",
            logging.DEBUG,
            "echo/loud",
            "message 1 ('go') delivered to 'echo/loud'",
        ),
        ("actors.instance", logging.DEBUG, "echo/loud", "effect 1 (Wait) of 'echo/loud' done"),
    ] == debug


# -- the vocabulary itself ------------------------------------------------------------------


def test_every_event_names_the_address_and_carries_it(caplog):
    caplog.set_level(logging.DEBUG, logger="actors")
    exc = RuntimeError("boom")
    strategy = OneForOne()
    _reports.crashed("a/1", exc, parent=None)
    _reports.crashed("a/1/b/2", exc, parent="a/1")
    _reports.restarting("a/1", count=1, reason="restart 1 after exit", strategy=strategy, delay=0.1)
    _reports.sibling_restarting("a/2", reason="restart: sibling a/1 crashed", strategy=strategy)
    _reports.failed("a/1", "RuntimeError: boom")
    _reports.gave_up("a/1/b/2", parent="a/1", why="RuntimeError('boom')", strategy=strategy)
    _reports.compensation_stuck("a/1", "ConnectionError: no")
    _reports.corrupt("a/1", exc)
    _reports.taken_over("a/1", "node-b", exc)
    _reports.lease_lost("node-b", "a/1")
    _reports.delivered("a/1", 3, "go")
    _reports.effect_done("a/1", 4, "Step", exc)
    records = [r for r in caplog.records if r.name.startswith("actors")]
    assert 12 == len(records)
    for record in records:
        assert record.actors_address in record.getMessage(), record.getMessage()
    assert [
        logging.WARNING,
        logging.WARNING,
        logging.WARNING,
        logging.WARNING,
        logging.ERROR,
        logging.ERROR,
        logging.ERROR,
        logging.ERROR,
        logging.WARNING,
        logging.WARNING,
        logging.DEBUG,
        logging.DEBUG,
    ] == [r.levelno for r in records]
    taken = records[8].getMessage()
    assert "node 'node-b' gave up 'a/1': another node took it over (boom)" == taken


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


@process("odd/:id")
async def odd(ctx: Context, id: str) -> None:
    raise Unprintable("odd")


async def test_an_exception_whose_str_raises_is_logged_all_the_same(opener, caplog):
    async with opener(odd) as system:
        with pytest.raises(actors.ProcessFailed):
            await (await system.start(odd, "o")).result()
    assert [
        (logging.WARNING, "process 'odd/o' crashed: Unprintable: Unprintable('odd')"),
        (logging.ERROR, "process 'odd/o' failed: Unprintable: Unprintable('odd')"),
    ] == [(e[1], e[3]) for e in events(caplog) if e[1] >= logging.WARNING]
