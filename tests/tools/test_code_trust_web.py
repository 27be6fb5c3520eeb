"""The web inspector's "Resume the compensation" on a forged history runs
nothing: the action runs the command line (``resume-compensation``), and
the system that opens the journal next parks the instance again with a
WARNING instead of calling the ``os:system`` the file names (see
tests/tools/test_code_trust.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="install the 'web' extra")

from actors._tools._web import create_app
from actors._tools._web._actions import ACTIONS, Runner
from storage import LMDBJournal
from tests.runtime_helpers import wait_status
from tests.tools.test_code_trust import assert_refused, forged_history, lmdb_store
from tests.tools.test_web_actions import GUARD, post, text_of, tok


@pytest.mark.slow  # the action's command line runs in a process of its own, on real time
async def test_the_inspectors_resume_action_on_a_forged_history_runs_nothing(tmp_path, caplog):
    path = tmp_path / "laptop"
    laptop = lmdb_store(path)
    forged, marker = await forged_history(tmp_path, "compensation_stuck")
    assert 0 == await laptop.cli("import", str(forged))
    async with LMDBJournal(path, readonly=True) as journal:
        app = create_app(
            journal, source=str(path), runner=Runner(str(path)), actions=ACTIONS, guard=GUARD
        )
        session = GUARD.new_session()
        fields = {"action": "resume-compensation", "address": "trust/o-1"}
        status, _, body = await post(app, fields, session=session, token=tok(session, fields))
    assert 200 == status, body
    assert "resumed trust/o-1" in text_of(body)
    async with laptop.open() as system:
        handle = system.get("trust/o-1")
        assert "compensation_stuck" == await wait_status(handle, "compensation_stuck")
        assert_refused(handle, marker, caplog)
