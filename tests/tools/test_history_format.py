"""The history file format is pinned: a version-1 file kept in the
repository (tests/history_v1.history) still reads, replays and resumes, a
fresh export has exactly its fields, and docs/histories.md names each of
them. A change to the format is then a deliberate one: a new version, a new
golden file (``python -m tests.tools.test_history_format`` writes it again), and
the page brought up to date.

Values go through JSON with tags for what JSON cannot carry; every value the
codec carries comes back equal, of the same type, with the same encoding.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import trio
import trio.testing

import actors
from actors._tools import _history
from actors._tools._history_values import from_plain, to_plain
from actors.testing import import_history, replay_history
from storage import LMDBJournal, Opaque, encode
from tests import strategies
from tests.runtime_helpers import virtual_wall, wait_status
from tests.tools.test_history import CHARGED, approved, export, lmdb_store, order

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "history_v1.history"
DOCS = ROOT / "docs" / "histories.md"


# -- values ------------------------------------------------------------------------------


def through_json(value: Any) -> Any:
    return from_plain(json.loads(json.dumps(to_plain(value), allow_nan=False)))


@hypothesis.given(strategies.values())
@hypothesis.settings(max_examples=100, deadline=None)
def test_every_value_the_codec_carries_comes_back_the_same(value):
    back = through_json(value)
    assert encode(value) == encode(back)  # canonical bytes: type and value kept


def test_what_json_lacks_is_tagged_and_comes_back():
    for value, tagged in [
        (float("inf"), {"$float": "inf"}),
        (2**70, {"$int": str(2**70)}),
        ({"$tuple": 1}, {"$map": [["$tuple", 1]]}),  # a map that would read as a tag
        ({1: "a"}, {"$map": [[1, "a"]]}),
        (b"\x00\xff", {"$bytes": "AP8="}),
        ((1, "a"), {"$tuple": [1, "a"]}),
        ({"a": 1, "$b": 2}, {"a": 1, "$b": 2}),  # two keys: no tag, a plain map
    ]:
        assert tagged == to_plain(value)
        assert encode(value) == encode(through_json(value))
    assert math.isnan(through_json(float("nan")))


def test_a_record_of_an_unregistered_class_is_written_by_name_and_refused_on_reading():
    assert {"$class": ["shop.Gone", {"a": 1}]} == to_plain(Opaque("shop.Gone", {"a": 1}))
    try:
        from_plain({"$class": ["shop.Gone", {"a": 1}]}, "payload")
    except actors.HistoryFormatError as exc:
        assert "'shop.Gone'" in str(exc) and "import the module" in str(exc)
    else:
        raise AssertionError("an unregistered class was read")


def test_an_unknown_tag_is_refused_naming_where():
    try:
        from_plain({"v": {"$blob": "x"}}, "payload")
    except actors.HistoryFormatError as exc:
        assert "payload['v']['$blob']" in str(exc) and "unknown tag" in str(exc)
    else:
        raise AssertionError("an unknown tag was read")


# -- the golden file ---------------------------------------------------------------------


def shape(doc: dict[str, Any]) -> dict[str, set[str]]:
    """Every object of the format and the fields it has (a log entry's by kind)."""
    found: dict[str, set[str]] = {"history": set(doc)}

    def add(name: str, obj: dict[str, Any]) -> None:
        found.setdefault(name, set()).update(obj)

    for one in doc["instances"]:
        add("instance", one)
        add("record", one["record"])
        for run in one["runs"]:
            add("run", run)
            for entry in run["log"]:
                add(f"entry {entry['kind']}", entry)
        for name in ("mail", "timers", "incarnations"):
            for item in one[name]:
                add(name, item)
    return found


async def test_the_golden_file_reads_replays_and_resumes(tmp_path, autojump_clock):
    CHARGED.clear()
    assert [] == await replay_history(GOLDEN, [order])
    history = _history.loads(GOLDEN.read_bytes())
    assert (_history.VERSION, "orders/o-17") == (history.version, history.address)
    assert ["note"] == [m.signal for m in history.instances[0].mail]
    await import_history(GOLDEN, LMDBJournal(tmp_path / "laptop"))
    async with actors.open_system(
        LMDBJournal(tmp_path / "laptop"), [order], now=virtual_wall
    ) as system:
        await system.send("orders/o-17", approved, {"by": "ann"})
        assert {"order": "o-17", "by": "ann", "charged": 100} == await system.get(
            "orders/o-17"
        ).result()
    assert [] == CHARGED  # the charge is answered from the file


async def test_a_fresh_export_has_the_fields_of_the_golden_file(tmp_path):
    doc = await golden_like(tmp_path)
    assert shape(json.loads(GOLDEN.read_text())) == shape(doc)
    assert 1 == doc["version"] == _history.VERSION


def test_the_page_documents_every_field_and_the_version():
    text = DOCS.read_text()
    documented = set(re.findall(r"`([a-z_]+)`", text))
    fields = set().union(*shape(json.loads(GOLDEN.read_text())).values())
    assert set() == fields - documented
    assert f'"version": {_history.VERSION}' in text
    tags = {
        "$tuple",
        "$set",
        "$frozenset",
        "$bytes",
        "$int",
        "$float",
        "$datetime",
        "$date",
        "$time",
        "$timedelta",
        "$decimal",
        "$uuid",
        "$class",
        "$map",
    }
    assert set() == {tag for tag in tags if f"`{tag}`" not in text}


async def golden_like(tmp_path: Path) -> dict[str, Any]:
    """An export of what the golden file holds: an order that was charged
    and waits for approval, with a message of another signal unread."""
    store = lmdb_store(tmp_path / "production")
    async with store.open(order) as system:
        handle = await system.start(order, "o-17", amount=100)
        await wait_status(handle, "suspended")
        await system.send("orders/o-17", actors.Signal("note"), {"text": "gift wrap"})
    return await export(store, "orders/o-17", tmp_path / "order-17.history")


async def _write_golden() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        doc = await golden_like(Path(tmp))
    doc["source"] = "LMDBJournal('./state')"
    GOLDEN.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    CHARGED.clear()


if __name__ == "__main__":  # python -m tests.tools.test_history_format: write the golden file again
    trio.run(_write_golden, clock=trio.testing.MockClock(autojump_threshold=0))
    print(f"wrote {GOLDEN.relative_to(ROOT)}")


@pytest.mark.slow  # pytest runs in a subprocess
def test_the_pages_pytest_example_runs(tmp_path):
    """The page's pytest example, on the golden file and this module's order."""
    import os
    import subprocess
    import sys

    code = re.search(r"## In a pytest test\n.*?```python\n(.*?)```", DOCS.read_text(), re.S)
    assert code is not None
    source = code.group(1).replace(
        "from shop.orders import", "from tests.tools.test_history import"
    )
    source = source.replace('"tests/histories/order-17.history"', repr(str(GOLDEN)))
    (tmp_path / "test_order_17.py").write_text(source)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "trio_mode=true",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_order_17.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    assert "2 passed" in done.stdout
