"""Tests of actors/_kernel: effects, the driver, the mailbox, the log and its records, failures, checks, tracing and logging."""
