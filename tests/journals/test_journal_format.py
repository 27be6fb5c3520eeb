"""The LMDB journal's format marker: written on creation, checked on every
open; a journal of another format is refused, never misread.

(PostgreSQL keeps its schema version and migrations: see
test_postgres_journal.py.)"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate, pairwise
from typing import Any

import attrs
import lmdb
import pytest
from hypothesis import given, settings, strategies as st

import actors
from storage import InstanceRecord, JournalCorrupt, LMDBJournal, Txn, encode, instance_id
from storage._stored import EMPTY, RECORD_KEYS, RecordShapeError
from tests import strategies as S

A = instance_id("a")


def _set_format(path, value: bytes | None) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    try:
        meta = env.open_db(b"meta")
        with env.begin(write=True, db=meta) as txn:
            if value is None:
                txn.delete(b"format")
            else:
                txn.put(b"format", value)
    finally:
        env.close()


def _get_format(path) -> bytes | None:
    env = lmdb.open(str(path), max_dbs=16, readonly=True)
    try:
        with env.begin(db=env.open_db(b"meta", create=False)) as txn:
            return txn.get(b"format")
    finally:
        env.close()


async def _journal_with_an_instance(path) -> None:
    async with LMDBJournal(path) as j:
        txn = Txn()
        txn.put_instance(
            A, address="a", process="p", status="running", record=InstanceRecord(input={"n": 0})
        )
        await j.commit(txn)


async def test_a_new_journal_records_its_format_and_reopens(tmp_path):
    path = tmp_path / "journal"
    await _journal_with_an_instance(path)
    assert b"1" == _get_format(path)
    async with LMDBJournal(path) as j:
        with j.reader() as r:
            assert {"n": 0} == r.instance(A).record.input


@pytest.mark.parametrize("readonly", [False, True])
async def test_an_older_format_is_refused_naming_both_versions(tmp_path, readonly):
    path = tmp_path / "journal"
    await _journal_with_an_instance(path)
    _set_format(path, b"0")
    with pytest.raises(JournalCorrupt) as caught:
        await LMDBJournal(path, readonly=readonly).open()
    message = str(caught.value)
    assert "holds journal format 0" in message
    assert "reads format 1 only" in message
    assert "open it with the version of the library that wrote it (format 0)" in message
    assert ("meta", b"format") == (caught.value.database, caught.value.key)
    assert b"0" == _get_format(path)  # refused, not rewritten


@pytest.mark.parametrize("readonly", [False, True])
async def test_a_newer_format_is_refused_with_upgrade_advice(tmp_path, readonly):
    path = tmp_path / "journal"
    await _journal_with_an_instance(path)
    _set_format(path, b"2")
    with pytest.raises(JournalCorrupt, match=r"holds journal format 2.*upgrade the library"):
        await LMDBJournal(path, readonly=readonly).open()
    assert b"2" == _get_format(path)


async def test_a_journal_without_a_format_marker_is_refused_when_read_only(tmp_path):
    path = tmp_path / "journal"
    await _journal_with_an_instance(path)
    _set_format(path, None)
    with pytest.raises(JournalCorrupt, match="has no journal format marker"):
        await LMDBJournal(path, readonly=True).open()


async def test_a_system_refuses_a_journal_of_another_format(tmp_path):
    path = tmp_path / "journal"
    await _journal_with_an_instance(path)
    _set_format(path, b"2")
    with pytest.raises(JournalCorrupt, match="format 2"):
        async with actors.open_system(LMDBJournal(path), []):
            pass  # pragma: no cover - refused before


# -- log entries: typed in memory, the same maps on disk ------------------------------


def test_a_log_entry_round_trips_through_its_stored_map_keeping_unknown_keys():
    from actors._kernel._log import NO_VALUE, LogEntry

    stored = {
        "k": "step",
        "n": "charge",
        "h": b"\x01",
        "a": 2,
        "f": 1,
        "key": "o/1/0/charge/1",
        "later": {"x": 1},
    }
    entry = LogEntry.from_stored(stored)
    assert (2, 1, NO_VALUE, {"later": {"x": 1}}) == (
        entry.attempt,
        entry.failures,
        entry.value,
        entry.extra,
    )
    assert not entry.is_outcome
    assert stored == entry.to_stored()
    outcome = {"k": "wait", "n": "go", "h": b"", "v": None, "m": 7, "s": "go"}
    assert outcome == LogEntry.from_stored(outcome).to_stored()  # a None value is a value
    assert LogEntry.from_stored(outcome).is_outcome


def _outcome(read: Callable[[Any], Any], stored: Any) -> Any:
    """What ``read`` makes of ``stored``: its value, or the words of its refusal."""
    try:
        return read(stored)
    except RecordShapeError as exc:
        return f"RecordShapeError: {exc}"


@settings(max_examples=500, deadline=None)
@given(S.log_entry_maps(), st.booleans())
def test_a_log_entry_reads_the_same_whether_its_shape_was_seen_before_or_not(stored, seen):
    from storage import LogEntry

    if seen:  # a well-formed entry of the same shape came first
        _outcome(LogEntry.from_stored, dict.fromkeys(stored, None) | {"k": "wait"})
    first, again = _outcome(LogEntry.from_stored, stored), _outcome(LogEntry.from_stored, stored)
    expected = _outcome(LogEntry._checked, stored)
    assert expected == first == again
    if isinstance(first, LogEntry):
        assert [type(v) for v in attrs.astuple(expected, recurse=False)] == [
            type(v) for v in attrs.astuple(first, recurse=False)
        ]


# Entries that read (a long log is mostly these), beside maps of any shape.
_WAITS = st.builds(
    lambda name, value: {"k": "wait", "n": name, "h": b"", "v": value, "m": 1},
    st.text(max_size=2),
    st.integers(),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_WAITS | S.log_entry_maps(), max_size=5),
    st.none() | st.lists(st.integers(0, 400) | st.integers(-5, -1), max_size=3),
)
def test_a_run_s_log_reads_in_one_pass_as_entry_by_entry(maps, cuts):
    # A wake decodes a run's whole log in one pass; it must read what
    # reading each stored value alone reads, and name the same damaged one,
    # also where the stored values are cut elsewhere than between entries
    # (a cut -i: between entries i and i + 1; two entries in one value, say).
    from storage import _reading as rd

    values = [encode(stored) for stored in maps]
    if cuts is not None:
        joined, bounds = b"".join(values), [0, *accumulate(map(len, values))]
        at = {bounds[-cut % len(bounds)] if cut < 0 else cut % (len(joined) + 1) for cut in cuts}
        ends = sorted(at | {len(joined)})
        values = [joined[start:end] for start, end in pairwise([0, *ends])]
    rows = list(enumerate(values, start=1))

    def key(seq: int) -> bytes:
        return seq.to_bytes(4, "big")

    def outcome(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except JournalCorrupt as exc:
            return exc.key

    one_by_one = outcome(lambda: {seq: rd.read_entry(value, key(seq)) for seq, value in rows})
    assert one_by_one == outcome(lambda: rd.read_entries(rows, key))


@settings(max_examples=300, deadline=None)
@given(S.log_entry_maps())
def test_a_log_entry_is_frozen_and_built_as_init_builds_it(stored):
    from storage import LogEntry

    try:
        entry = LogEntry._checked(stored)
    except RecordShapeError:
        return
    fields = attrs.asdict(entry, recurse=False)
    built = LogEntry.build(**fields)
    assert type(built) is LogEntry
    assert built == LogEntry(**fields) == entry
    for read in (built, LogEntry.from_stored(stored)):
        assert type(read) is LogEntry
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            read.value = 1  # type: ignore[misc]


go = actors.Signal("go")


async def _charge(amount: int) -> dict:
    return {"charged": amount}


@actors.process("fmt/:id")
async def formatted(ctx: actors.Context, id: str) -> str:
    await ctx.step(_charge, 5, name="charge")
    _signal, payload = await ctx.receive(go)
    await ctx.sleep(10)
    return payload


async def test_the_log_a_run_writes_keeps_the_stored_format(tmp_path, autojump_clock):
    from tests.runtime_helpers import Opener

    opener = Opener(tmp_path)
    iid = instance_id("fmt/1")
    async with opener(formatted) as system:
        handle = await system.start(formatted, "1")
        await system.send("fmt/1", go, "p")
        assert "p" == await handle.result()
        with system.journal.reader() as r:
            stored = r.log(iid, 0)
    [step, wait, sleep] = [stored[seq] for seq in (1, 2, 3)]
    assert {"k", "n", "h", "a", "f", "c", "key", "v", "p"} == set(step)
    # Each argument's digest: 4 bytes per positional one, a map of keywords.
    assert [bytes, dict] == [type(part) for part in step["p"]]
    assert [4, {}] == [len(step["p"][0]), step["p"][1]]  # one positional argument, 5
    assert ("step", "charge", 1, 0, 0, {"charged": 5}) == (
        step["k"],
        step["n"],
        step["a"],
        step["f"],
        step["c"],
        step["v"],
    )
    assert step["key"].startswith("fmt/1/")
    assert {"k": "wait", "n": "go", "h": b"", "v": "p", "m": wait["m"], "s": "go"} == wait
    assert {"k", "n", "h", "v", "due"} == set(sleep) and sleep["v"] is None


_RECORD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.just(()),
)


@given(
    st.dictionaries(
        st.sampled_from([f.name for f in attrs.fields(InstanceRecord) if f.name != "extra"]),
        _RECORD_VALUES,
    ),
    st.dictionaries(st.sampled_from(["zz", "new_field"]), st.integers(), max_size=2),
)
def test_a_record_is_stored_as_its_fields_away_from_their_defaults(fields, extra):
    # The definition to_stored is written out from (see _write_record_to_stored):
    # run and incarnation always; a container field when not empty; any other
    # field when it is not its default; unknown fields as they were.
    record = attrs.evolve(InstanceRecord(), **fields, extra=extra)
    expected: dict[str, Any] = {}
    for key, (name, _) in RECORD_KEYS.items():
        value, default = getattr(record, name), getattr(attrs.fields(InstanceRecord), name).default
        if name in ("run", "incarnation") or (
            bool(value) if default in ((), EMPTY) else value != default
        ):
            expected[key] = value
    expected.update(extra)
    assert expected == record.to_stored()
    assert list(expected) == list(record.to_stored())  # in a stable order


_RECORD_KEYS = [*RECORD_KEYS, "zz"]  # the stored keys, and one of another version
_STORED_VALUES = st.one_of(
    _RECORD_VALUES,
    st.integers(-1, 2**33),
    st.just([{"at": 1.0, "id": "c"}]),
    st.lists(st.one_of(st.just({"at": 1}), st.just({"id": "x"}), st.integers()), max_size=2),
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(_RECORD_KEYS), _STORED_VALUES))
def test_a_record_reads_the_same_by_its_shape_reader_as_field_by_field(stored):
    read = InstanceRecord.from_stored
    first, again = _outcome(read, stored), _outcome(read, stored)
    expected = _outcome(InstanceRecord._checked, stored)
    assert expected == first == again
    if isinstance(first, InstanceRecord):
        assert [type(v) for v in attrs.astuple(expected, recurse=False)] == [
            type(v) for v in attrs.astuple(first, recurse=False)
        ]


_FIELD_NAMES = [f.name for f in attrs.fields(InstanceRecord)]


@given(
    st.dictionaries(st.sampled_from(_FIELD_NAMES), _RECORD_VALUES),
    st.dictionaries(st.sampled_from(_FIELD_NAMES), _RECORD_VALUES),
)
def test_a_record_evolves_as_attrs_evolve_makes_it(fields, changes):
    record = attrs.evolve(InstanceRecord(), **fields)
    changed = record.evolve(**changes)
    assert attrs.evolve(record, **changes) == changed
    assert attrs.evolve(InstanceRecord(), **fields) == record  # the original is untouched
    with pytest.raises(TypeError, match="no field 'nope'"):
        record.evolve(nope=1)


@given(
    st.dictionaries(st.sampled_from(_FIELD_NAMES), _RECORD_VALUES),
    st.dictionaries(st.sampled_from(_FIELD_NAMES), _RECORD_VALUES),
)
def test_every_way_of_making_a_record_gives_a_frozen_instance_record(fields, changes):
    # new, evolve and the shape readers fill in an unfrozen twin and freeze
    # it (see storage._records._Unfrozen): what they hand out is exactly an
    # InstanceRecord, equal to what __init__ makes, and refuses assignment.
    made = InstanceRecord.new(**fields)
    evolved = made.evolve(**changes)
    stored = {"params": ["p"], "run": 2, "inc": 3, "updated": 1.5}
    read = InstanceRecord.from_stored(dict(stored))
    assert (InstanceRecord(**fields), attrs.evolve(made, **changes)) == (made, evolved)
    assert InstanceRecord(params=["p"], run=2, incarnation=3, updated=1.5) == read
    for record in (made, evolved, read):
        assert InstanceRecord is type(record)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            record.run = 9  # type: ignore[misc]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            del record.run  # type: ignore[misc]
