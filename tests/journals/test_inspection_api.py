"""What `storage` offers tools that inspect a journal: lenient decoding of
values whose class is not imported, and who holds an LMDB journal."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

import storage
from storage import EncodeError, JournalLocked, LMDBJournal, Opaque, decode, encode

ROOT = Path(__file__).resolve().parents[2]


def _gone_value() -> bytes:
    """A value holding a class registered as "tests.inspection.Gone", encoded
    in another process that had the class (this one never imports it)."""
    script = textwrap.dedent(
        """
        import sys, attrs, storage

        @storage.serializable(name="tests.inspection.Gone")
        @attrs.frozen
        class Gone:
            cents: int
            tags: tuple

        sys.stdout.write(storage.encode({"total": Gone(1250, ("a",)), "n": 1}).hex())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return bytes.fromhex(done.stdout)


def test_lenient_decoding_gives_placeholders_only_inside_the_block():
    data = _gone_value()
    with pytest.raises(ValueError, match=r"tests\.inspection\.Gone"):
        decode(data)
    with storage.lenient_decoding():
        value = decode(data)
    gone = Opaque("tests.inspection.Gone", {"cents": 1250, "tags": ("a",)})
    assert {"total": gone, "n": 1} == value
    with pytest.raises(ValueError, match=r"tests\.inspection\.Gone"):
        decode(data)  # the block ended
    with pytest.raises(EncodeError):
        encode(value)  # a placeholder can never be written back


def test_lenient_decoding_reaches_the_trio_run_started_inside_it():
    data = _gone_value()

    async def main() -> object:
        await trio.lowlevel.checkpoint()
        return decode(data)

    with storage.lenient_decoding():
        assert "tests.inspection.Gone" == trio.run(main)["total"].name


def test_lenient_decoding_still_refuses_bytes_that_are_not_an_encoding():
    with storage.lenient_decoding(), pytest.raises(ValueError):
        decode(b"\xc1")


async def test_holder_names_the_system_that_holds_the_journal(tmp_path):
    journal = LMDBJournal(tmp_path / "j")
    assert storage.JournalHolder(False, None) == journal.holder()  # nothing there yet
    async with journal:
        assert storage.JournalHolder(True, os.getpid()) == LMDBJournal(tmp_path / "j").holder()
        with pytest.raises(JournalLocked) as info:
            await LMDBJournal(tmp_path / "j").open()
        assert os.getpid() == info.value.pid
        assert f"pid {os.getpid()}" in str(info.value)
    assert storage.JournalHolder(False, None) == LMDBJournal(tmp_path / "j").holder()
    async with LMDBJournal(tmp_path / "j", readonly=True) as reader:
        assert False is reader.holder().held  # readers take no lock
