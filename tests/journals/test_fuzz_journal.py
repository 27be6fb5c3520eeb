"""A fuzzer over damaged journals: one mutation of one record, in every
sub-database and of every kind, and the system must cope.

For each (database, mutation kind) hypothesis draws a record of that database
and the mutation's argument, applies it to a copy of a small journal (see
tests/journal_damage.py) and checks, through `journal_damage.check`, that:
the system opens; every undamaged instance finishes with its expected result;
the damaged one is fine, ends the way its calls report, or is corrupt with
every call raising `JournalCorrupt` naming database and key; and
``python -m actors show`` of every instance prints an error, never a traceback.

Bounded for CI (up to 10 examples per pair, some 460 journals: 2 per pair in
the fast lane, the rest marked slow; set FUZZ_JOURNAL_EXAMPLES for a longer
run). What it tried is printed at the end
(and given to hypothesis as events: ``--hypothesis-show-statistics``).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from tests import journal_damage as jd
from tests.strategies import journal_mutations

EXAMPLES = int(os.environ.get("FUZZ_JOURNAL_EXAMPLES", "10"))
TRIED: Counter[tuple[str, str, str]] = Counter()  # (database, kind, outcome of the damaged one)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "journal"
    jd.build(path)
    return path


def _fuzzed(examples: int):
    """The fuzzer's settings, over every (database, mutation kind) pair."""

    def wrap(test):
        test = given(data=st.data())(test)
        test = settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )(test)
        test = pytest.mark.parametrize("kind", jd.MUTATIONS)(test)
        return pytest.mark.parametrize("database", jd.DATABASES)(test)

    return wrap


# The fast lane damages each pair twice; the slow lane (CI) tries the rest.
FAST_EXAMPLES = 2


@_fuzzed(FAST_EXAMPLES)
def test_one_damaged_record_hides_only_its_instance(base, database, kind, data):
    _damage_one(base, database, kind, data)


@pytest.mark.slow  # some 370 damaged journals
@_fuzzed(max(EXAMPLES - FAST_EXAMPLES, 1))
def test_more_damaged_records_hide_only_their_instance(base, database, kind, data):
    _damage_one(base, database, kind, data)


def _damage_one(base, database, kind, data) -> None:
    keys = [key for name, key in jd.records(base) if name == database]
    key = data.draw(st.sampled_from(keys), label="key")
    arg = data.draw(journal_mutations(kind), label="arg")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "journal"
        jd.copy_journal(base, path)
        jd.damage(path, database, key, kind, arg)
        logging.disable(logging.CRITICAL)  # corrupt instances log errors, as they should
        try:
            outcomes = jd.check(path, database, key)
        finally:
            logging.disable(logging.NOTSET)
    damaged = next((a for a in jd.ADDRESSES if jd.instance_of(database, key) == jd.iid(a)), None)
    outcome = outcomes.get(damaged, "ok") if damaged else "ok"
    event(f"{database} {kind}: {outcome}")
    TRIED[(database, kind, outcome)] += 1


def test_fuzz_summary(capsys):
    """Print what the fuzzer tried (runs after it, in file order)."""
    if not TRIED:
        pytest.skip("the fuzzer did not run in this session")
    lines = [f"{'database':<10} {'mutation':<15} outcomes of the damaged instance"]
    pairs = sorted({(d, k) for d, k, _ in TRIED})
    for database, kind in pairs:
        found = {o: n for (d, k, o), n in TRIED.items() if (d, k) == (database, kind)}
        lines.append(
            f"{database:<10} {kind:<15} " + ", ".join(f"{o} x{n}" for o, n in sorted(found.items()))
        )
    with capsys.disabled():
        print(f"\njournal fuzzer: {sum(TRIED.values())} damaged journals\n" + "\n".join(lines))
    # With the fuzzer run in full, every database met every kind of mutation.
    if len(pairs) > 1:
        assert {(d, k) for d in jd.DATABASES for k in jd.MUTATIONS} == set(pairs)
