"""``import`` validates like ``start``: a history file is held to what the
runtime checks when it is given the same things. Every malformed file exits
5 with one line naming the place in the file and what is wrong, and writes
nothing; none ends in a traceback.

The files are the version-1 golden file (an order at ``orders/o-17``,
waiting, with one step done and a message unread) with one thing broken.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import actors
from actors._tools import _history
from actors._tools._cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests" / "history_v1.history").read_text())

Doc = dict[str, Any]


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def one(doc: Doc) -> Doc:
    return doc["instances"][0]


def edit(change: Callable[[Doc], None]) -> Callable[[], str]:
    def make() -> str:
        doc = copy.deepcopy(GOLDEN)
        change(doc)
        return json.dumps(doc)

    return make


def setting(*path_and_value: Any) -> Callable[[], str]:
    *path, value = path_and_value

    def change(doc: Doc) -> None:
        target = one(doc)
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit(change)


def moved(address: str, params: list[str], process: str = "orders/:order_id"):
    def change(doc: Doc) -> None:
        one(doc).update(address=address, process=process)
        one(doc)["record"]["params"] = params

    return edit(change)


def deep_file() -> str:
    head = '{"format": "actors-history", "version": 1, "address": "x", "instances": '
    return head + "[" * 100_000 + "]" * 100_000 + "}"


# (file, what the one line names: its place in the file, and words of what is wrong)
MALFORMED: dict[str, tuple[Callable[[], str], list[str]]] = {
    "nested 100,000 deep": (deep_file, ["line 1 column", "more than 200 levels"]),
    "a value nested 900 deep": (
        setting("mail", 0, "payload", nested(900)),
        ["instances[0]['mail'][0]['payload'][0]", "more than 200 levels"],
    ),
    "a status that is none": (
        setting("status", "<script>"),
        ["instances[0]['status']", "'<script>'", "not a status"],
    ),
    "corrupt is no status to import": (setting("status", "corrupt"), ["['status']"]),
    "a param holding '/'": (
        moved("orders/raw/evil", ["raw/evil"]),
        ["instances[0]['record']['params'][0]", "no '/'"],
    ),
    "raw/evil under web/:id": (
        moved("web/raw/evil", ["raw"], "web/:id"),
        ["instances[0]['address']", "'web/raw'"],
    ),
    "an address with NUL": (
        moved("orders/o-\x0017", ["o-\x0017"]),
        ["instances[0]['address']", "NUL"],
    ),
    "an address that is not its template's": (
        moved("orders/o-18", ["o-17"]),
        ["instances[0]['address']", "'orders/o-17'"],
    ),
    "params the template does not take": (
        moved("orders/o-17", ["o-17", "x"]),
        ["instances[0]['record']['params']", "takes 1"],
    ),
    "a template with an empty segment": (
        moved("orders//o-17", ["o-17"], "orders//:order_id"),
        ["instances[0]['process']", "not a process template"],
    ),
    "a parent with a control character": (
        setting("record", "parent", "shop\x07"),
        ["instances[0]['record']['parent']", "U+0007"],
    ),
    "a restart type that is none": (
        setting("record", "restart", "sometimes"),
        ["instances[0]['record']['restart']", "'sometimes'"],
    ),
    "a negative run": (setting("record", "run", -1), ["instances[0]['record']", "run number -1"]),
    "a timer due at NaN": (
        edit(lambda doc: one(doc)["timers"].append({"run": 0, "effect": 3, "due": float("nan")})),
        ["instances[0]['timers'][1]['due']", "nan"],
    ),
    "a timer due past the year 3000": (
        edit(lambda doc: one(doc)["timers"].append({"run": 0, "effect": 3, "due": 1e300})),
        ["instances[0]['timers'][1]['due']", "1e+300"],
    ),
    "an effect numbered 0": (
        setting("runs", 0, "log", 0, "effect", 0),
        ["instances[0]['runs'][0]['log'][0]['effect']"],
    ),
    "a signal with NUL inside": (
        setting("mail", 0, "signal", "no\x00te"),
        ["instances[0]['mail'][0]['signal']", "NUL"],
    ),
    "a send key with a newline": (
        setting("send_keys", ["k\n1"]),
        ["instances[0]['send_keys'][0]", "U+000A"],
    ),
    "a send key past its limit": (
        setting("send_keys", ["k" * 201]),
        ["instances[0]['send_keys'][0]", "200 bytes"],
    ),
    "a consumer with an empty name": (
        setting("consumers", {"": 0}),
        ["instances[0]['consumers']['']", "not a name"],
    ),
    "an incarnation of another status": (
        edit(
            lambda doc: one(doc)["incarnations"].append(
                {
                    "incarnation": 1,
                    "process": "orders/:order_id",
                    "status": "<img>",
                    "replaced": 1.0,
                    "record": one(doc)["record"],
                }
            )
        ),
        ["instances[0]['incarnations'][0]['status']", "'<img>'"],
    ),
    "an int of 10,000 digits": (
        lambda: json.dumps(GOLDEN).replace('"run": 0', '"run": ' + "9" * 10_000, 1),
        ["not JSON", "digits"],
    ),
    "a huge value in a message": (
        setting("status", "x" * 100_000),
        ["instances[0]['status']", "'xxxxx"],
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_history_exits_5_with_one_line_and_writes_nothing(case, tmp_path, capsys):
    make, words = MALFORMED[case]
    path = tmp_path / "bad.history"
    path.write_text(make(), encoding="utf-8", errors="surrogatepass")
    journal = tmp_path / "journal"
    assert 5 == cli_main(["--journal", str(journal), "import", str(path)])
    out, err = capsys.readouterr()
    assert "" == out
    lines = err.splitlines()
    assert 1 == len(lines), err[:2000]
    assert "Traceback" not in err
    assert len(lines[0]) < 600, lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert not journal.exists()  # no journal was made for it
    # The testing kit refuses it alike, with the error the documentation names.
    with pytest.raises(actors.HistoryFormatError):
        _history.loads(path.read_bytes())


def test_the_golden_file_passes_every_check():
    history = _history.loads(json.dumps(GOLDEN).encode())
    assert "orders/o-17" == history.address
    # A history with a child: the address is its parent's, then its own template's.
    doc = copy.deepcopy(GOLDEN)
    child = copy.deepcopy(one(doc))
    child.update(address="orders/o-17/parcel/p-1", process="parcel/:parcel_id")
    child["record"].update(params=["p-1"], parent="orders/o-17")
    doc["instances"].append(child)
    assert 2 == len(_history.loads(json.dumps(doc).encode()).instances)
    child["address"] = "parcel/p-1"  # not under its parent
    with pytest.raises(actors.HistoryFormatError, match=r"instances\[1\]\['address'\]"):
        _history.loads(json.dumps(doc).encode())


@actors.process("deep/:id")
async def deep_value(ctx: actors.Context, id: str, *, depth: int) -> Any:
    await ctx.step(nested, depth)
    await ctx.wait(actors.Signal("never"))


@pytest.mark.parametrize("depth", [300, 900])
async def test_export_of_a_value_too_deep_for_a_history_says_so_in_one_line(
    depth, tmp_path, capsys, autojump_clock
):
    from tests.tools.test_history import cli, lmdb_store

    store = lmdb_store(tmp_path / "production")
    async with store.open(deep_value) as system:
        await system.start(deep_value, "d-1", depth=depth)
        await actors.testing.wait_quiescent(system)
    capsys.readouterr()
    assert 1 == await cli(str(tmp_path / "production"), "export", "deep/d-1")
    out, err = capsys.readouterr()
    assert "" == out
    (line,) = err.splitlines()
    assert "cannot export the history of 'deep/d-1'" in line and "more than 200 levels" in line
