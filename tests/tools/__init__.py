"""Tests of actors/_tools and actors.testing: the command line, the web inspector, history files, the test kit."""
