"""Tests of actors/_actor: an instance and its parts (arrivals, children, the runner)."""
