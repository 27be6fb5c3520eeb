"""Tests of storage/: the codec, records, the journals (LMDB, PostgreSQL, simulated) and their contract."""
