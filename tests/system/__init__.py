"""Tests of actors/_system: the facade, open and recovery, operations (cancel, retry, fork, mail, cleanup), control, nodes."""
