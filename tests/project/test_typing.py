"""The public API's types catch a user's mistakes under ``mypy --strict``.

One mypy run (per module) checks two programs with the project's own mypy
configuration: a correct one, which must pass, and the same program with
typed mistakes added, each marked ``# E: <error code>`` on its line; mypy
must report exactly those, on exactly those lines. The run also checks the
packages themselves (they are imported), so they stay clean too. Skipped
only where mypy is not installed (CI installs it with the 'typing' extra).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    '''\
    """A program as a user writes it, with the mistakes marked."""

    from __future__ import annotations

    import actors
    import storage
    from actors import Context, process


    def double(x: int) -> int:
        return 2 * x


    async def fetch_name(user_id: str) -> str:
        return f"user {user_id}"


    @process("profiles/:user_id")
    async def profile(ctx: Context, user_id: str) -> str:
        return await ctx.step(fetch_name, user_id)


    @process("users/:user_id")
    async def user(ctx: Context, user_id: str, *, factor: int) -> int:
        doubled: int = await ctx.step(double, factor, thread=False, name="double")
        name: str = await ctx.step(fetch_name, user_id)
        label: str = await ctx.call(profile, user_id)
        wrong_sync: str = await ctx.step(double, factor)  # E: arg-type
        wrong_async: int = await ctx.step(fetch_name, user_id)  # E: arg-type
        wrong_child: int = await ctx.call(profile, user_id)  # E: call-overload
        return doubled + len(name) + len(label)


    async def main(system: actors.ActorSystem) -> int:
        handle = await system.start(user, "u-1", factor=3)
        total: int = await handle.result()
        wrong_result: str = await handle.result()  # E: assignment
        # With start's own options the input is not checked, the result still is.
        unique = await system.start(user, "u-4", if_exists="error", factor=3)
        checked: int = await unique.result()
        queued = await system.start(user, "u-5", priority=1, factor=3)
        wrong_again: str = await queued.result()  # E: assignment
        await system.start(user, "u-2", factor="3")  # E: arg-type
        await system.start(user, "u-3")  # E: call-overload
        # String options are their words, not any string.
        await system.start(profile, "u-6", if_exists="replace")  # E: call-arg
        system.stream("profiles/u-1", "mine", from_="end")  # E: arg-type
        storage.LMDBJournal("j", durability="fast")  # E: arg-type
        finished = handle.status == "complete"  # E: comparison-overlap
        status: storage.Status | None = None if handle.status == "unknown" else handle.status
        return total + checked + len(status or "")
    '''
)

MARK = re.compile(r"#\s*E:\s*([\w-]+)\s*$")
REPORTED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[\w-]+)\]$")


def _expected(source: str) -> list[tuple[int, str]]:
    return [
        (number, match.group(1))
        for number, line in enumerate(source.splitlines(), 1)
        if (match := MARK.search(line))
    ]


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[str]]:
    """Run mypy once over both programs: (exit status, error lines)."""
    api = pytest.importorskip("mypy.api", reason="install the 'typing' extra")
    where = tmp_path_factory.mktemp("typing")
    correct = "\n".join(line for line in PROGRAM.splitlines() if not MARK.search(line))
    (where / "correct_program.py").write_text(correct + "\n")
    (where / "mistaken_program.py").write_text(PROGRAM)
    with pytest.MonkeyPatch.context() as patch:
        # This checkout's packages, not whatever an installed copy points at.
        patch.setenv("MYPYPATH", str(ROOT))
        out, err, status = api.run(
            [
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "--cache-dir",
                str(where / "cache"),
                "--no-error-summary",
                "--show-error-codes",
                "--no-pretty",
                str(where / "correct_program.py"),
                str(where / "mistaken_program.py"),
            ]
        )
    assert "" == err
    return status, [line for line in out.splitlines() if ": error: " in line]


def test_typed_mistakes_are_reported_on_their_lines(mypy_report):
    _, errors = mypy_report
    expected = _expected(PROGRAM)
    assert 11 == len(expected)
    found = [
        (int(m["line"]), m["code"])
        for line in errors
        if (m := REPORTED.match(line)) and Path(m["file"]).name == "mistaken_program.py"
    ]
    assert expected == found, "\n".join(errors)


def test_the_correct_program_and_the_packages_pass(mypy_report):
    status, errors = mypy_report
    assert [] == [line for line in errors if "mistaken_program.py:" not in line]
    assert 1 == status  # only because of the mistaken program's errors


def test_the_messages_name_the_types_read_from_the_functions(mypy_report):
    _, errors = mypy_report
    messages = {
        int(m["line"]): line.split(": error: ", 1)[1]
        for line in errors
        if (m := REPORTED.match(line))
    }
    source = PROGRAM.splitlines()

    def message(fragment: str) -> str:  # the error on the line holding ``fragment``
        return messages[next(n for n, text in enumerate(source, 1) if fragment in text)]

    # A sync step is its function's result (int), not the str asked for...
    assert 'incompatible type "Callable[[int], int]"' in message("wrong_sync: str")
    # ...an async step is what its coroutine gives (str), not an int...
    assert 'expected "Callable[..., Awaitable[int]]"' in message("wrong_async: int")
    assert '"Callable[[str], Coroutine[Any, Any, str]]"' in message("wrong_async: int")
    # ...a child's result is its process's (str), and so is a handle's (int).
    assert '"ProcessDef[[str], str]"' in message("wrong_child: int")
    assert (
        'Incompatible types in assignment (expression has type "int", variable has type "str")'
    ) in message("wrong_result: str")
    # start checks the input against the process function's parameters.
    assert (
        'Argument "factor" to "start" of "ActorSystem" has incompatible type "str"; expected "int"'
    ) in message('factor="3"')
