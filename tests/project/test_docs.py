"""The documentation's programs run and print what the pages say they print.

Each tutorial program in docs/examples/ runs as a user would run it, in a
subprocess with a time limit: on virtual time where it waits days, on a
temporary journal where it needs a directory. The site build itself runs
when mkdocs is installed (the 'docs' extra).
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.pg import test_dsn

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


def run(*command: object, cwd: Path = ROOT, timeout: float = 60) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert 0 == done.returncode, (
        f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout.splitlines()


def run_example(name: str, *args: object) -> list[str]:
    return run(sys.executable, EXAMPLES / name, *args)


def test_first_process(tmp_path):
    assert [
        "greeters/ann -> hello, ann?",
        "greeters/ann completed hello, ann?",  # the second system found it finished
    ] == run_example("first_process.py", tmp_path / "state")


def test_signals():
    assert [
        "{'cart': 'c-1', 'items': ['apple', 'pear'], 'note': 'leave at the door'}",
        "NotDelivered: completed",
    ] == run_example("signals.py")


def test_signals_by_identity():
    assert [
        "reached 4",
        "ann earns points for o-17",
        "order o-17 shipped with DHL: ['parcel p1 delivered (DHL)', 'parcel p2 delivered (DHL)']",
        "o-18 unread: 0",
        "warehouse unread: 0",
    ] == run_example("signals_by_identity.py")


def test_asks():
    assert [
        "ask add 5: 5",
        "ask total: 6",  # the retried keyed send was stored once
        "AskTimeout: True",
        "replay problems with v2: []",
        "old history, v2, add 1: 7",  # patched() said False: the old arithmetic
        "new instance, v2, add 1: 2",
    ] == run_example("asks.py")


def test_timers():
    assert [
        "nudge 1 to bob on day 3",
        "nudge 2 to bob on day 6",
        "nudge 3 to bob on day 9",  # once each: the replays print nothing
        "bob never answered",
        "nudge 1 to ann on day 2",
        "ann answered 'yes' after 1 nudge(s)",
        "virtual time passed: 12 days",
    ] == run_example("timers.py")


def test_steps():
    key = "orders/o-1/1/0/charge/1"
    assert [
        "lookup o-1, attempt 1",
        f"attempt 1 of charge, key {key}",
        f"attempt 2 of charge, key {key}",
        f"attempt 3 of charge, key {key}",  # one key for every attempt
        "result: charge-o-1-40",
        f"keys the provider saw: {{'{key}': 1}}",
        "lookup missing, attempt 1",  # non_retryable: no second attempt
        "result: no such order (builtins.KeyError: 'missing')",
    ] == run_example("steps.py")


def test_sagas():
    lines = run_example("sagas.py")
    assert (
        [
            "t-1:",
            "  reserve flight",
            "  reserve hotel",
            "['flight-for-t-1', 'hotel-for-t-1']",
            "t-2:",
            "  reserve flight",
            "  reserve hotel",
            "  reserve car",
            "  release hotel (hotel-for-t-2)",  # newest first; the failed car step has none
            "  release flight (flight-for-t-2)",
        ]
        == lines[:-1]
    )
    assert lines[-1].startswith("t-2 failed: actors.errors.StepFailed: step 'reserve-car' failed")
    assert lines[-1].endswith("RuntimeError: no cars left")


def test_sagas_log_the_failure_in_two_lines_as_the_page_shows():
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "sagas.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
        check=True,
    )
    page = (ROOT / "docs" / "tutorial" / "sagas.md").read_text()
    lines = done.stderr.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        "process 'trips/t-2' crashed",
        "process 'trips/t-2' failed",
    ]
    assert all(line in page for line in lines)  # no traceback: that is at DEBUG


def test_supervision():
    assert [
        "shops/s-1/worker/w1 -> w1 done",
        "restarts: [\"restart 1 after RuntimeError('worker lost its connection')\"]",
        "{'apple': 50, 'others': {'fig': 30, 'kiwi': 40, 'melon': 50}, 'worker': 'shops/s-1/worker/w1'}",
    ] == run_example("supervision.py")


def test_streams():
    assert [
        "dashboard got {'n': 1, 'celsius': 20.5}",
        "dashboard got {'n': 2, 'celsius': 21.0}",
        "stopped after 4 readings; exports: {'last': 22.0, 'count': 4}",
        "dashboard resumed: [3, 4]",  # right after its durable cursor
        "archive read: [1, 2, 3, 4]",
    ] == run_example("streams.py")


def test_testing_example():
    lines = run(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        EXAMPLES / "testing_example.py",
    )
    assert any("replayed a different effect at position 1" in line for line in lines), lines
    assert re.fullmatch(r"3 passed in [\d.]+s", lines[-1]), lines[-1]


def test_cli(tmp_path):
    """cli.sh runs cli_order.py, the CLI's list, show and send, cli_order.py again, and list."""
    lines = run("sh", EXAMPLES / "cli.sh", tmp_path / "state")
    assert "orders/o-1 is suspended" == lines[0]
    assert lines[1].split() == ["ADDRESS", "PROCESS", "STATUS", "UPDATED", "(UTC)", "DETAIL"]
    assert lines[2].split()[:3] == ["orders/o-1", "orders/:order_id", "suspended"]
    assert "orders/o-1  ·  suspended" in lines
    assert '  input         {"amount": 30}' in lines
    sent = next(line for line in lines if line.startswith("sent "))
    assert sent.startswith("sent 'approved' to orders/o-1 as message #1; it is suspended")
    assert "result: {'order': 'o-1', 'amount': 30, 'by': 'ann'}" in lines
    listing = json.loads("\n".join(lines[lines.index("{") :]))
    assert [("orders/o-1", "completed")] == [
        (row["address"], row["status"]) for row in listing["instances"]
    ]


def test_postgres_nodes():
    if os.environ.get("ACTORS_TEST_POSTGRES", "1") == "0":
        pytest.skip("PostgreSQL tests are off (ACTORS_TEST_POSTGRES=0)")
    psycopg = pytest.importorskip("psycopg", reason="install the '[postgres]' extra")
    schema = f"docs_{uuid.uuid4().hex[:12]}"
    try:
        assert [
            "node-a: o-1 approved by ann",
            "node-b sees it completed",
        ] == run_example("postgres_nodes.py", test_dsn(), schema)
    finally:
        with psycopg.connect(test_dsn(), autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_operating():
    assert [
        "a done",
        "cancelled b: True",
        "cancel b again: False",
        "all jobs: [('jobs/a', 'completed'), ('jobs/b', 'cancelled'), ('jobs/c', 'suspended')]",
        "suspended: ['jobs/c']",
        "cleaned up 2 instance(s); jobs/a is now None",
        "jobs/c is still suspended",
    ] == run_example("operating.py")


def test_every_example_is_tested_and_included_in_a_page():
    pages = "".join(path.read_text() for path in (ROOT / "docs").rglob("*.md"))
    tested = Path(__file__).read_text()
    for example in sorted(EXAMPLES.iterdir()):
        if example.suffix in (".py", ".sh"):
            assert f'--8<-- "docs/examples/{example.name}"' in pages, example.name
            assert example.name in tested, example.name


def test_the_tutorial_index_lists_every_tutorial_page():
    index = (ROOT / "docs" / "tutorial" / "index.md").read_text()
    listed = re.findall(r"^\d+\. \[[^]]+\]\(([^)#]+)\)", index, re.M)
    pages = sorted(
        p.name for p in (ROOT / "docs" / "tutorial").glob("*.md") if p.name != "index.md"
    )
    assert pages == sorted(listed)
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [] == [page for page in pages if f"tutorial/{page}" not in nav]


def test_readme_is_short_its_commands_are_ci_s_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 350  # the reference material lives under docs/
    command = "pip install -e '.[test,postgres]' && python -m pytest -q"
    assert f"```sh\n{command}\n```" in text
    ci = (ROOT / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")
    assert command in ci.splitlines()  # CI runs the command README gives (quietly)
    assert '`python -m pytest -q -m "not slow"`' in text
    assert "```sh\npip install -e . && python -m bench\n```" in text
    links = re.findall(r"\]\((?!https?:)([^)#]+)(?:#[^)]*)?\)", text)
    assert [] == [link for link in links if not (ROOT / link).exists()]
    for page in ("guarantees", "limits", "operating", "postgresql", "benchmarks", "changing-code"):
        assert f"](docs/{page}.md)" in text, page  # every moved section, one click away


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation site, built once with warnings as errors."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    directory = tmp_path_factory.mktemp("site")
    run(sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", directory, timeout=300)
    return directory


@pytest.mark.slow  # the build takes 3-10 s
def test_the_site_builds_with_warnings_as_errors(site):
    assert (site / "index.html").is_file()


def _page_text(path: Path) -> tuple[set[str], str]:
    """The anchors of a built page, and its text with tags and runs of space dropped."""
    page = path.read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    return set(re.findall(r'id="([^"]+)"', page)), re.sub(r"\s+", " ", text)


def _summary(value: object) -> str:
    """A docstring's first sentence as the site shows it (no code quotes)."""
    first = (inspect.getdoc(value) or "").strip().split("\n\n")[0]
    first = re.sub(r"\s+", " ", first).replace("`", "")
    return re.split(r"(?<=\.)\s", first)[0]


@pytest.mark.slow  # it builds the site, unless the build test did
@pytest.mark.parametrize(
    "module_name, page",
    [
        ("actors", "actors"),
        ("storage", "storage"),
        ("actors.testing", "testing"),
        ("actors.errors", "errors"),
    ],
)
def test_the_reference_renders_every_public_name_with_its_docstring(site, module_name, page):
    module = importlib.import_module(module_name)
    errors = importlib.import_module("actors.errors")
    names = getattr(module, "__all__", None) or [  # actors.errors: every exception it holds
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and inspect.isclass(value) and issubclass(value, Exception)
    ]
    assert names, module_name
    anchors, text = _page_text(site / "reference" / page / "index.html")
    error_anchors, error_text = _page_text(site / "reference" / "errors" / "index.html")
    missing, undocumented = [], []
    for name in names:
        value = getattr(module, name)
        if f"{module_name}.{name}" in anchors:
            shown = text
        elif getattr(errors, name, None) is value and f"actors.errors.{name}" in error_anchors:
            shown = error_text  # errors are rendered once, on actors.errors' page
        else:
            missing.append(name)
            continue
        if (inspect.isclass(value) or inspect.isfunction(value)) and _summary(value) not in shown:
            undocumented.append(name)
    assert ([], []) == (missing, undocumented)
    markdown = (ROOT / "docs" / "reference" / f"{page}.md").read_text()
    assert [] == [
        name for name in names if f"[`{name}`]" not in markdown
    ]  # for a reader of the repository
